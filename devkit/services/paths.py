"""The data folder of the embedded servers and the files in it that hold secrets (S1).

Everything the servers keep lives under one project-local, git-ignored folder
(`.teamdesk/`, or `TEAMDESK_DATA_DIR`): their data, logs, pid files, the passwords and the
bookkeeping (`services.json`, `lock`, `owners/`). The folder holds the password files and
the pid files we act on, so one that another account could tamper with is refused, and
every file holding a password (or a URL with one) is written 0600 from the start.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path


class ServiceError(RuntimeError):
    """An embedded service could not be started, reached or stopped; the message says why."""


def data_dir() -> Path:
    """The project-local folder that holds both servers' data, logs and bookkeeping."""
    env = os.environ.get("TEAMDESK_DATA_DIR")
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]  # <checkout>/devkit/services/paths.py
    if (checkout / "pyproject.toml").exists():
        return checkout / ".teamdesk"
    return Path.cwd() / ".teamdesk"


def unsupported_here() -> str | None:
    """Why the embedded servers cannot run on this platform at all, or None."""
    if sys.platform == "win32":
        return ("the embedded PostgreSQL and Redis need Linux or macOS; on Windows use WSL2, "
                "or set DATABASE_URL and REDIS_URL to servers of your own")
    return None


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
def locked(root: Path) -> Iterator[None]:
    """Hold the data folder's lock: one process at a time starts, stops or checks its
    servers, so no two of them start a second server on the same data."""
    why = unsupported_here()
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


def load_state(root: Path) -> dict:
    """The ports recorded in `services.json` (no secrets: those have files of their own)."""
    path = root / "services.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_state(root: Path, state: dict) -> None:
    (root / "services.json").write_text(json.dumps(state, indent=2))


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner alone (0600 from the start, no window): every
    file that holds a password or a URL with one (S1)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def secret(root: Path, name: str) -> str:
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


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    """Whether something accepts connections on `port` of 127.0.0.1."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
