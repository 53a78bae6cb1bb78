"""The dispatcher when Redis fails: offline, stopped, hung, or emptied (ch. 23 §7; D1–D5,
D8; X2, W1).

Proves what the book's one fake leaves open: with the book's "Redis offline" queue the tick
raises, the task stays WAITING with `dispatched_at` NULL and the round ends before its
clean-ups (D3, D8); the book's named test ("Redis 投递失败") with the real queue, its add
failing at the probe before it, and the next tick enqueueing the job (D1–D3, D8); against
the real server stopped, a loop tick fails within seconds as a logged dispatch fault with
the ledger unchanged, and once Redis is back a later tick enqueues the job, the product's
worker runs it and the download holds exactly the matching tickets (D1–D3, D8, W1, X2); a
hung server (SIGSTOP) fails the tick after `redis_timeout_s` with a readable `QueueTimeout`
(D8); and a whole prefix lost after dispatch is repaired by the next rescan, a task
completed meanwhile not re-added (D1, D4, D5). The real outages pause or stop the embedded
Redis, so they are skipped against a server given by `REDIS_URL`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import select, update

from devkit import services
from teamdesk.db.models import BackgroundTask, TaskStatus, Ticket, TicketStatus
from teamdesk.services import exports
from teamdesk.tasks.dispatch_loop import DispatchLoop
from teamdesk.tasks.dispatcher import QueueTimeout, dispatch_tasks
from teamdesk.tasks.queue import create_task_queue, delete_prefix, task_job_id
from teamdesk.testing import task_row
from tests.integration.dispatch_helpers import LoopEvents, insert_task, job_state, set_columns

EMBEDDED_REDIS = pytest.mark.skipif(
    bool(os.environ.get("REDIS_URL")),
    reason="stops/pauses the embedded Redis; not done to a server given by REDIS_URL")


class OfflineQueue:
    """The book's fake (ch. 23 §7): `getJob` finds nothing, `add` fails as if Redis were
    offline. The only stand-in queue of the dispatcher's tests; the real outage is tested
    below."""

    def __init__(self) -> None:
        self.adds = 0

    async def getJob(self, job_id: str) -> None:  # bullmq's camelCase API
        return None

    async def add(self, name: str, data: Any, opts: dict[str, Any]) -> Any:
        self.adds += 1
        raise ConnectionError("Redis offline")

    async def remove(self, job_id: str, opts: dict[str, Any] | None = None) -> int:
        raise AssertionError("not reached: no job exists")


def _csv_ids(text: str) -> list[int]:
    rows = list(csv.DictReader(io.StringIO(text)))
    assert all(r["status"] == "OPEN" for r in rows)
    return [int(r["id"]) for r in rows]


async def test_redis_offline_add_keeps_task_waiting_undispatched(settings, sessions, demo):
    """Ch. 23 §7, D3, D8 (the book's unit-level case, with the real ledger): `getJob` finds
    nothing and `add` raises "Redis offline" → the tick raises, the task stays WAITING with
    `dispatched_at` NULL, and the round ends before its clean-ups (a stale RUNNING row is
    not recovered by the failed tick)."""
    task_id = await insert_task(sessions)
    stale = await insert_task(sessions, status=TaskStatus.RUNNING, execution_id="e",
                              run_at=datetime.now(UTC) + timedelta(days=1))
    await set_columns(sessions, stale, updated_at=datetime.now(UTC) - timedelta(hours=1))
    offline = OfflineQueue()
    with pytest.raises(ConnectionError, match="Redis offline"):
        await dispatch_tasks(offline, settings)
    assert offline.adds == 1
    row = await task_row(sessions, task_id)
    assert (row["status"], row["dispatched_at"]) == (TaskStatus.WAITING, None)
    assert (await task_row(sessions, stale))["status"] is TaskStatus.RUNNING


async def test_redis_dispatch_failure_then_the_next_tick(
        settings, sessions, demo, queue, gates):
    """The book's named test 'Redis 投递失败' (ch. 23 §7), with real parts: an export requested
    through the service (O1), the real dispatcher on this test's own queue, and an add that
    fails as an offline Redis does ("Redis offline", raised at the probe right before the
    add, `dispatch.before_add`: the suite's seam for it, harmless to the shared server) →
    the tick raises, the task stays WAITING with `dispatched_at` NULL and no job in the queue
    (D3, D8). Then what the book leaves open: the next tick enqueues the job and marks the row
    (D1, D2, D3)."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    offline = gates.fault("dispatch.before_add", RedisConnectionError("Redis offline"))
    with pytest.raises(RedisConnectionError, match="Redis offline"):
        await dispatch_tasks(queue, settings)
    assert offline.fired == 1
    row = await task_row(sessions, task.id)
    assert (row["status"], row["dispatched_at"]) == (TaskStatus.WAITING, None)
    assert await job_state(queue, task.id) is None

    report = await dispatch_tasks(queue, settings)  # the fault fired once: Redis is back
    assert (report.scanned, report.added) == (1, 1)
    row = await task_row(sessions, task.id)
    assert row["status"] is TaskStatus.WAITING and row["dispatched_at"] is not None
    assert await job_state(queue, task.id) == "waiting"


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
    before = await task_row(sessions, task.id)
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
        assert await task_row(sessions, task.id) == before  # the ledger is unchanged
    finally:
        services.start_redis()

    await events.until("a tick that enqueues after recovery",
                       lambda e, i: e == "tick.done" and i["report"].added == 1)
    row = await task_row(sessions, task.id)
    assert row["status"] is TaskStatus.WAITING and row["dispatched_at"] is not None
    assert await job_state(queue, task.id) == "waiting"

    # The product's own worker (W1: `create_task_worker`, the real `process_task`) takes
    # the job that the recovered dispatcher enqueued.
    try:
        await start_worker("W")
        done = await recorder.wait_for("completed", job_id=task_job_id(task.id, 0))
    finally:
        await loop.stop()
    assert not recorder.of("failed") and not recorder.errors
    row = await task_row(sessions, task.id)
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
    task_id = await insert_task(sessions)
    before = await task_row(sessions, task_id)
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
    assert await task_row(sessions, task_id) == before


async def test_whole_redis_loss_is_repaired_by_the_rescan(settings, sessions, demo, queue,
                                                          redis):
    """Beyond the book (ch. 26 §7 only removes one record), D1, D4, D5: after dispatch,
    every key of this test's queue prefix is deleted — a FLUSHALL of this test's world that
    spares other prefixes. Once `dispatched_at` is older than 30 s (aged explicitly), the
    next scan re-adds the lost jobs; a task COMPLETED meanwhile is not re-added."""
    ids = [await insert_task(sessions) for _ in range(3)]
    done = await insert_task(sessions)
    await dispatch_tasks(queue, settings)
    await set_columns(sessions, done, status=TaskStatus.COMPLETED)

    assert await delete_prefix(redis, settings.queue_prefix) > 0
    assert all([await job_state(queue, t) is None for t in ids])
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).values(
            dispatched_at=datetime.now(UTC) - timedelta(seconds=31)))
    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.added) == (3, 3)
    assert all([await job_state(queue, t) == "waiting" for t in ids])
    assert await job_state(queue, done) is None
