"""Fixtures for executor tests: the queue, task workers that are always closed, gates."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from teamdesk.tasks.queue import create_task_queue, task_job_id
from teamdesk.tasks.worker import TaskWorker, create_task_worker
from teamdesk.testing import FakeJob, Fault, Gate, Recorder, enqueue, reminder_effects, task_row


@pytest.fixture
async def queue(settings, redis):
    q = create_task_queue(settings)
    yield q
    await q.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def start_worker(settings, recorder, redis) -> AsyncIterator[Any]:
    """`await start_worker("A", renew_lock=False, lock_duration_ms=1000)`; closed at teardown."""
    started: list[TaskWorker] = []

    async def start(actor: str, *, renew_lock: bool = True, options: dict | None = None,
                    **timings: Any) -> TaskWorker:
        w = await create_task_worker(settings.replace(**timings), actor=actor,
                                     renew_lock=renew_lock, options=options, on_event=recorder)
        started.append(w)
        return w

    yield start
    for w in started:
        await w.close(timeout=3)


@pytest.fixture
def gates() -> Any:
    """Factory for gates and faults that are closed (and released) at teardown."""
    made: list[Gate | Fault] = []

    class Factory:
        def gate(self, point: str, **kw: Any) -> Gate:
            g = Gate(point, **kw)
            made.append(g)
            return g

        def fault(self, point: str, error: BaseException, **kw: Any) -> Fault:
            f = Fault(point, error, **kw)
            made.append(f)
            return f

    yield Factory()
    for g in made:
        g.close()


async def once_more_changes_nothing(sessions, task_id: str,
                                    run_again: Callable[[], Awaitable[Any]]) -> Any:
    """Run the task once more, sequentially, and prove it had no extra side effect
    (CONTRACT, ch. 26 §8: every race test ends this way). The whole ledger row — status,
    run, lease, attempts, CSV, summary, expiry, `updated_at` — must be unchanged, and for a
    reminder so must its ticket's notifications, `reminder_sent` events and version (P10).
    Returns what `run_again()` returned (the processor's outcome text, e.g. "skipped: …"),
    for the caller to check *why* nothing happened."""
    row = await task_row(sessions, task_id)
    ticket_id = row["ticket_id"]
    effects = await reminder_effects(sessions, ticket_id) if ticket_id is not None else None
    outcome = await run_again()
    assert await task_row(sessions, task_id) == row, "the sequential run changed the ledger row"
    if ticket_id is not None:
        assert await reminder_effects(sessions, ticket_id) == effects, \
            "the sequential run added a reminder side effect"
    return outcome


def direct_run(ctx: Any, task_id: str, run: int = 0) -> Callable[[], Awaitable[str]]:
    """`run_again` for `once_more_changes_nothing`: `process_task` called directly with a
    `FakeJob`, as the book's database race tests do."""
    from teamdesk.tasks.processor import process_task

    return lambda: process_task(FakeJob(task_id, run), None, ctx)


def worker_run(queue, recorder: Recorder, task_id: str,
               run: int = 0) -> Callable[[], Awaitable[str]]:
    """`run_again` for `once_more_changes_nothing`: one more delivery of the same task run
    through the real queue and whichever real worker is running. A fresh job id, so no
    earlier record (the first delivery's, or an earlier "again") swallows it (D5); returns the
    processor's outcome text from the `completed` event."""

    async def again() -> str:
        job = await enqueue(queue, task_id, run,
                            job_id=f"{task_job_id(task_id, run)}-again-{uuid.uuid4().hex[:6]}")
        waits = {kind: asyncio.ensure_future(recorder.wait_for(kind, job_id=job.id))
                 for kind in ("completed", "failed")}
        await asyncio.wait(waits.values(), return_when=asyncio.FIRST_COMPLETED)
        for w in waits.values():
            w.cancel()
        failed = waits["failed"]
        if failed.done() and not failed.cancelled() and failed.exception() is None:
            raise AssertionError(f"the sequential delivery failed: "
                                 f"{failed.result()['error']}")
        return waits["completed"].result()["result"]

    return again
