"""The outbox dispatcher against real PostgreSQL and real Redis (D1–D8, ch. 23; ch. 26 §7).

Synchronisation is by asyncio Events (probe gates, bullmq worker events, loop events);
`asyncio.wait_for` timeouts only detect a sync point that never came. Every dispatcher
time comparison is made in the database's clock (D6 made precise), so instead of waiting
30 s for a re-check, `dispatched_at` is aged by 31 s (`_age`), and instead of waiting 120 s
for stale recovery, `updated_at` is aged — explicit UPDATEs (the trigger keeps explicit
values) that compress a clock, and say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bullmq import Job, Worker
from bullmq.custom_errors import UnrecoverableError
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import select, update

from devkit import services
from teamdesk import probes
from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, Scope, TaskStatus, TaskType, Ticket, TicketStatus
from teamdesk.errors import ExportExpired
from teamdesk.services import exports
from teamdesk.tasks.dispatch_loop import DispatchLoop
from teamdesk.tasks.dispatcher import (
    QUEUE_FAILED_ERROR,
    DispatchReport,
    QueueTimeout,
    dispatch_tasks,
    scan,
)
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.queue import (
    JOB_NAME,
    create_task_queue,
    delete_prefix,
    redis_client,
    task_job_id,
)
from teamdesk.testing import age

SYNC_TIMEOUT = 8.0  # only detects a sync point that never came
EMBEDDED_REDIS = pytest.mark.skipif(
    bool(os.environ.get("REDIS_URL")),
    reason="stops/pauses the embedded Redis; not done to a server given by REDIS_URL")


# ---------------------------------------------------------------- helpers

@pytest.fixture
async def queue(settings: Settings, redis) -> AsyncIterator[Any]:
    """The task queue of this test's prefix (the `redis` fixture deletes its keys)."""
    q = create_task_queue(settings)
    yield q
    with contextlib.suppress(Exception):
        await q.close()


async def _insert(sessions, **values: Any) -> str:
    """One ledger row of the demo team, WAITING run 0 and due a second ago unless told
    otherwise."""
    row = BackgroundTask(**{"type": TaskType.EXPORT, "status": TaskStatus.WAITING, "run": 0,
                            "owner_id": "ben", "team_id": "acme", "scope": Scope.TEAM,
                            "filters": {}, "run_at": datetime.now(UTC) - timedelta(seconds=1),
                            **values})
    async with sessions() as s, s.begin():
        s.add(row)
    return row.id


async def _row(sessions, task_id: str) -> dict[str, Any]:
    async with sessions() as s:
        task = await s.get(BackgroundTask, task_id)
        return {c.key: getattr(task, c.key) for c in BackgroundTask.__table__.columns}


async def _set(sessions, task_id: str, **values: Any) -> None:
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == task_id)
                        .values(**values))


async def _age(sessions, *task_ids: str, seconds: float = 31.0) -> datetime:
    """D1's re-check clock, compressed: the rows' `dispatched_at` moved `seconds` back
    (`teamdesk.testing.age`). Returns the database's clock after the change."""
    return await age(sessions, task_ids, seconds, columns=("dispatched_at",))


async def _state(queue, task_id: str, run: int = 0) -> str | None:
    job = await queue.getJob(task_job_id(task_id, run))
    return None if job is None else await job.getState()


async def _wait(event: asyncio.Event, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), SYNC_TIMEOUT)
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
async def _worker(settings: Settings, processor: Callable[[Job, str], Awaitable[Any]]
                  ) -> AsyncIterator[Worker]:
    """A real bullmq worker on this test's prefix, with a fail-fast blocking client."""
    worker = Worker(settings.queue_name, processor, {
        "connection": redis_client(settings, blocking=True),
        "prefix": settings.queue_prefix,
    })
    try:
        yield worker
    finally:
        await _close_worker(worker)


