"""A class on shared servers: each learner gets a PostgreSQL role and a Redis user of their own.

    learners = provision(admin_db_url, admin_redis_url, ["learner01", "learner02"])
    spawner.environment.update(learners[0].environment())   # a JupyterHub pre_spawn_hook
    cleanup(admin_db_url, admin_redis_url)                   # after class: clones and keys
    remove(admin_db_url, admin_redis_url, ["learner02"])     # a learner who left

(`teamdesk classroom add|remove|cleanup|list` on the command line.) For each learner:

- **a PostgreSQL role** of the learner's name: LOGIN, not a superuser, CREATEDB (each lab
  clones a database), a CONNECTION LIMIT, and a member of the NOLOGIN group `GROUP`, by
  which `list`, `cleanup` and `remove` know a learner (they touch no other role);
- **their database** of the same name, owned by them, that PUBLIC may neither connect to nor
  make temporary tables in;
- **their template**, built as them (`teamdesk.db.templates.ensure_template` on the
  administrator's connection with `role=<learner>`): every table of every lab clone is then
  theirs. Built here so a learner's first lab only clones; a lab builds it if it is missing;
- **a Redis ACL user** of the learner's name, confined to the keys `td:<learner>:*`, with
  the commands of `REDIS_COMMANDS` only (`devkit.classroom_redis`);
  `TEAMDESK_QUEUE_PREFIX=td:<learner>` puts every
  queue prefix the lab makes under it (`teamdesk.config.Settings.queue_namespace`).

Passwords are derived, `HMAC(class secret, learner)`: provisioning again (a hub does, at
every spawn) gives the same passwords, so it never breaks a learner who is running. The
class secret is a file made once, readable by its owner alone: `$TEAMDESK_CLASS_SECRET_FILE`,
else `~/.config/teamdesk/class-secret`. The administrator is a PostgreSQL superuser and a
Redis user allowed `ACL`, `SCAN` and `UNLINK` (the default user of a password-protected
Redis is); the embedded servers of a laptop need none of this.

What a learner can still see of another: the names of databases and roles (PostgreSQL's
shared catalogues) and who is connected to which database (`pg_stat_activity`, without the
query text); the *names* of Redis keys — `SCAN` is not confined by key patterns, and
`delete_prefix` and the heartbeat listing need it — so other learners' queue prefixes, job
ids and task ids, never a value; and `INFO`'s server-wide counts. A learner can also load
the servers for everyone (a long Lua script, a large key, many databases).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets as _secrets
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from devkit import classroom_redis
from devkit.classroom_redis import KEY_NAMESPACE
from teamdesk.db.templates import ensure_template, template_name, with_database
from teamdesk.redaction import redact

#: The NOLOGIN role every learner is a member of: how learners are told from other roles.
GROUP = "teamdesk_learners"
#: A learner's name: it names a role, a database, a Redis user and a key prefix. At most
#: 30 characters, so the longest identifier made from it, the template
#: `teamdesk_tpl_<10 hex>_<name>`, stays within PostgreSQL's 63 bytes.
NAME = re.compile(r"[a-z][a-z0-9_]{0,29}")
#: Names that already mean something on the servers.
RESERVED = frozenset({"postgres", "public", "default", "template0", "template1", "admin",
                      "root"})
#: PostgreSQL connections one learner may hold at once (their role's CONNECTION LIMIT):
#: room for the two busiest notebooks (30 and 90, with worker processes) running at once
#: and a third one open, measured as a learner (pg_stat_activity by role, sampled).
CONNECTION_LIMIT = 25

class ClassroomError(ValueError):
    """Bad input or a conflict on the class servers; nothing was changed."""


@dataclass(frozen=True)
class Learner:
    """What a learner's lab needs to know: their URLs and their key namespace."""

    #: The learner's name: their role, database and Redis user.
    name: str
    #: The learner's own role and their own database.
    database_url: str
    #: The learner's Redis ACL user.
    redis_url: str
    #: `td:<name>`: every queue prefix of their labs begins with it.
    queue_prefix: str

    def environment(self) -> dict[str, str]:
        """The variables of the learner's lab (`DATABASE_URL`, `REDIS_URL`,
        `TEAMDESK_QUEUE_PREFIX`), e.g. a JupyterHub spawner's `environment`."""
        return {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url,
                "TEAMDESK_QUEUE_PREFIX": self.queue_prefix}

    def __repr__(self) -> str:  # S2: the URLs carry passwords
        return (f"Learner(name={self.name!r}, database_url={redact(self.database_url)!r}, "
                f"redis_url={redact(self.redis_url)!r}, queue_prefix={self.queue_prefix!r})")


