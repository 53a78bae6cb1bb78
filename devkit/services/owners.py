"""Who keeps the embedded servers alive: one *owner* entry per process that uses them.

Each entry is `<data dir>/owners/<pid>` holding the owner's start time, so a reused pid
is not taken for a live owner. The watchdog stops both servers once no owner is alive and
nothing pins them; a SIGKILLed lab or test run therefore leaves no orphan servers. The
list is pruned of dead pids on every read, unlike a pid list kept by a handle object.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from devkit.services.paths import data_dir
from devkit.services.processes import alive


def owners_dir(root: Path) -> Path:
    d = root / "owners"
    d.mkdir(parents=True, exist_ok=True)
    return d


def live_owners(root: Path | None = None) -> list[int]:
    """Pids of live owner processes; dead entries are pruned as a side effect."""
    root = root or data_dir()
    pids = []
    for entry in owners_dir(root).iterdir():
        try:
            pid = int(entry.name)
            created = float(entry.read_text() or 0)
        except ValueError:
            entry.unlink(missing_ok=True)
            continue
        if alive(pid, created):
            pids.append(pid)
        else:
            entry.unlink(missing_ok=True)
    return sorted(pids)


#: Owners this process registered, with their data folder: only those are released. With
#: DATABASE_URL/REDIS_URL set nothing is registered, and releasing must not create (or
#: fail to create, in a read-only folder) a `.teamdesk/` folder on the way out (W4).
_registered: dict[int, Path] = {}


def register_owner(root: Path, pid: int) -> None:
    """Keep the servers of `root` alive while `pid` lives."""
    created = psutil.Process(pid).create_time()
    (owners_dir(root) / str(pid)).write_text(repr(created))
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


def forget_owners(root: Path) -> None:
    """Remove every owner entry (`teamdesk services down` stops the servers for all)."""
    for entry in owners_dir(root).iterdir():
        entry.unlink(missing_ok=True)