class LoopEvents:
    """Collects a DispatchLoop's events; `until(pred)` waits for one, without sleeping."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], float]] = []
        self._changed = asyncio.Event()

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        self.seen.append((event, info, time.monotonic()))
        self._changed.set()

    async def until(self, what: str, pred: Callable[[str, dict[str, Any]], bool]
                    ) -> tuple[str, dict[str, Any], float]:
        deadline = time.monotonic() + SYNC_TIMEOUT
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


class OfflineQueue:
    """The book's fake (ch. 23 §7): `getJob` finds nothing, `add` fails as if Redis were
    offline. The only mock in this file; the real outage is tested below."""

    def __init__(self) -> None:
        self.adds = 0

    async def getJob(self, job_id: str) -> None:  # bullmq's camelCase API
        return None

    async def add(self, name: str, data: Any, opts: dict[str, Any]) -> Any:
        self.adds += 1
        raise ConnectionError("Redis offline")

    async def remove(self, job_id: str, opts: dict[str, Any] | None = None) -> int:
        raise AssertionError("not reached: no job exists")


# ---------------------------------------------------------------- D1, D2

async def test_scan_order_limit_and_cutoff(settings, sessions, demo, queue):
    """D1: WAITING and (never dispatched or checked before now - 30 s), never-dispatched
    first (by run_at), then longest-unchecked (ties by run_at), at most 100 per scan; no
    run_at <= now condition; other statuses and a check at exactly now - 30 s excluded.
    The 5 rows past the limit get no job this tick and are picked up by the next."""
    now = datetime.now(UTC).replace(microsecond=0)
    expected: list[str] = []
    # 40 never dispatched, run_at from yesterday to next week (inserted out of order).
    nulls = [(now + timedelta(hours=(i * 37) % 40 * 5 - 24), None) for i in range(40)]
    # 65 checked long ago: 13 distinct check times × 5 run_ats each.
    olds = [(now + timedelta(hours=r * 7 - 10), now - timedelta(seconds=31 + 60 * (k * 5 % 13)))
            for k in range(13) for r in (3, 0, 4, 1, 2)]
    ids = {}
    for run_at, dispatched in nulls + olds:
        ids[(run_at, dispatched)] = await _insert(sessions, run_at=run_at,
                                                  dispatched_at=dispatched)
    far = datetime.max.replace(tzinfo=UTC)
    for key in sorted(ids, key=lambda k: (k[1] is not None, k[1] or far, k[0])):
        expected.append(ids[key])
    excluded = [
        await _insert(sessions, dispatched_at=now - timedelta(seconds=5)),
        # Not < cutoff, with 15 s to spare for the test's own inserts on a busy machine.
        await _insert(sessions, dispatched_at=now - timedelta(seconds=15)),
        *[await _insert(sessions, status=s) for s in
          (TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.FAILED)],
    ]
    async with Ledger(settings.database_url).connection() as conn:
        scanned = [r.id for r in await scan(conn, settings)]
    assert scanned == expected[:100]

    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.added) == (100, 100)
    states = {tid: await _state(queue, tid) for tid in expected + excluded}
    assert all(states[t] in ("waiting", "delayed") for t in expected[:100])
    assert all(states[t] is None for t in expected[100:] + excluded)
    async with sessions() as s:
        marks = dict((await s.execute(select(BackgroundTask.id, BackgroundTask.dispatched_at)
                                      .where(BackgroundTask.id.in_(expected)))).all())
    first_marks = {marks[t] for t in expected[:100]}
    assert len(first_marks) == 1 and first_marks.pop() > now  # D3: marked after the add
    assert {marks[t] for t in expected[100:]} == {now - timedelta(seconds=31)}  # untouched

    report = await dispatch_tasks(queue, settings)  # the rest, same clock
    assert (report.scanned, report.added) == (5, 5)
    assert all([await _state(queue, t) in ("waiting", "delayed") for t in expected[100:]])
    assert all([await _state(queue, t) is None for t in excluded])


async def test_future_run_at_is_a_delayed_job_now(settings, sessions, demo, queue):
    """D1, D2: no `run_at <= now` condition — tomorrow's reminder is enqueued today as a
    delayed job with delay = run_at - now; a past run_at gets delay 0 (waiting). The job is
    `execute` {taskId, run} with jobId task-run (I2) and the queue's defaults (Q1)."""
    now = datetime.now(UTC)
    tomorrow = await _insert(sessions, type=TaskType.REMINDER, run_at=now + timedelta(days=1))
    overdue = await _insert(sessions, run_at=now - timedelta(hours=2))
    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.added) == (2, 2)

    job = await queue.getJob(task_job_id(tomorrow, 0))
    assert await job.getState() == "delayed"
    # The delay is computed in the database's clock, a few ms after `now` was read here.
    assert 24 * 3600 * 1000 - 5000 < job.delay <= 24 * 3600 * 1000
    assert (job.name, job.data) == (JOB_NAME, {"taskId": tomorrow, "run": 0})
    assert job.opts["attempts"] == 3 and job.opts["removeOnComplete"] == {
        "age": 86400, "count": 1000}
    past = await queue.getJob(f"{overdue}-0")
    assert await past.getState() == "waiting" and past.delay == 0
    for tid in (tomorrow, overdue):
        assert (await _row(sessions, tid))["dispatched_at"] > now


# ---------------------------------------------------------------- D3

async def test_dispatched_at_only_after_add_and_never_reverts_completed(
        settings, sessions, demo, queue):
    """D3: at the moment of the add `dispatched_at` is still NULL (never written before
    the add). The job completes the task right then (the probe marks it COMPLETED, as a
    fast worker would): the mark matches zero rows and the row stays COMPLETED."""
    task_id = await _insert(sessions)
    seen: dict[str, Any] = {}

    async def fast_worker(point: str, ctx: dict[str, Any]) -> None:
        if point == "dispatch.before_add" and ctx["task_id"] == task_id:
            seen.update(await _row(sessions, task_id))
            await _set(sessions, task_id, status=TaskStatus.COMPLETED, progress=100)

    with probes.installed(fast_worker):
        report = await dispatch_tasks(queue, settings)
    assert seen["dispatched_at"] is None and seen["status"] is TaskStatus.WAITING
    assert report.added == 1 and await _state(queue, task_id) == "waiting"  # the add happened
    row = await _row(sessions, task_id)
    assert (row["status"], row["dispatched_at"]) == (TaskStatus.COMPLETED, None)


