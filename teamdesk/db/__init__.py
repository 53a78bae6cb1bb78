"""Ledger and business tables: models, engine, migrations, the team lock."""
