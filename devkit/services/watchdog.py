"""The watchdog: a detached process that stops both servers once nobody needs them.

One per data folder (`watchdog.pid` holds its pid and start time). Every second, under the
folder's lock, it prunes dead owners; when nothing pins the servers (`teamdesk services
up`'s `keep` file) and no owner is alive, it stops both and exits. So a SIGKILLed lab or
test run leaves no orphan servers behind.
"""

from __future__ import annotations

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


def watch(root: Path) -> None:
    """Stop both servers once nothing pins them and no owner is alive, then exit."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    os.environ["TEAMDESK_DATA_DIR"] = str(root)
    rounds = 0
    while True:
        time.sleep(_WATCH_INTERVAL_S)
        if not (root / "lock").exists():  # the folder was removed: nothing left to watch
            return
        with locked(root):
            # "<pid> <rounds>", written as each round starts: lets a test wait for whole
            # rounds instead of sleeping through them.
            rounds += 1
            (root / "watchdog.rounds").write_text(f"{os.getpid()} {rounds}")
            pg, rd = pg_pid(root), redis_pid(root)
            if pg is not None or rd is not None:
                if (root / "keep").exists() or live_owners(root):
                    continue
                stop_postgres(root)
                stop_redis(root)
            # Still under the lock, so a concurrent ensure_services() starts a new watchdog.
            (root / "watchdog.pid").unlink(missing_ok=True)
            return