async def test_failed_add_writes_no_dispatched_at(settings, sessions, demo, queue):
    """D3: a fault injected right before the add ends the tick; nothing was added and
    `dispatched_at` stays NULL, so the next tick picks the row first."""
    task_id = await _insert(sessions)

    async def fault(point: str, ctx: dict[str, Any]) -> None:
        raise RuntimeError("injected before add")

    with probes.installed(fault), pytest.raises(RuntimeError, match="injected before add"):
        await dispatch_tasks(queue, settings)
    assert await _state(queue, task_id) is None
    assert (await _row(sessions, task_id))["dispatched_at"] is None
    report = await dispatch_tasks(queue, settings)
    assert report.added == 1 and (await _row(sessions, task_id))["dispatched_at"] is not None


# ---------------------------------------------------------------- D4, against real job states

async def test_waiting_and_delayed_jobs_are_refreshed_only(settings, sessions, demo, queue,
                                                           redis):
    """D4: waiting / delayed → already queued: only `dispatched_at` is refreshed; no second
    job, no changed delay (the 30 s re-check clock is moved by passing now + 31 s)."""
    now = datetime.now(UTC)
    waiting = await _insert(sessions)
    delayed = await _insert(sessions, run_at=now + timedelta(hours=1))
    await dispatch_tasks(queue, settings)
    aged_at = await _age(sessions, waiting, delayed)
    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.refreshed, report.added, report.re_added) == (2, 2, 0, 0)
    assert await _state(queue, waiting) == "waiting"
    job = await queue.getJob(task_job_id(delayed, 0))
    assert await job.getState() == "delayed" and 3600 * 1000 - 5000 < job.delay <= 3600 * 1000
    assert await queue.getJobCounts("waiting", "delayed") == {"waiting": 1, "delayed": 1}
    for tid in (waiting, delayed):
        assert (await _row(sessions, tid))["dispatched_at"] > aged_at  # refreshed


async def test_active_job_is_refreshed_only(settings, sessions, demo, queue):
    """D4: active (a real worker holds the job, parked on an Event) → refresh only; the
    job is neither removed nor added again."""
    task_id = await _insert(sessions)
    entered, release = asyncio.Event(), asyncio.Event()

    async def parked(job: Job, token: str) -> str:
        entered.set()
        await asyncio.wait_for(release.wait(), SYNC_TIMEOUT)
        return "done"

    await dispatch_tasks(queue, settings)
    async with _worker(settings, parked):
        await _wait(entered, "the worker took the job")
        aged_at = await _age(sessions, task_id)
        report = await dispatch_tasks(queue, settings)
        assert (report.refreshed, report.added, report.re_added) == (1, 0, 0)
        assert await _state(queue, task_id) == "active"
        release.set()
    assert (await _row(sessions, task_id))["dispatched_at"] > aged_at


async def test_completed_job_while_ledger_waiting_is_removed_and_added_again(
        settings, sessions, demo, queue):
    """D4 (inferred): the queue says completed but the ledger is still WAITING for that
    run (the executor returned early, e.g. after losing its lease). Without removal the
    record would swallow every add as a duplicate for 24 h: remove it and add again."""
    task_id = await _insert(sessions)
    completed = asyncio.Event()

    async def returns_early(job: Job, token: str) -> str:
        return "lease lost; nothing written"  # does not touch the ledger

    await dispatch_tasks(queue, settings)
    async with _worker(settings, returns_early) as worker:
        worker.on("completed", lambda job, result: completed.set())
        await _wait(completed, "the worker completed the job")
    assert await _state(queue, task_id) == "completed"

    aged_at = await _age(sessions, task_id)
    report = await dispatch_tasks(queue, settings)
    assert (report.re_added, report.added, report.refreshed) == (1, 0, 0)
    job = await queue.getJob(task_job_id(task_id, 0))
    assert await job.getState() == "waiting" and not job.finishedOn  # a fresh record
    assert (await _row(sessions, task_id))["dispatched_at"] > aged_at


async def test_orphaned_job_record_is_removed_and_added_again(settings, sessions, demo,
                                                              queue, redis):
    """D4, our decision for `unknown`: a job hash that sits in no state list (here the wait
    list key was lost) would swallow a plain add as a duplicate; it is removed and added
    again, like the completed case."""
    task_id = await _insert(sessions)
    await dispatch_tasks(queue, settings)
    await redis.delete(queue.toKey("wait"))
    assert await _state(queue, task_id) == "unknown"
    await _age(sessions, task_id)
    report = await dispatch_tasks(queue, settings)
    assert report.re_added == 1 and await _state(queue, task_id) == "waiting"


async def _fail_job(settings: Settings) -> None:
    failed = asyncio.Event()

    async def rejects(job: Job, token: str) -> None:
        raise UnrecoverableError("permanent")  # ends the job at once, whatever its attempts

    async with _worker(settings, rejects) as worker:
        worker.on("failed", lambda job, err: failed.set())
        await _wait(failed, "the worker failed the job")


