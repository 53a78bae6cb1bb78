"""Isolated databases cloned from a migrated template (`CREATE DATABASE … TEMPLATE …`).

One migration per schema version, then a fresh database per test, notebook or lab world
in milliseconds, with no shared state and no truncation (procrastinate's approach).

On a server shared by a class each learner's role builds, owns and clones a template of its
own (its name carries the role): a clone keeps the owners of its template's objects, so a
template built by anyone else would give the learner tables they may not use. Every
database made here revokes PUBLIC's CONNECT and TEMPORARY, so one learner cannot open
another's.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from teamdesk.db.migrate import upgrade
from teamdesk.errors import TeamDeskError

_VERSIONS = Path(__file__).parent / "migrations" / "versions"


def with_database(url: str, dbname: str) -> str:
    """`url` naming database `dbname` instead (credentials and query kept)."""
    base, _, query = url.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{dbname}" + (f"?{query}" if query else "")


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(with_database(url, "postgres"), autocommit=True)


def schema_fingerprint() -> str:
    """Changes whenever a migration file changes, so a stale template is never reused."""
    h = hashlib.sha256()
    for path in sorted(_VERSIONS.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:10]


#: PostgreSQL truncates longer identifiers (NAMEDATALEN - 1 bytes): a template name must fit.
MAX_IDENTIFIER = 63
_PLAIN_ROLE = re.compile(r"[a-z0-9_]+")


class TemplateNotOurs(TeamDeskError):
    """The template this role would clone exists but another role owns it: a clone keeps
    its template's objects and their owners, so this role would get tables it may not use
    (`permission denied for table …`), made by someone else, with whatever they put in."""


def template_name(role: str) -> str:
    """The template of `role` for the current schema: `teamdesk_tpl_<fingerprint>_<role>`
    (the role hashed when it is long or not plain). The owner is part of the name, so each
    role clones a template it built itself, and every object in its clones is its own."""
    base = f"teamdesk_tpl_{schema_fingerprint()}_"
    if _PLAIN_ROLE.fullmatch(role) and len(base) + len(role) <= MAX_IDENTIFIER:
        return base + role
    return base + "r" + hashlib.sha256(role.encode()).hexdigest()[:16]


def ensure_template(database_url: str) -> str:
    """The name of the migrated template that the URL's role clones, built once per schema
    and role — by that role (the migration runs as it), so the role owns every table.

    A database of that name owned by another role is refused (`TemplateNotOurs`), never
    reused. The template is ready once it takes no connections (nobody changes it by
    accident). It is not marked `IS_TEMPLATE`, which would let any role with CREATEDB
    clone it: only its owner (and superusers) may. PUBLIC may not connect to it."""
    with _admin(database_url) as conn:
        role = conn.execute("SELECT current_user").fetchone()[0]
        name = template_name(role)
        # Serialise the build of one template across processes (pytest, notebook kernels).
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        try:
            row = conn.execute(
                "SELECT pg_get_userbyid(datdba), datallowconn, datistemplate "
                "FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if row and row[0] != role:
                raise TemplateNotOurs(
                    f"database {name!r}, the template role {role!r} clones its databases "
                    f"from, belongs to role {row[0]!r}: a clone of it would hold that "
                    f"role's tables (permission denied for them here), made by someone "
                    f"else. Have it dropped (`DROP DATABASE {name}` as an administrator, "
                    f"or `teamdesk classroom cleanup`); the next lab builds it again as "
                    f"{role!r}.")
            if row and not row[1] and not row[2]:
                return name
            if row:  # half-built by a process that died, or marked for everyone: rebuild
                if row[2]:
                    conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE false")
                                 .format(sql.Identifier(name)))
                _drop_forced(conn, name, "DROP DATABASE {}")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            _private(conn, name)
            upgrade(with_database(database_url, name))
            conn.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false")
                         .format(sql.Identifier(name)))
            return name
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))


def _private(conn: psycopg.Connection, name: str) -> None:
    """Only the owner (and superusers) may connect to database `name` or make temporary
    tables in it: a new database grants both to PUBLIC, and a clone does not inherit its
    template's grants."""
    conn.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC")
                 .format(sql.Identifier(name)))


def _clone_strategy(conn: psycopg.Connection) -> str:
    """On a server without fsync (the embedded one) and PostgreSQL 15+, copy the template's
    files: two to three times less work per clone than writing every block through the WAL
    (the default since 15), and its checkpoints cost nothing there. Any other server keeps
    its default, which spares everyone else on it a checkpoint per clone."""
    version, fsync = conn.execute(
        "SELECT current_setting('server_version_num')::int, current_setting('fsync')").fetchone()
    return " STRATEGY FILE_COPY" if version >= 150000 and fsync == "off" else ""


def clone_database(database_url: str, prefix: str = "teamdesk_t") -> str:
    """Create a fresh, migrated database, owned by the URL's role and closed to others;
    returns its URL (same server, new name)."""
    template = ensure_template(database_url)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin(database_url) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(
            sql.Identifier(name), sql.Identifier(template), sql.SQL(_clone_strategy(conn))))
        _private(conn, name)
    return with_database(database_url, name)


def drop_database(database_url: str) -> None:
    """Drop a cloned database, disconnecting anything still attached to it."""
    name = database_url.partition("?")[0].rsplit("/", 1)[1]
    with _admin(database_url) as conn:
        _drop_forced(conn, name, "DROP DATABASE IF EXISTS {}")


def _drop_forced(conn: psycopg.Connection, name: str, statement: str) -> None:
    """`statement` (a DROP DATABASE of `name`) WITH (FORCE). A role that is not a superuser
    may not force out a process that is not its own, and an autovacuum worker belongs to
    no role, so a learner's FORCE fails while autovacuum works in their database ("permission
    denied to terminate process"). Then: end the role's own sessions there and drop
    without FORCE, which stops autovacuum itself; nobody else may connect (`_private`)."""
    try:  # autocommit: a refused statement leaves the connection usable
        conn.execute(sql.SQL(statement + " WITH (FORCE)").format(sql.Identifier(name)))
    except psycopg.errors.InsufficientPrivilege:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = %s AND usename = current_user AND pid <> "
                     "pg_backend_pid()", (name,))
        conn.execute(sql.SQL(statement).format(sql.Identifier(name)))