@dataclass
class Removed:
    """What `remove` or `cleanup` dropped for one learner."""

    name: str
    #: Databases dropped (lab clones; with `remove`, their database and template too).
    databases: list[str] = field(default_factory=list)
    #: Redis keys deleted under `td:<name>:`.
    keys: int = 0
    #: `remove` only: the role and the Redis user were dropped.
    role: bool = False
    redis_user: bool = False

    def text(self) -> str:
        gone = [f"{len(self.databases)} database(s)", f"{self.keys} key(s)"]
        gone += ["role"] if self.role else []
        gone += ["Redis user"] if self.redis_user else []
        return f"{self.name}: dropped {', '.join(gone)}"


@dataclass(frozen=True)
class LearnerState:
    """One line of `list`."""

    name: str
    connection_limit: int
    connections: int
    lab_databases: int
    keys: int
    redis_user: bool


# ---------------------------------------------------------------- names and secrets

def check_names(names: Iterable[str]) -> list[str]:
    """The names, each once, in order; all refused at once if any cannot be a learner."""
    if isinstance(names, str):
        names = [names]
    out = list(dict.fromkeys(names))
    bad = [n for n in out if not isinstance(n, str) or not NAME.fullmatch(n)
           or n in RESERVED or n.startswith(("pg_", "teamdesk"))]
    if bad:
        raise ClassroomError(
            f"not a learner name: {', '.join(map(repr, bad))} — 1 to 30 lowercase letters, "
            f"digits or underscores, starting with a letter; not {', '.join(sorted(RESERVED))}"
            f", nor beginning with pg_ or teamdesk")
    if not out:
        raise ClassroomError("no learner named")
    return out


def secret_file() -> Path:
    """Where the class secret lives: `$TEAMDESK_CLASS_SECRET_FILE`, else
    `~/.config/teamdesk/class-secret`."""
    given = os.environ.get("TEAMDESK_CLASS_SECRET_FILE")
    return Path(given) if given else Path.home() / ".config" / "teamdesk" / "class-secret"


def class_secret(path: Path | None = None) -> bytes:
    """The class secret, made once (32 random bytes, hex, in a 0600 file). Lose it and the
    next provisioning sets new passwords: running learners must spawn again. A file that
    others may read or write is refused (S1)."""
    path = path or secret_file()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Written whole beside it, then linked into place: the file appears complete or not
        # at all, so a provisioning beside this one (a hub spawning learners at once) never
        # reads it half-written; the first link wins and the others read that one.
        fd, tmp = tempfile.mkstemp(prefix=".class-secret.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as fh:  # mkstemp's file is 0600 already
                fh.write(_secrets.token_hex(32) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    st = path.stat()
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ClassroomError(f"class secret {path} must be yours and readable by you alone "
                             f"(mode {stat.filemode(st.st_mode)}): chmod 600 {path}")
    value = path.read_text().strip()
    if len(value) < 32:
        raise ClassroomError(f"class secret {path} is empty or too short (32+ characters)")
    return value.encode()


def _password(secret: bytes, service: str, name: str) -> str:
    """The learner's password for `service`, the same every time for one class secret."""
    return hmac.new(secret, f"teamdesk-class/{service}/{name}".encode(),
                    hashlib.sha256).hexdigest()[:32]


# ---------------------------------------------------------------- URLs

def _with_credentials(url: str, user: str, password: str, path: str | None = None,
                      drop: Iterable[str] = ()) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in set(drop)])
    return urlunsplit(parts._replace(netloc=f"{quote(user)}:{quote(password)}@{host}",
                                     path=parts.path if path is None else path, query=query))