async def test_failed_job_with_waiting_unleased_ledger_sets_failed(settings, sessions, demo,
                                                                   queue):
    """D4, W3: the queue gave up (failed) while the ledger is WAITING with no lease for that
    run → FAILED with a fixed readable last_error; not marked, not re-added."""
    task_id = await _insert(sessions)
    await dispatch_tasks(queue, settings)
    await _fail_job(settings)
    assert await _state(queue, task_id) == "failed"

    before = (await _row(sessions, task_id))["dispatched_at"]
    await _age(sessions, task_id)
    aged = (await _row(sessions, task_id))["dispatched_at"]
    assert aged < before
    report = await dispatch_tasks(queue, settings)
    assert (report.failed_from_queue, report.added, report.re_added, report.refreshed) == (
        1, 0, 0, 0)
    row = await _row(sessions, task_id)
    assert (row["status"], row["last_error"], row["run"]) == (
        TaskStatus.FAILED, QUEUE_FAILED_ERROR, 0)
    assert row["dispatched_at"] == aged  # not refreshed
    assert await _state(queue, task_id) == "failed"


async def test_failed_job_does_not_fail_a_row_claimed_during_the_tick(settings, sessions,
                                                                      demo, queue):
    """D4, P2: the scan saw WAITING without a lease and the queue says failed, but an
    executor claims the row (RUNNING, new execution_id) before the tick writes: the FAILED
    write is conditioned on (id, run, WAITING, execution_id NULL) and matches nothing. The
    claim happens at another row's `dispatch.before_add`, which is after the scan and before
    any write of this tick, however the rows are interleaved (that row sorts first)."""
    claimed = await _insert(sessions)
    await dispatch_tasks(queue, settings)
    await _fail_job(settings)
    fresh = await _insert(sessions)  # dispatched_at NULL: scanned before `claimed`
    await _age(sessions, claimed)

    async def executor_claims(point: str, ctx: dict[str, Any]) -> None:
        if ctx["task_id"] == fresh:
            await _set(sessions, claimed, status=TaskStatus.RUNNING, execution_id="exec-new",
                       attempts=1)

    with probes.installed(executor_claims):
        report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.added, report.failed_from_queue) == (2, 1, 0)
    row = await _row(sessions, claimed)
    assert (row["status"], row["execution_id"], row["last_error"]) == (
        TaskStatus.RUNNING, "exec-new", None)


async def test_failed_job_never_fails_a_running_row_until_recovered(settings, sessions, demo,
                                                                    queue):
    """D4, D6, W3 (ch. 26 §7 test 5): a RUNNING row is never failed from the queue's word —
    its lease may be live. Only after D6 recovers it (aged `updated_at`, which compresses
    the 120 s clock) does a *later* tick see WAITING + no lease + failed and set FAILED:
    recovery runs after the dispatch loop, so it takes two ticks."""
    task_id = await _insert(sessions)
    await dispatch_tasks(queue, settings)
    await _fail_job(settings)
    await _set(sessions, task_id, status=TaskStatus.RUNNING, execution_id="exec-live",
               dispatched_at=datetime.now(UTC) - timedelta(minutes=5))
    before = await _row(sessions, task_id)
    report = await dispatch_tasks(queue, settings)
    assert report == DispatchReport()
    assert await _row(sessions, task_id) == before  # untouched, updated_at included

    await _set(sessions, task_id, updated_at=datetime.now(UTC) - timedelta(seconds=121))
    report = await dispatch_tasks(queue, settings)
    assert (report.recovered_stale, report.failed_from_queue) == (1, 0)
    row = await _row(sessions, task_id)
    assert (row["status"], row["execution_id"], row["dispatched_at"]) == (
        TaskStatus.WAITING, None, None)
    report = await dispatch_tasks(queue, settings)
    assert report.failed_from_queue == 1
    assert (await _row(sessions, task_id))["status"] is TaskStatus.FAILED


# ---------------------------------------------------------------- D6, D7

async def test_stale_running_goes_back_to_waiting_same_run(settings, sessions, demo, queue):
    """D6: RUNNING with `updated_at` older than 120 s → WAITING, lease and dispatched_at
    cleared, same run (no run+1); a RUNNING row that moved 60 s ago stays. `updated_at` is
    aged with an explicit UPDATE (the trigger keeps explicit values): this compresses the
    recovery clock rather than waiting two minutes. Recovery runs after the dispatch loop,
    so the recovered row is enqueued by the next tick."""
    now = datetime.now(UTC)
    stale = await _insert(sessions, status=TaskStatus.RUNNING, run=2, execution_id="old-exec",
                          attempts=2, progress=40, dispatched_at=now - timedelta(minutes=10))
    alive = await _insert(sessions, status=TaskStatus.RUNNING, execution_id="live-exec",
                          dispatched_at=now - timedelta(minutes=10))
    await _set(sessions, stale, updated_at=now - timedelta(seconds=121))
    await _set(sessions, alive, updated_at=now - timedelta(seconds=60))
    alive_before = await _row(sessions, alive)

    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.recovered_stale) == (0, 1)
    row = await _row(sessions, stale)
    assert (row["status"], row["run"], row["execution_id"], row["dispatched_at"]) == (
        TaskStatus.WAITING, 2, None, None)
    assert row["updated_at"] > now - timedelta(seconds=5)  # the trigger advanced it
    assert await _row(sessions, alive) == alive_before
    assert await _state(queue, stale, run=2) is None

    report = await dispatch_tasks(queue, settings)
    assert report.added == 1 and await _state(queue, stale, run=2) == "waiting"


