"""Schema migrations (Alembic), runnable from code: `teamdesk db upgrade` and the labs."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config

_HERE = Path(__file__).parent
#: Alembic keeps the migration being run in module globals (`alembic.context`, `op`), so
#: two upgrades in threads of one process run each other's steps against the wrong
#: database ("relation … already exists"): a hub provisions its learners in threads.
#: One upgrade at a time per process; processes are independent.
_ONE_AT_A_TIME = threading.Lock()


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
    """Bring the database at `database_url` to `revision` (idempotent). Safe from several
    threads at once (`_ONE_AT_A_TIME`)."""
    with _ONE_AT_A_TIME:
        command.upgrade(alembic_config(database_url), revision)
