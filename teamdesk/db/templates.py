"""Isolated databases cloned from a migrated template (`CREATE DATABASE … TEMPLATE …`).

One migration per schema version, then a fresh database per test, notebook or lab world
in milliseconds, with no shared state and no truncation (procrastinate's approach).
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from teamdesk.db.migrate import upgrade

_VERSIONS = Path(__file__).parent / "migrations" / "versions"


def _with_db(url: str, dbname: str) -> str:
    base, _, query = url.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{dbname}" + (f"?{query}" if query else "")


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(_with_db(url, "postgres"), autocommit=True)


def schema_fingerprint() -> str:
    """Changes whenever a migration file changes, so a stale template is never reused."""
    h = hashlib.sha256()
    for path in sorted(_VERSIONS.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:10]


def ensure_template(database_url: str) -> str:
    """The name of a migrated template database on that server, created once per schema."""
    name = f"teamdesk_tpl_{schema_fingerprint()}"
    with _admin(database_url) as conn:
        # Serialise template creation across processes (pytest, notebook kernels).
        conn.execute("SELECT pg_advisory_lock(hashtext('teamdesk.template'))")
        try:
            ready = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s AND datistemplate", (name,)
            ).fetchone()
            if ready:
                return name
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            upgrade(_with_db(database_url, name))
            conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
                         .format(sql.Identifier(name)))
            return name
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext('teamdesk.template'))")


def _clone_strategy(conn: psycopg.Connection) -> str:
    """On a server without fsync (the embedded one) and PostgreSQL 15+, copy the template's
    files: two to three times less work per clone than writing every block through the WAL
    (the default since 15), and its checkpoints cost nothing there. Any other server keeps
    its default, which spares everyone else on it a checkpoint per clone."""
    version, fsync = conn.execute(
        "SELECT current_setting('server_version_num')::int, current_setting('fsync')").fetchone()
    return " STRATEGY FILE_COPY" if version >= 150000 and fsync == "off" else ""


def clone_database(database_url: str, prefix: str = "teamdesk_t") -> str:
    """Create a fresh, migrated database; returns its URL (same server, new name)."""
    template = ensure_template(database_url)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin(database_url) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(
            sql.Identifier(name), sql.Identifier(template), sql.SQL(_clone_strategy(conn))))
    return _with_db(database_url, name)


def drop_database(database_url: str) -> None:
    """Drop a cloned database, disconnecting anything still attached to it."""
    name = database_url.partition("?")[0].rsplit("/", 1)[1]
    with _admin(database_url) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