async def test_expired_export_csv_is_purged_and_download_refused_before(settings, sessions,
                                                                        demo, queue):
    """D7, X2: past `expires_at` the download is refused even while the CSV is still stored
    (the purge has not run); the tick then clears `result_csv` and keeps the row; an export
    that has not expired keeps its file."""
    now = datetime.now(UTC)
    done = {"status": TaskStatus.COMPLETED, "progress": 100, "result_csv": "id,title\r\n1,x\r\n",
            "result_summary": "1 ticket"}
    expired = await _insert(sessions, owner_id="dan", scope=Scope.OWN,
                            expires_at=now - timedelta(minutes=1), **done)
    fresh = await _insert(sessions, owner_id="dan", scope=Scope.OWN,
                          expires_at=now + timedelta(hours=1), **done)
    async with sessions() as s:
        with pytest.raises(ExportExpired):
            await exports.download_export(s, "acme", "dan", expired)
    assert (await _row(sessions, expired))["result_csv"] is not None  # not purged yet

    report = await dispatch_tasks(queue, settings)
    assert report.purged == 1
    row = await _row(sessions, expired)
    assert (row["status"], row["result_csv"], row["result_summary"]) == (
        TaskStatus.COMPLETED, None, "1 ticket")
    async with sessions() as s:
        with pytest.raises(ExportExpired):
            await exports.download_export(s, "acme", "dan", expired)
        assert (await exports.download_export(s, "acme", "dan", fresh)).csv == done["result_csv"]


# ---------------------------------------------------------------- the book's fake, and real outages

async def test_redis_offline_add_keeps_task_waiting_undispatched(settings, sessions, demo):
    """Ch. 23 §7, D3, D8 (the book's unit-level case, with the real ledger): `getJob` finds
    nothing and `add` raises "Redis offline" → the tick raises, the task stays WAITING with
    `dispatched_at` NULL, and the round ends before its clean-ups (a stale RUNNING row is
    not recovered by the failed tick)."""
    task_id = await _insert(sessions)
    stale = await _insert(sessions, status=TaskStatus.RUNNING, execution_id="e",
                          run_at=datetime.now(UTC) + timedelta(days=1))
    await _set(sessions, stale, updated_at=datetime.now(UTC) - timedelta(hours=1))
    offline = OfflineQueue()
    with pytest.raises(ConnectionError, match="Redis offline"):
        await dispatch_tasks(offline, settings)
    assert offline.adds == 1
    row = await _row(sessions, task_id)
    assert (row["status"], row["dispatched_at"]) == (TaskStatus.WAITING, None)
    assert (await _row(sessions, stale))["status"] is TaskStatus.RUNNING


def _csv_ids(text: str) -> list[int]:
    rows = list(csv.DictReader(io.StringIO(text)))
    assert all(r["status"] == "OPEN" for r in rows)
    return [int(r["id"]) for r in rows]


@EMBEDDED_REDIS
async def test_real_redis_outage_fails_fast_then_recovers_to_download(
        settings, sessions, demo, queue, start_worker, recorder, caplog):
    """Beyond the book (ch. 23 §7 leaves it open), D1–D3, D8, X2: with a WAITING export,
    the real Redis server is stopped. The loop's tick fails within seconds (not bullmq's
    ~350 s of silent retries), is logged as a dispatch fault, and the ledger is unchanged.
    Redis comes back; a later tick enqueues the job and sets `dispatched_at`; the product's
    worker (`create_task_worker`, W1) runs the real `process_task` on it (P2, P5); the
    download's rows are exactly the tickets the filters match (X2)."""
    settings = settings.replace(dispatch_tick_s=0.2)
    caplog.set_level(logging.INFO, logger="teamdesk.dispatcher")
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    before = await _row(sessions, task.id)
    events = LoopEvents()
    loop = DispatchLoop(queue, settings, listener=events)
    services.stop_redis()
    try:
        loop.start()
        _, _, started = await events.until("first tick", lambda e, i: e == "tick.start")
        event, _, ended = await events.until(
            "first tick's end", lambda e, i: e in ("tick.fault", "tick.done"))
        assert event == "tick.fault", "a tick against a stopped Redis must fail"
        assert ended - started < 10.0
        assert isinstance(loop.last_error, (RedisConnectionError, QueueTimeout))
        faults = [r for r in caplog.records if r.getMessage().startswith("dispatch.fault")]
        assert faults and faults[0].levelno == logging.ERROR and faults[0].exc_info is None
        assert await _row(sessions, task.id) == before  # the ledger is unchanged
    finally:
        services.start_redis()

    await events.until("a tick that enqueues after recovery",
                       lambda e, i: e == "tick.done" and i["report"].added == 1)
    row = await _row(sessions, task.id)
    assert row["status"] is TaskStatus.WAITING and row["dispatched_at"] is not None
    assert await _state(queue, task.id) == "waiting"

    # The product's own worker (W1: `create_task_worker`, the real `process_task`) takes
    # the job that the recovered dispatcher enqueued.
    try:
        await start_worker("W")
        done = await recorder.wait_for("completed", job_id=task_job_id(task.id, 0))
    finally:
        await loop.stop()
    assert not recorder.of("failed") and not recorder.errors
    row = await _row(sessions, task.id)
    assert (row["status"], row["progress"], row["attempts"], row["execution_id"]) == (
        TaskStatus.COMPLETED, 100, 1, None)
    assert done["result"] == row["result_summary"]  # this delivery produced the result
    async with sessions() as s:
        file = await exports.download_export(s, "acme", "ben", task.id)
        expected = (await s.scalars(select(Ticket.id).where(
            Ticket.team_id == "acme", Ticket.status == TicketStatus.OPEN,
            Ticket.deleted_at.is_(None)).order_by(Ticket.id))).all()
    assert expected and _csv_ids(file.csv) == list(expected)


