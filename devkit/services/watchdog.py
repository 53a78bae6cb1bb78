"""The watchdog: a detached process that stops both servers once nobody needs them.

One per data folder (`watchdog.pid` holds its pid and start time). Every second, under the
folder's lock, it prunes dead owners; when nothing pins the servers (`teamdesk services
up`'s `keep` file) and no owner is alive, it stops both and exits. So a SIGKILLed lab or
test run leaves no orphan servers behind.

It remembers the server processes it verified (S3: pid, name and data folder checked, kept
as `psutil.Process`, which also checks the start time before signalling). When the folder
itself disappears, the pid files go with it and nothing could be verified any more, so the
remembered processes are what it stops: a removed `.teamdesk*` folder leaves no server
running on deleted files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from devkit.services.owners import live_owners
from devkit.services.paths import locked
from devkit.services.postgres import pg_pid, stop_postgres
from devkit.services.processes import alive
from devkit.services.redis import redis_pid, stop_redis

_WATCH_INTERVAL_S = 1.0
_STOP_TIMEOUT_S = 10.0
#: The signal each server takes as "shut down now": PostgreSQL's fast shutdown is SIGINT
#: (its SIGTERM waits for every client to disconnect), Redis/Valkey's is SIGTERM.
_STOP_SIGNAL = {"postgres": signal.SIGINT, "redis": signal.SIGTERM}


def _watchdog_pid(root: Path) -> int | None:
    path = root / "watchdog.pid"
    if not path.exists():
        return None
    try:
        pid, created = path.read_text().split()
        return int(pid) if alive(int(pid), float(created)) else None
    except ValueError:
        return None


def ensure_watchdog(root: Path) -> None:
    """Start the watchdog of `root` unless a live one runs (`python -m devkit.services
    watch ROOT`, in a session of its own so a Ctrl-C of the lab does not reach it)."""
    if _watchdog_pid(root) is not None:
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "devkit.services", "watch", str(root)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )
    created = psutil.Process(proc.pid).create_time()
    (root / "watchdog.pid").write_text(f"{proc.pid} {created!r}")


def _remember(known: dict[str, psutil.Process], name: str, pid: int | None) -> None:
    """Keep the verified server `pid` (S3) as a process handle, replacing a stale one. A
    missing pid file forgets nothing: a server still running without one lost its folder."""
    if pid is not None and (name not in known or known[name].pid != pid):
        try:
            known[name] = psutil.Process(pid)
        except psutil.NoSuchProcess:
            known.pop(name, None)


def _stop_remembered(known: dict[str, psutil.Process]) -> None:
    """Stop the servers verified in earlier rounds whose folder is gone. `is_running()`
    compares the start time too, so a pid reused by another process is never signalled."""
    running = [(name, p) for name, p in known.items() if p.is_running()]
    for name, proc in running:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(_STOP_SIGNAL[name])
    _, left = psutil.wait_procs([p for _, p in running], timeout=_STOP_TIMEOUT_S)
    for proc in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


def watch(root: Path) -> None:
    """Stop both servers once nothing pins them and no owner is alive, then exit; stop the
    servers it verified when the folder is removed."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    os.environ["TEAMDESK_DATA_DIR"] = str(root)
    rounds = 0
    known: dict[str, psutil.Process] = {}
    while True:
        time.sleep(_WATCH_INTERVAL_S)
        if not (root / "lock").exists():  # the folder was removed: its servers go too
            _stop_remembered(known)
            return
        with locked(root):
            pg, rd = pg_pid(root), redis_pid(root)
            _remember(known, "postgres", pg)
            _remember(known, "redis", rd)
            if pg is not None or rd is not None:
                if (root / "keep").exists() or live_owners(root):
                    # "<pid> <rounds>", written as each round that keeps the servers ends
                    # (they are remembered by then): lets a test wait for whole rounds
                    # instead of sleeping through them.
                    rounds += 1
                    (root / "watchdog.rounds").write_text(f"{os.getpid()} {rounds}")
                    continue
                stop_postgres(root)
                stop_redis(root)
            _stop_remembered(known)  # any verified server whose pid file went (S3)
            # Still under the lock, so a concurrent ensure_services() starts a new watchdog.
            (root / "watchdog.pid").unlink(missing_ok=True)
            return
