"""Scene helpers of `30-worker-process.ipynb`: starting real `teamdesk worker` processes on
the notebook's lab, holding them at a probe point and reading what they left behind
(machinery out of the cells).

The notebook keeps the story in view — which process is started with which hold, the
signals it gets, when a hold is released — and calls these in one line each. A process
cannot be paused by an in-process gate, so a hold is the product's *probe hold*
(`TEAMDESK_PROBE_HOLD=<point>:<folder>`): the process writes `<folder>/reached` at the
first crossing of `<point>` and waits until `<folder>/release` exists. The processes are
`labs.procs.WorkerProc`s — started exactly as an operator would (W4) — and every wait is
bounded (`labs.procs.wait_until`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from labs.procs import WorkerProc, wait_until
from teamdesk.tasks.runner import heartbeat_key


class Processes:
    """The worker processes of one lab, each with its log and (optionally) a probe hold.

    `close()` of the lab kills any that are still alive and removes their scratch folder,
    so a re-opened lab (a re-run of the first cell) never inherits a running process."""

    def __init__(self, lab: Any, timings: dict[str, str]) -> None:
        self.lab = lab
        #: The `TEAMDESK_*` settings every process gets (Q2: short timings for the class).
        self.timings = dict(timings)
        self.scratch = Path(tempfile.mkdtemp(prefix="nb30-"))
        self.procs: dict[str, WorkerProc] = {}
        lab.add_cleanup(self._kill_all)

    def _kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def spawn(self, name: str, *, hold: str | None = None, **env: str) -> WorkerProc:
        """Start `teamdesk worker --name <name>` on the lab's database and queue prefix,
        with the class timings plus `env` (e.g. `TEAMDESK_DRAIN_TIMEOUT_S="2"`). With
        `hold="<probe point>"` the process pauses at the first crossing of that point until
        `release(name)`."""
        if hold is not None:
            env["TEAMDESK_PROBE_HOLD"] = f"{hold}:{self._hold_dir(name)}"
        proc = WorkerProc(self.lab.settings, name, self.scratch, {**self.timings, **env})
        proc.start()
        self.procs[name] = proc
        return proc

    def _hold_dir(self, name: str) -> Path:
        return self.scratch / f"hold-{name}"

    async def held(self, name: str, timeout: float = 30.0) -> None:
        """Wait until process `name` has reached its hold (it wrote `reached`)."""
        reached = self._hold_dir(name) / "reached"
        await wait_until(lambda: asyncio.to_thread(reached.exists), timeout,
                         f"{name} to reach its hold", on_timeout=self.procs[name].tail)

    def release(self, name: str) -> None:
        """Let process `name` go on past its hold."""
        (self._hold_dir(name) / "release").touch()

    def log(self, name: str) -> str:
        """Everything process `name` has logged so far."""
        return self.procs[name].output()

    async def logged(self, name: str, event: str, timeout: float = 10.0) -> None:
        """Wait until process `name` has logged `event` (e.g. "worker.draining")."""
        async def seen() -> bool:
            return event in await asyncio.to_thread(self.log, name)

        await wait_until(seen, timeout, f"{name} to log {event}",
                         on_timeout=self.procs[name].tail)

    async def heartbeat(self, name: str) -> dict[str, Any] | None:
        """Process `name`'s heartbeat as it stands in Redis (W4), None once it expired."""
        raw = await self.lab.redis.get(heartbeat_key(self.lab.settings, name))
        return json.loads(raw) if raw else None

    async def heartbeat_gone(self, name: str) -> bool:
        """Whether process `name`'s heartbeat key has expired (or was removed on exit)."""
        return not await self.lab.redis.exists(heartbeat_key(self.lab.settings, name))

    def claimed_lease(self, name: str, task_id: str) -> str | None:
        """The `execution_id` process `name` logged when it claimed `task_id` (its first
        `task.claimed` line for that task), None if it never did: the lease a takeover
        gets is a new one (P2)."""
        for line in self.log(name).splitlines():
            if "task.claimed" in line and f"task_id={task_id}" in line:
                return line.split("execution_id=")[1].split()[0]
        return None

    async def stop_all(self, timeout: float = 30.0) -> dict[str, int | None]:
        """SIGTERM every process still running (SIGKILL past `timeout`), then remove the
        scratch folder; each process's exit code (None: it never started)."""
        codes = {name: await proc.stop(timeout) for name, proc in self.procs.items()}
        shutil.rmtree(self.scratch, ignore_errors=True)
        return codes


async def completed(lab: Any, task_id: str) -> Any:
    """The task's ledger row once it is COMPLETED, None before: a condition for
    `wait_until` (the ledger is the truth, I1)."""
    row = await lab.task(task_id)
    return row if row.status == "COMPLETED" else None
