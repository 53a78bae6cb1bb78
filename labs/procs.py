"""Real `teamdesk worker` subprocesses, isolated worlds (`devkit.world.World`: a cloned
database + a fresh queue prefix, re-exported here), bounded polling: shared by the
benchmarks, the chaos run (`labs.chaos`) and its notebook.

Nothing here is product logic: a worker process is started exactly as an operator would
(`python -m teamdesk.cli worker --name …`, configured by `DATABASE_URL`, `REDIS_URL`,
`TEAMDESK_QUEUE_PREFIX` and `TEAMDESK_*` timings in its environment), and observed from
outside (its heartbeat key, the ledger, its log file).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

from devkit.world import World
from labs.faults import flush_prefix
from teamdesk.config import Settings
from teamdesk.tasks.queue import redis_client
from teamdesk.tasks.runner import heartbeat_key
from teamdesk.testing import wait_until, worker_env

# `wait_until` stays importable here for notebook 30's first cell, which shows the lab's
# names; code imports it from the product's test kit, where it lives.
__all__ = ["WorkerProc", "World", "clear_prefix", "stop_all", "wait_heartbeats", "wait_until"]


class WorkerProc:
    """One real `teamdesk worker` subprocess, its output in a log file."""

    def __init__(self, settings: Settings, name: str, log_dir: Path, timings: dict[str, str],
                 *, redis_url: str | None = None, log_level: str = "info",
                 entry: list[str] | None = None) -> None:
        self.settings = settings
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.timings = timings
        self.redis_url = redis_url
        self.log_level = log_level
        #: How to start it after the interpreter: the product's command by default; a lab
        #: counterexample (`labs.counterexample_worker`) for one run only.
        self.entry = entry or ["-m", "teamdesk.cli"]
        self.p: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        env = worker_env(self.settings, self.timings, redis_url=self.redis_url)
        log = self.log_path.open("a")
        log.write(f"=== start #{self.starts + 1} at {time.time():.3f}\n")
        log.flush()
        self.p = subprocess.Popen(
            [sys.executable, *self.entry, "worker", "--name", self.name,
             "--log-level", self.log_level],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None

    @property
    def pid(self) -> int | None:
        return self.p.pid if self.p is not None else None

    def send(self, sig: signal.Signals) -> None:
        if self.alive:
            assert self.p is not None
            self.p.send_signal(sig)

    async def wait_exit(self, timeout: float) -> int | None:
        """Bounded wait for the process to exit; its exit code, or None if still running."""
        deadline = time.monotonic() + timeout
        while self.p is not None and self.p.poll() is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)
        return None if self.p is None else self.p.returncode

    def kill(self) -> None:
        if self.alive:
            assert self.p is not None
            self.p.kill()
            self.p.wait(10)

    async def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (drain), then SIGKILL if it has not exited within `timeout`."""
        if not self.alive:
            return None if self.p is None else self.p.returncode
        self.send(signal.SIGTERM)
        code = await self.wait_exit(timeout)
        if code is None:
            self.kill()
            return None if self.p is None else self.p.returncode
        return code

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def current_output(self) -> str:
        """The log of the current (latest) start only."""
        return self.output().rsplit("=== start #", 1)[-1]

    @property
    def started_up(self) -> bool:
        """Whether the current start got as far as `worker.started` (handlers installed,
        worker built)."""
        return "worker.started" in self.current_output()

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.output().splitlines()[-lines:])


async def wait_heartbeats(settings: Settings, procs: list[WorkerProc], timeout: float = 60.0,
                          ) -> None:
    """Wait until every process has written its heartbeat (worker built, tick started)."""
    client = redis_client(settings)
    try:
        async def all_beating() -> bool:
            for w in procs:
                if not w.alive:
                    raise RuntimeError(f"{w.name} exited with {w.p.returncode if w.p else '?'}"
                                       f":\n{w.tail()}")
            found = [await client.exists(heartbeat_key(settings, w.name)) for w in procs]
            return all(found)

        await wait_until(all_beating, timeout, "worker heartbeats",
                         on_timeout=lambda: "\n".join(f"--- {w.name}\n{w.tail()}"
                                                      for w in procs))
    finally:
        await client.aclose()


async def clear_prefix(settings: Settings) -> int:
    """Delete every key under the world's queue prefix (`labs.faults.flush_prefix`)."""
    return await flush_prefix(settings)


def stop_all(procs: list[WorkerProc]) -> None:
    """Last-resort clean-up (finally blocks): SIGKILL whatever still runs."""
    for w in procs:
        with contextlib.suppress(Exception):
            w.kill()