def as_role(url: str, role: str) -> str:
    """`url` whose sessions act as `role` (`options=-c role=…`): what an administrator
    builds a learner's template with, so that the learner owns it."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-c role={role}"))
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def learner(admin_database_url: str, admin_redis_url: str, name: str,
            secret: bytes) -> Learner:
    """The learner `name`'s URLs on the administrator's servers (nothing is created)."""
    (name,) = check_names([name])
    return Learner(
        name=name,
        database_url=_with_credentials(admin_database_url, name,
                                       _password(secret, "postgres", name), f"/{name}",
                                       drop=("options",)),
        redis_url=_with_credentials(admin_redis_url, name, _password(secret, "redis", name)),
        queue_prefix=f"{KEY_NAMESPACE}:{name}")


# ---------------------------------------------------------------- PostgreSQL

@contextlib.contextmanager
def _pg(admin_database_url: str, dbname: str = "postgres") -> Iterator[psycopg.Connection]:
    with psycopg.connect(with_database(admin_database_url, dbname), autocommit=True) as conn:
        yield conn


def _members(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT m.rolname FROM pg_auth_members a JOIN pg_roles g ON g.oid = a.roleid "
        "JOIN pg_roles m ON m.oid = a.member WHERE g.rolname = %s ORDER BY 1", (GROUP,))]


def _pg_conflicts(conn: psycopg.Connection, names: list[str]) -> list[str]:
    """Why some names cannot be (re)provisioned: a role or database of that name that is
    not a learner's. Nothing else on the server is ever changed."""
    members = set(_members(conn))
    problems = []
    for name in names:
        if name not in members and conn.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            problems.append(f"role {name!r} exists and is not a learner (not in {GROUP}): "
                            f"choose another name, or GRANT {GROUP} TO {name} to adopt it")
        owner = conn.execute("SELECT pg_get_userbyid(datdba) FROM pg_database "
                             "WHERE datname = %s", (name,)).fetchone()
        if owner and owner[0] != name:
            problems.append(f"database {name!r} exists and belongs to {owner[0]!r}, "
                            f"not to the learner")
    return problems


def _provision_role(conn: psycopg.Connection, name: str, password: str, limit: int) -> None:
    # The password travels as a SCRAM verifier made here: the server (and its statement
    # log) never sees it in clear.
    verifier = conn.pgconn.encrypt_password(password.encode(), name.encode()).decode()
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
    conn.execute(sql.SQL(
        "{} ROLE {} LOGIN NOSUPERUSER CREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
        "CONNECTION LIMIT {} PASSWORD {}").format(
            sql.SQL("ALTER" if exists else "CREATE"), sql.Identifier(name),
            sql.Literal(int(limit)), sql.Literal(verifier)))
    if not exists:
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(GROUP), sql.Identifier(name)))
    if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
            sql.Identifier(name), sql.Identifier(name)))
    conn.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(
        sql.Identifier(name)))


def _check_admin(conn: psycopg.Connection) -> None:
    if not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
        raise ClassroomError("the administrator's database URL must be a superuser's: it "
                             "creates roles and their databases and builds each learner's "
                             "template as that learner")


def _provision_postgres(admin_database_url: str, names: list[str], secret: bytes,
                        limit: int) -> None:
    with _pg(admin_database_url) as conn:
        _check_admin(conn)
        # One provisioning at a time (a hub spawns many learners at once).
        conn.execute("SELECT pg_advisory_lock(hashtext('teamdesk.classroom'))")
        try:
            problems = _pg_conflicts(conn, names)
            if problems:
                raise ClassroomError("; ".join(problems))
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (GROUP,)).fetchone():
                conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(GROUP)))
            # Labs create and drop their databases from the maintenance database.
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE postgres TO {}").format(
                sql.Identifier(GROUP)))
            for name in names:
                _provision_role(conn, name, _password(secret, "postgres", name), limit)
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext('teamdesk.classroom'))")


def _lab_databases(conn: psycopg.Connection, name: str) -> list[str]:
    """Every database `name` owns but their own and their current template: lab clones,
    and templates of older schemas."""
    return [r[0] for r in conn.execute(
        "SELECT datname FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles "
        "WHERE rolname = %s) AND datname NOT IN (%s, %s) ORDER BY 1",
        (name, name, template_name(name)))]


def _drop_database(conn: psycopg.Connection, name: str) -> None:
    ident = sql.Identifier(name)
    conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE false").format(ident))
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


# ---------------------------------------------------------------- the public API

def provision(admin_database_url: str, admin_redis_url: str, names: Iterable[str], *,
              connection_limit: int = CONNECTION_LIMIT, secret: bytes | None = None,
              prebuild: bool = True) -> list[Learner]:
    """Make (or make again, unchanged) each learner's role, database, template and Redis
    user; returns their URLs. Idempotent: a hub may call it at every spawn. Every name is
    checked and every conflict looked for before anything is created."""
    names = check_names(names)
    if isinstance(connection_limit, bool) or not isinstance(connection_limit, int) \
            or connection_limit < 1:
        raise ClassroomError(f"connection_limit must be a positive integer: {connection_limit!r}")
    secret = class_secret() if secret is None else secret
    with classroom_redis.connect(admin_redis_url) as client:
        taken = [n for n in names if classroom_redis.is_learners(client, n) is False]
    if taken:
        raise ClassroomError(f"Redis user(s) {', '.join(taken)} exist and are not learners "
                             f"(their keys are not {KEY_NAMESPACE}:<name>:*)")
    _provision_postgres(admin_database_url, names, secret, connection_limit)
    with classroom_redis.connect(admin_redis_url) as client:
        for name in names:
            classroom_redis.set_user(client, name, _password(secret, "redis", name))
        classroom_redis.save_acl(client)
    if prebuild:
        for name in names:
            ensure_template(as_role(admin_database_url, name))
    return [learner(admin_database_url, admin_redis_url, n, secret) for n in names]


