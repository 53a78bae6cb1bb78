"""Which process a pid really is (S3): the one check before any pid we read is trusted.

A pid read from a file — a server's pid file, a lab's leftover record, the watchdog's
own — may belong to anything after a reboot or a crash: pids are reused. So a pid is
only acted on when the process behind it is provably the one we mean: the same start
time for an owner, and for a server also its binary and its data folder. Every "is this
server ours?" question of the dev environment and of the labs (status, stop, the labs'
refusal to flush or stop a server that is not theirs, the clean-up of a killed kernel's
private Redis) goes through `is_server`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

#: Two start times closer than this are the same process (psutil rounds create_time).
_SAME_START_S = 1.0


def alive(pid: int, created: float) -> bool:
    """Whether `pid` is still the process that started at `created` (a reused pid has a
    different start time: treated as dead), and not a zombie."""
    try:
        proc = psutil.Process(pid)
        return (abs(proc.create_time() - created) < _SAME_START_S
                and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def is_server(pid: int, binaries: str | tuple[str, ...], folder: Path, *,
              created: float | None = None) -> bool:
    """S3: is `pid` a `binaries` server of `folder`? Its name or executable must be one of
    those binaries and its working folder (both servers chdir into their data folder) or
    command line must name `folder`; with `created`, it must also be the process that
    started then. After a reboot a pid file's pid may belong to anything."""
    wanted = (binaries,) if isinstance(binaries, str) else binaries
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if created is not None and abs(proc.create_time() - created) >= _SAME_START_S:
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


def read_pid(path: Path) -> int | None:
    """The pid on the first line of a pid file, or None (missing, empty, garbage). Not
    trusted yet: check it with `is_server` before acting on it."""
    try:
        return int(path.read_text().splitlines()[0].strip())
    except (ValueError, IndexError, OSError):
        return None
