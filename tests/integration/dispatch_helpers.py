"""What the dispatcher's integration tests (`test_dispatch_*.py`) share and the product's
test kit (`teamdesk.testing`) lacks: a ledger row inserted or changed by hand, a job's
queue state, a plain bullmq worker with a processor of the test's own, and a collector of
`DispatchLoop` events.

The kit covers the rest: `task_row` reads a row, `age(..., columns=("dispatched_at",))`
compresses D1's re-check clock and `age(...)` D6's stale clock, `Gate` / `Fault` stage
races and faults at `dispatch.before_add`. Every wait here is bounded by the kit's
`DEFAULT_TIMEOUT_S`, and the bound only reports a sync point that never came.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bullmq import Job, Worker
from sqlalchemy import update

from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, Scope, TaskStatus, TaskType
from teamdesk.tasks.queue import redis_client, task_job_id
from teamdesk.testing import DEFAULT_TIMEOUT_S


async def insert_task(sessions, **values: Any) -> str:
    """One ledger row of the demo team, WAITING run 0 and due a second ago unless told
    otherwise."""
    row = BackgroundTask(**{"type": TaskType.EXPORT, "status": TaskStatus.WAITING, "run": 0,
                            "owner_id": "ben", "team_id": "acme", "scope": Scope.TEAM,
                            "filters": {}, "run_at": datetime.now(UTC) - timedelta(seconds=1),
                            **values})
    async with sessions() as s, s.begin():
        s.add(row)
    return row.id


async def set_columns(sessions, task_id: str, **values: Any) -> None:
    """Write `values` to one row, as another actor would (an executor's claim, a fast
    worker's completion) or to set a clock to an exact instant; an explicit `updated_at`
    is kept by the table's trigger."""
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == task_id)
                        .values(**values))


async def job_state(queue, task_id: str, run: int = 0) -> str | None:
    """The state of the job `task_job_id(task_id, run)` (I2), or None without a record."""
    job = await queue.getJob(task_job_id(task_id, run))
    return None if job is None else await job.getState()


async def wait_set(event: asyncio.Event, what: str) -> None:
    """Wait for `event` (set by a bullmq worker's processor or listener)."""
    try:
        await asyncio.wait_for(event.wait(), DEFAULT_TIMEOUT_S)
    except TimeoutError:
        pytest.fail(f"sync point never came: {what}")


async def _close_worker(worker: Worker) -> None:
    """Bounded close, then force (ARCHITECTURE.md: a plain close can hang forever)."""
    closing = asyncio.ensure_future(worker.close())
    done, _ = await asyncio.wait({closing}, timeout=2.0)
    if not done:
        forced = asyncio.ensure_future(worker.close(force=True))
        await asyncio.wait({forced}, timeout=2.0)


@contextlib.asynccontextmanager
async def bullmq_worker(settings: Settings, processor: Callable[[Job, str], Awaitable[Any]]
                        ) -> AsyncIterator[Worker]:
    """A real bullmq worker on this test's prefix, with a fail-fast blocking client, running
    the test's own `processor` instead of the product's (to hold a job active, complete it
    without touching the ledger, or fail it for good) — D4 against real job states."""
    worker = Worker(settings.queue_name, processor, {
        "connection": redis_client(settings, blocking=True),
        "prefix": settings.queue_prefix,
    })
    try:
        yield worker
    finally:
        await _close_worker(worker)


class LoopEvents:
    """Collects a DispatchLoop's events; `until(pred)` waits for one, without sleeping.

    Unlike the kit's `Recorder` (one event kind per wait), `pred` may accept several kinds
    at once, e.g. "the first tick's end, `tick.done` or `tick.fault`"."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], float]] = []
        self._changed = asyncio.Event()

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        self.seen.append((event, info, time.monotonic()))
        self._changed.set()

    async def until(self, what: str, pred: Callable[[str, dict[str, Any]], bool]
                    ) -> tuple[str, dict[str, Any], float]:
        deadline = time.monotonic() + DEFAULT_TIMEOUT_S
        checked = 0
        while True:
            for item in self.seen[checked:]:
                if pred(item[0], item[1]):
                    return item
            checked = len(self.seen)
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                pytest.fail(f"sync point never came: {what}")
