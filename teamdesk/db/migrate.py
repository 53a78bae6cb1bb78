"""Schema migrations (Alembic), runnable from code: `teamdesk db upgrade` and the labs."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

_HERE = Path(__file__).parent


def alembic_config(database_url: str) -> Config:
    """The URL travels in `config.attributes`, not through the ini parser: there a `%` of a
    percent-encoded password (`p%40ss`) is read as interpolation and the migration fails
    with "invalid interpolation syntax" (S2). The main option is set escaped for tools that
    read it, and error messages show it redacted."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["database_url"] = database_url
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database at `database_url` to `revision` (idempotent)."""
    command.upgrade(alembic_config(database_url), revision)