@EMBEDDED_REDIS
async def test_hung_redis_tick_is_bounded_by_redis_timeout(settings, sessions, demo, queue,
                                                           redis):
    """Beyond the book, D8: a Redis that answers nothing (the server process is paused with
    SIGSTOP: connects still complete in the kernel's backlog, replies never come — a worse
    case than a refused connection) fails the tick after `redis_timeout_s` with a readable
    `QueueTimeout`, even through a client whose own socket timeout is much longer; the
    ledger is unchanged."""
    settings = settings.replace(redis_timeout_s=0.5)
    patient = create_task_queue(settings.replace(redis_timeout_s=30.0))
    task_id = await _insert(sessions)
    before = await _row(sessions, task_id)
    pid = int((await redis.info("server"))["process_id"])
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(QueueTimeout, match=rf"getJob\({task_id}-0\) within 0.5 s"):
            await dispatch_tasks(patient, settings)
        elapsed = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(Exception):
            await patient.close()
    assert elapsed < 3.0
    assert await _row(sessions, task_id) == before


async def test_whole_redis_loss_is_repaired_by_the_rescan(settings, sessions, demo, queue,
                                                          redis):
    """Beyond the book (ch. 26 §7 only removes one record), D1, D4, D5: after dispatch,
    every key of this test's queue prefix is deleted — a FLUSHALL of this test's world that
    spares other prefixes. Once `dispatched_at` is older than 30 s (aged explicitly), the
    next scan re-adds the lost jobs; a task COMPLETED meanwhile is not re-added."""
    ids = [await _insert(sessions) for _ in range(3)]
    done = await _insert(sessions)
    await dispatch_tasks(queue, settings)
    await _set(sessions, done, status=TaskStatus.COMPLETED)

    assert await delete_prefix(redis, settings.queue_prefix) > 0
    assert all([await _state(queue, t) is None for t in ids])
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).values(
            dispatched_at=datetime.now(UTC) - timedelta(seconds=31)))
    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.added) == (3, 3)
    assert all([await _state(queue, t) == "waiting" for t in ids])
    assert await _state(queue, done) is None


# ---------------------------------------------------------------- the tick loop (D8)

