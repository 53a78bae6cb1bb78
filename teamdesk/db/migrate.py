"""Schema migrations (Alembic), runnable from code: `teamdesk db upgrade` and the labs."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

_HERE = Path(__file__).parent


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url)
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database at `database_url` to `revision` (idempotent)."""
    command.upgrade(alembic_config(database_url), revision)
