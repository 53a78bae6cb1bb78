"""What a killed kernel leaves behind, cleaned up the next time a lab opens.

An open lab writes one small record (`<data dir>/labs/<pid>-<prefix>.json`: its name,
process, database URL, Redis URL, BullMQ prefix, private Redis server). The URLs carry
passwords, so the record is 0600 in a 0700 folder (S1). `close()` deletes it. A kernel
killed with the lab still open never does: the next `Lab.open()` on this machine finds
records whose process is gone and removes what they name — the database (`DROP DATABASE
… WITH (FORCE)`), every Redis key under the prefix (`teamdesk.tasks.queue.delete_prefix`,
the one place a prefix is cleared), the private Redis server. Its workers ran inside the
dead kernel, so they died with it. The clean-up is async (`Lab.open` awaits it); its few
blocking steps (a process check, `DROP DATABASE`) run in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import redis.asyncio as aioredis

from devkit import services
from labs.private_redis import kill_leftover
from teamdesk.db.templates import drop_database
from teamdesk.tasks.queue import delete_prefix

if TYPE_CHECKING:
    from labs.lab import Lab


def _dir() -> Path:
    root = services.data_dir()
    services.make_private_dir(root)  # also with URLs set, when nothing else made it
    d = root / "labs"
    d.mkdir(exist_ok=True, mode=0o700)
    d.chmod(0o700)  # a folder made by an older version was 0755
    return d


def _created(pid: int) -> float:
    return psutil.Process(pid).create_time()


def record(lab: Lab) -> Path:
    """Note an open lab (synchronous; `Lab.open` calls it in a thread)."""
    server = getattr(lab, "private_redis", None)
    info = {"name": lab.name, "pid": os.getpid(), "created": _created(os.getpid()),
            "database_url": lab.settings.database_url, "redis_url": lab.settings.redis_url,
            "prefix": lab.settings.queue_prefix,
            "private_redis": ({"pid": server.pid, "created": _created(server.pid),
                               "dir": str(server.dir)}
                              if server is not None and server.pid else None)}
    path = _dir() / f"{info['pid']}-{info['prefix']}.json"
    services.write_private(path, json.dumps(info))
    return path


def forget(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _alive(pid: int, created: float) -> bool:
    try:
        return abs(_created(pid) - created) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _server(url: str) -> str:
    return url.partition("?")[0].rsplit("/", 1)[0]


async def clean(database_url: str, redis_url: str) -> list[str]:
    """Remove the databases, queue keys and private Redis servers of labs whose process is
    gone; returns their names. Only leftovers on the servers this lab uses
    (`database_url`, `redis_url`) are touched: a record of another server (docker-compose
    yesterday, embedded today) is kept for when that server is in use again, rather than
    connecting to a server that may not answer. Best effort: a step that fails is skipped
    (the record is kept, so a later open tries again)."""
    cleaned = []
    for path in sorted(_dir().glob("*.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if _alive(info["pid"], info["created"]):
            continue
        server = info.get("private_redis")
        same_redis = bool(server) or info["redis_url"] == redis_url
        if _server(info["database_url"]) != _server(database_url) or not same_redis:
            continue
        try:
            if server:
                await asyncio.to_thread(kill_leftover, server["pid"], server["created"],
                                        server.get("dir"))
            else:
                await _delete_keys(info["redis_url"], info["prefix"])
            await asyncio.to_thread(drop_database, info["database_url"])
        except Exception:  # a server that is down now: try again next time
            continue
        path.unlink(missing_ok=True)
        cleaned.append(info["name"])
    return cleaned


async def _delete_keys(url: str, prefix: str) -> int:
    """Every key under a dead lab's prefix, on a client that gives up within seconds (a
    Redis that is down now is tried again at a later open)."""
    client = aioredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        return await asyncio.wait_for(delete_prefix(client, prefix), 10)
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()