async def test_loop_never_overlaps_ticks_and_stop_is_bounded(settings, sessions, demo, queue):
    """D8: a tick held at `dispatch.before_add` while the 50 ms interval elapses again and
    again: the due triggers are skipped, never a second concurrent tick. `stop()` is
    bounded: the held tick is cancelled after the timeout, before its add, so nothing was
    enqueued or marked (D3) — the next tick will redo it."""
    settings = settings.replace(dispatch_tick_s=0.05)
    task_id = await _insert(sessions)
    held = asyncio.Event()
    running = peak = 0
    tick_tasks: list[asyncio.Task[Any]] = []

    async def counting(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal running, peak
        tick_tasks.append(asyncio.current_task())
        running += 1
        peak = max(peak, running)
        try:
            return await dispatch_tasks(*args, **kwargs)
        finally:
            running -= 1

    async def gate(point: str, ctx: dict[str, Any]) -> None:
        held.set()
        await asyncio.Event().wait()  # held until stop() cancels the tick

    def three_more_triggers(event: str, info: dict[str, Any]) -> bool:
        # Skipped triggers, or (only if the guard were broken) a second started tick.
        return ((event == "tick.skipped" and info["skipped"] >= 3)
                or (event == "tick.start" and info["tick"] >= 2))

    events = LoopEvents()
    loop = DispatchLoop(queue, settings, dispatch=counting, listener=events)
    with probes.installed(gate):
        loop.start()
        try:
            await _wait(held, "the first tick reached the add")
            await events.until("three triggers due while the tick is held",
                               three_more_triggers)
            seen = (peak, loop.ticks)
        finally:
            started = time.monotonic()
            await loop.stop(timeout=0.3)
            stop_took = time.monotonic() - started
            stray = [t for t in tick_tasks if not t.done()]  # only if ticks overlapped
            for task in stray:
                task.cancel()
            await asyncio.gather(*stray, return_exceptions=True)
    assert seen == (1, 1), "(peak concurrent ticks, ticks started) while one tick was held"
    assert stop_took < 2.0 and not loop.running and peak == 1
    assert await _state(queue, task_id) is None
    assert (await _row(sessions, task_id))["dispatched_at"] is None


async def test_loop_logs_a_fault_and_the_next_tick_runs(settings, sessions, demo, queue,
                                                        caplog):
    """D8: a raising tick is logged as one structured `dispatch.fault` line (no traceback),
    kept in `last_error`, counted; the next tick runs and dispatches."""
    settings = settings.replace(dispatch_tick_s=0.05)
    caplog.set_level(logging.INFO, logger="teamdesk.dispatcher")
    task_id = await _insert(sessions)
    boom = RuntimeError("injected tick fault\nsecond line")
    calls = 0

    async def first_fails(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise boom
        return await dispatch_tasks(*args, **kwargs)

    events = LoopEvents()
    loop = DispatchLoop(queue, settings, dispatch=first_fails, listener=events)
    loop.start()
    try:
        await events.until("a successful tick", lambda e, i: e == "tick.done")
    finally:
        await loop.stop()
    assert [e for e, _, _ in events.seen if e in ("tick.fault", "tick.done")][:2] == [
        "tick.fault", "tick.done"]
    assert (loop.faults, loop.last_error) == (1, boom)
    faults = [r for r in caplog.records if r.getMessage().startswith("dispatch.fault")]
    assert [r.getMessage() for r in faults] == [
        "dispatch.fault error=RuntimeError: injected tick fault"]
    assert faults[0].exc_info is None and faults[0].levelno == logging.ERROR
    ticks = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dispatch.tick")]
    assert ticks[0].startswith("dispatch.tick scanned=1 added=1 refreshed=0 re_added=0 "
                               "failed_from_queue=0 recovered_stale=0 purged=0 "
                               "failed_stalled=0 ms=")
    assert await _state(queue, task_id) == "waiting"
    assert (await _row(sessions, task_id))["dispatched_at"] is not None


# ---------------------------------------------------------------- D8: a backlog drains at once

async def _insert_many(sessions, n: int) -> list[str]:
    """`n` WAITING rows, never dispatched, due (one INSERT)."""
    from sqlalchemy import text

    async with sessions() as s, s.begin():
        return list((await s.execute(text(
            "INSERT INTO background_tasks (type, status, run, owner_id, team_id, scope, "
            "filters, run_at) SELECT 'EXPORT', 'WAITING', 0, 'ben', 'acme', 'TEAM', "
            "'{}'::jsonb, now() - interval '1 minute' + g * interval '1 ms' "
            "FROM generate_series(1, :n) AS g RETURNING id"), {"n": n})).scalars())


async def _undispatched(sessions) -> int:
    """WAITING rows never dispatched (or recovered since, D6)."""
    async with sessions() as s:
        return len((await s.scalars(select(BackgroundTask.id).where(
            BackgroundTask.status == TaskStatus.WAITING,
            BackgroundTask.dispatched_at.is_(None)))).all())


async def test_loop_tick_drains_a_backlog_round_after_round_until_a_short_scan(
        settings, sessions, demo, queue):
    """D8 (made precise): 35 due rows and a batch of 10 — the first scan comes back full
    (a backlog), so the next scan follows at once, one at a time, each bounded by the
    batch: 10, 10, 10, then 5 (short) ends the rounds. All of it in ONE tick — the tick
    interval is a minute, so nothing here waited for a second tick — and the D6/D7 tail
    ran once after the rounds (the stale RUNNING row is recovered)."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    ids = await _insert_many(sessions, 35)
    stale = await _insert(sessions, status=TaskStatus.RUNNING, execution_id="exec-old")
    await age(sessions, stale, 121)
    events = LoopEvents()
    loop = DispatchLoop(queue, settings, listener=events)
    loop.start()
    try:
        _, info, _ = await events.until("the first tick", lambda e, i: e in (
            "tick.done", "tick.fault"))
    finally:
        await loop.stop()
    report = info["report"]
    rounds = [i["report"].scanned for e, i, _ in events.seen if e == "tick.round"]
    assert rounds == [10, 10, 10, 5]
    assert (report.rounds, report.scanned, report.added, report.backlog) == (4, 35, 35, False)
    assert (report.recovered_stale, loop.ticks, loop.faults) == (1, 1, 0)
    assert await _undispatched(sessions) == 1  # only the row recovered after the rounds
    assert all([await _state(queue, t) == "waiting" for t in ids])


async def test_loop_full_last_scan_then_a_short_one_of_none(settings, sessions, demo, queue):
    """D8: exactly two batches due: two full scans, then a third that comes back empty
    (short) ends the rounds; a full round that changed no row ends them too (the next scan
    would return the same rows), without counting as a backlog."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    await _insert_many(sessions, 20)
    loop = DispatchLoop(queue, settings)
    report = await loop.tick_once()
    assert (report.rounds, report.scanned, report.added, report.backlog) == (3, 20, 20, False)

    calls = 0

    async def same_rows_again(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal calls
        calls += 1
        return DispatchReport(scanned=10)  # full, but nothing added, refreshed or failed

    report = await DispatchLoop(queue, settings, dispatch=same_rows_again).tick_once()
    assert (calls, report.rounds, report.backlog) == (1, 1, False)


async def test_loop_budget_ends_the_rounds_and_the_next_tick_follows_at_once(
        settings, sessions, demo, queue):
    """D8: a budget too small for a second round (1 ns) ends each tick after one full
    scan with the backlog left (`backlog`), and the next tick starts at once — the
    interval is a minute, so every tick after the first here is a catch-up tick — until
    a scan comes back short; that tick waits for the interval again. Each tick ran the
    D6/D7 tail (the stale row is recovered in the first)."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10,
                                dispatch_budget_s=1e-9)
    await _insert_many(sessions, 25)
    stale = await _insert(sessions, status=TaskStatus.RUNNING, execution_id="exec-old")
    await age(sessions, stale, 121)
    events = LoopEvents()
    loop = DispatchLoop(queue, settings, listener=events)
    loop.start()
    try:
        await events.until("a tick whose scan came back short", lambda e, i: (
            e == "tick.fault" or (e == "tick.done" and not i["report"].backlog)))
    finally:
        await loop.stop()
    reports = [i["report"] for e, i, _ in events.seen if e == "tick.done"]
    # 25 + the recovered row = 26 rows: 10, 10 (backlog each), then 6 (short).
    assert [(r.rounds, r.scanned, r.backlog) for r in reports] == [
        (1, 10, True), (1, 10, True), (1, 6, False)]
    assert reports[0].recovered_stale == 1 and loop.faults == 0
    assert await _undispatched(sessions) == 0


@pytest.mark.parametrize("changes", [{"dispatch_budget_s": 0.0}, {"redispatch_age_s": 0.0}])
async def test_loop_budget_zero_is_one_scan_per_tick(settings, sessions, demo, queue,
                                                     changes):
    """D8: `dispatch_budget_s` 0 is the book's loop — one scan per tick, and no catch-up
    tick (no `backlog`: the next tick waits for the interval). A re-dispatch age of 0
    caps the budget at 0 too: every row a tick marked would be due again at once."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10, **changes)
    await _insert_many(sessions, 25)
    report = await DispatchLoop(queue, settings).tick_once()
    assert (report.rounds, report.scanned, report.backlog) == (1, 10, False)
    assert await _undispatched(sessions) == 15


async def test_loop_round_that_raises_ends_the_tick_before_the_tail(settings, sessions,
                                                                    demo, queue, caplog):
    """D8: a tick that raises ends that round — here the second scan round of a backlog:
    no further round, no recovery or purge in that tick, one `dispatch.fault` line; the
    rows of the first round stay marked (D3)."""
    caplog.set_level(logging.INFO, logger="teamdesk.dispatcher")
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    await _insert_many(sessions, 25)
    stale = await _insert(sessions, status=TaskStatus.RUNNING, execution_id="exec-old")
    await age(sessions, stale, 121)
    calls = 0

    async def second_round_fails(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("injected in round 2")
        return await dispatch_tasks(*args, **kwargs)

    loop = DispatchLoop(queue, settings, dispatch=second_round_fails)
    assert await loop.tick_once() is None
    assert (calls, loop.faults, str(loop.last_error)) == (2, 1, "injected in round 2")
    assert (await _row(sessions, stale))["status"] is TaskStatus.RUNNING  # no tail ran
    assert await _undispatched(sessions) == 15
    assert [r.getMessage() for r in caplog.records if "dispatch.fault" in r.getMessage()] == [
        "dispatch.fault error=RuntimeError: injected in round 2"]


async def test_listening_loop_ticks_at_once_on_a_committed_outbox_insert(settings, sessions,
                                                                        demo, queue):
    """D8, O1: the worker process's loop listens for the outbox's notification (sent by
    the ledger's INSERT trigger when the request's transaction commits): a task created
    through the service is dispatched by a tick that starts at once — the interval is a
    minute, so only the notification can have started it."""
    settings = settings.replace(dispatch_tick_s=60.0)
    events = LoopEvents()
    loop = DispatchLoop(queue, settings, listener=events, listen=True)
    loop.start()
    try:
        await events.until("the first tick", lambda e, i: e == "tick.done")
        await events.until("LISTEN is on", lambda e, i: e == "listen.ready")
        async with sessions() as s:
            task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
        _, info, _ = await events.until("a tick woken by the insert", lambda e, i: (
            e == "tick.done" and i["report"].added == 1))
    finally:
        await loop.stop()
    assert info["tick"] == 2 and loop.faults == 0
    assert await _state(queue, task.id) == "waiting"


async def test_only_one_process_catches_up_at_a_time(settings, sessions, demo, queue):
    """D8, D5: while another process's dispatcher holds the catch-up lock (taken here by
    hand, as that dispatcher's round would), a tick's first scan still runs, but its
    catch-up rounds yield at once: two processes woken by the same burst would otherwise
    add every row of it twice. Once the lock is free, the next tick catches up."""
    import psycopg

    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    await _insert_many(sessions, 25)
    loop = DispatchLoop(queue, settings)
    async with await psycopg.AsyncConnection.connect(settings.database_url,
                                                     autocommit=True) as other:
        await other.execute("SELECT pg_advisory_lock(hashtext('teamdesk.dispatch.catch_up'))")
        report = await loop.tick_once()
        assert (report.rounds, report.scanned, report.backlog) == (1, 10, False)
        await other.execute("SELECT pg_advisory_unlock(hashtext('teamdesk.dispatch.catch_up'))")
    report = await loop.tick_once()
    assert (report.rounds, report.scanned, report.backlog) == (2, 15, False)
    assert await _undispatched(sessions) == 0
