"""Fixtures for executor tests: the queue, task workers that are always closed, gates."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func, select, update

from labs.gates import Fault, Gate
from labs.recorder import Recorder
from teamdesk.db.models import BackgroundTask
from teamdesk.tasks.queue import JOB_NAME, create_task_queue, task_job_id
from teamdesk.tasks.worker import TaskWorker, create_task_worker


@pytest.fixture
async def queue(settings, redis):
    q = create_task_queue(settings)
    yield q
    await q.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def start_worker(settings, sessions, recorder, redis) -> AsyncIterator[Any]:
    """`await start_worker("A", renew_lock=False, lock_duration_ms=1000)`; closed at teardown."""
    started: list[TaskWorker] = []

    async def start(actor: str, *, renew_lock: bool = True, options: dict | None = None,
                    **timings: Any) -> TaskWorker:
        w = await create_task_worker(settings.replace(**timings), sessions, actor=actor,
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


async def enqueue(queue, task_id: str, run: int = 0, **opts: Any):
    """Add the job exactly as the dispatcher does (D2), with optional option overrides."""
    return await queue.add(JOB_NAME, {"taskId": task_id, "run": run},
                           {"jobId": task_job_id(task_id, run), **opts})


async def task_row(sessions, task_id: str) -> dict[str, Any]:
    """The whole ledger row as a dict (for 'the row still equals the snapshot')."""
    async with sessions() as s:
        t = await s.scalar(select(BackgroundTask).where(BackgroundTask.id == task_id))
        return {c.name: getattr(t, c.key) for c in BackgroundTask.__table__.columns}


async def reminder_effects(sessions, ticket_id: int) -> tuple[int, int, int]:
    """A reminder's side effects on its ticket: (notifications, `reminder_sent` events,
    ticket version). P10 promises all three move together, exactly once."""
    from teamdesk.db.models import Notification, Ticket, TicketEvent

    async with sessions() as s:
        n = await s.scalar(select(func.count()).select_from(Notification).where(
            Notification.ticket_id == ticket_id))
        e = await s.scalar(select(func.count()).select_from(TicketEvent).where(
            TicketEvent.ticket_id == ticket_id, TicketEvent.kind == "reminder_sent"))
        v = await s.scalar(select(Ticket.version).where(Ticket.id == ticket_id))
    return n, e, v


async def age_task(sessions, task_id: str, seconds: float, column: str = "updated_at") -> None:
    """Move a timestamp into the past: compresses the recovery clock instead of waiting."""
    from sqlalchemy import text

    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == task_id).values(
            {column: text(f"clock_timestamp() - interval '{float(seconds)} seconds'")}))


class FakeJob:
    """A stand-in for a BullMQ job, as the book's database race tests use (ch. 26 §8):
    they call the processor directly with `attemptsMade` chosen by the test. Its
    `updateProgress` records values and can be told to fail for some of them."""

    def __init__(self, task_id: str, run: int = 0, attempts_made: int = 0,
                 fail_progress: Any = None) -> None:
        self.id = task_job_id(task_id, run)
        self.data = {"taskId": task_id, "run": run}
        self.attemptsMade = attempts_made
        self.opts = {"attempts": 3}
        self.fail_progress = fail_progress
        self.progress_reports: list[int] = []

    async def updateProgress(self, value: int) -> None:
        if self.fail_progress is not None and self.fail_progress(value):
            raise ConnectionError(f"queue progress report failed at {value}")
        self.progress_reports.append(value)