def learners(admin_database_url: str, admin_redis_url: str) -> list[str]:
    """Every provisioned learner: members of `GROUP`, and Redis users with a learner's keys
    (one whose role is gone still has keys to clean)."""
    with _pg(admin_database_url) as conn:
        names = set(_members(conn))
    with classroom_redis.connect(admin_redis_url) as client:
        names |= {u for u in classroom_redis.learner_users(client) if NAME.fullmatch(u)}
    return sorted(names)


def _known(admin_database_url: str, admin_redis_url: str, names: Iterable[str] | None
           ) -> list[str]:
    everyone = learners(admin_database_url, admin_redis_url)
    if names is None:
        return everyone
    names = check_names(names)
    strangers = [n for n in names if n not in everyone]
    if strangers:
        raise ClassroomError(f"not a learner: {', '.join(strangers)} (see `teamdesk "
                             f"classroom list`); nothing of theirs is touched")
    return names


def cleanup(admin_database_url: str, admin_redis_url: str,
            names: Iterable[str] | None = None) -> list[Removed]:
    """Drop the learners' lab databases (every database they own but their own and their
    current template: clones, squats, templates of older schemas — of open labs too) and
    delete their keys under `td:<name>:`; default: every learner. Returns what went."""
    names = _known(admin_database_url, admin_redis_url, names)
    report = [Removed(n) for n in names]
    with _pg(admin_database_url) as conn:
        for r in report:
            for db in _lab_databases(conn, r.name):
                _drop_database(conn, db)
                r.databases.append(db)
    with classroom_redis.connect(admin_redis_url) as client:
        for r in report:
            r.keys = classroom_redis.delete_keys(client, r.name)
    return report


def remove(admin_database_url: str, admin_redis_url: str, names: Iterable[str]
           ) -> list[Removed]:
    """Remove learners whole: their sessions, every database they own, their role, their
    keys and their Redis user."""
    names = _known(admin_database_url, admin_redis_url, names)
    report = [Removed(n) for n in names]
    with _pg(admin_database_url) as conn:
        for r in report:
            r.databases, r.role = _remove_role(admin_database_url, conn, r.name)
    with classroom_redis.connect(admin_redis_url) as client:
        for r in report:
            r.keys = classroom_redis.delete_keys(client, r.name)
            r.redis_user = classroom_redis.delete_user(client, r.name)
        classroom_redis.save_acl(client)
    return report


def _remove_role(admin_database_url: str, conn: psycopg.Connection, name: str
                 ) -> tuple[list[str], bool]:
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
        return [], False
    conn.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(name)))
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                 (name,))
    dropped = [r[0] for r in conn.execute(
        "SELECT datname FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles "
        "WHERE rolname = %s) ORDER BY 1", (name,))]
    for db in dropped:
        _drop_database(conn, db)
    # Objects or grants of theirs in other databases (a classmate's clone of their
    # template, say): dropped there, so the role can go.
    elsewhere = [r[0] for r in conn.execute(
        "SELECT DISTINCT d.datname FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid "
        "WHERE s.refobjid = (SELECT oid FROM pg_roles WHERE rolname = %s) "
        "AND d.datallowconn AND d.datname <> current_database()", (name,))]
    for db in elsewhere:
        with _pg(admin_database_url, db) as other:
            other.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
    return dropped, True


def states(admin_database_url: str, admin_redis_url: str) -> list[LearnerState]:
    """Each learner's connection limit, connections now, lab databases and keys."""
    names = learners(admin_database_url, admin_redis_url)
    out = []
    with classroom_redis.connect(admin_redis_url) as client, _pg(admin_database_url) as conn:
        for name in names:
            row = conn.execute("SELECT rolconnlimit FROM pg_roles WHERE rolname = %s",
                               (name,)).fetchone()
            connections = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                (name,)).fetchone()[0]
            out.append(LearnerState(
                name, row[0] if row else 0, connections,
                len(_lab_databases(conn, name)) if row else 0,
                len(classroom_redis.keys_of(client, name)),
                bool(classroom_redis.is_learners(client, name))))
    return out
