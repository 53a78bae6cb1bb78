"""The real-worker tests of ch. 26 §7 that need no dispatcher: stalled takeover (export and
reminder), transient retry with a 30 ms backoff, permanent rejection — and the retention options
that finished job records keep (Q1).

Real PostgreSQL, real Redis, the real BullMQ worker built by `create_task_worker` (W1),
the real `stalled` event. Worker A runs with a 1000 ms lock and renewal off (the stuck
executor); B checks for stalled jobs every 100 ms. These short timings go through
Settings (Q2); production defaults are untouched. Synchronisation is by gates and events;
every wait is bounded only to detect a sync point that never came.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from teamdesk.db.models import BackgroundTask, TaskStatus
from teamdesk.services import exports, tickets
from teamdesk.tasks.dispatcher import dispatch_tasks
from teamdesk.tasks.queue import task_job_id
from teamdesk.testing import enqueue, reminder_effects, task_row
from tests.integration.conftest import once_more_changes_nothing, worker_run

A_STUCK = dict(renew_lock=False, lock_duration_ms=1000, stalled_interval_ms=60_000)
B_WATCHFUL = dict(stalled_interval_ms=100)




@pytest.mark.parametrize("kind", ["export", "reminder"])
async def test_stalled_takeover_late_executor_changes_nothing(
        sessions, demo, queue, start_worker, recorder, gates, kind):
    """P2, P3, P6, P10, W2 (ch. 26 §7 test 1): A pauses after its real read; its lock
    expires; B's stall check emits the real `stalled` event and B claims E2. A comes back
    with a late read error: its fenced error write matches 0 rows and the whole row still
    equals B's snapshot. Then B completes: Redis completed/100, ledger COMPLETED, and the
    business result exactly once."""
    if kind == "export":
        async with sessions() as s:
            task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
        point = "export.after_read"
    else:
        async with sessions() as s:
            ticket, task = await tickets.create_ticket(
                s, "acme", "eve", "Renewal", due_at=datetime.now(UTC), assignee_id="cai")
        base = await reminder_effects(sessions, ticket.id)
        point = "reminder.after_lease_check"
    g_a = gates.gate(point, actor="A")
    g_b = gates.gate("claim.after", actor="B")
    await start_worker("A", **A_STUCK)
    job = await enqueue(queue, task.id)
    a_ctx = await g_a.reached()

    await start_worker("B", **B_WATCHFUL)
    stalled = await recorder.wait_for("stalled", job_id=job.id)
    b_ctx = await g_b.reached()
    assert stalled["actor"] == "B" and b_ctx["execution_id"] != a_ctx["execution_id"]
    snapshot = await task_row(sessions, task.id)
    assert (snapshot["status"], snapshot["execution_id"]) == (TaskStatus.RUNNING,
                                                              b_ctx["execution_id"])

    g_a.release(raising=OSError("late read error"))
    await g_a.passed()
    await recorder.wait_for("error", actor="A", job_id=job.id)  # its lock is B's now
    assert await task_row(sessions, task.id) == snapshot
    if kind == "reminder":
        assert await reminder_effects(sessions, ticket.id) == base

    g_b.release()
    await recorder.wait_for("completed", actor="B", job_id=job.id)
    assert await job.getState() == "completed"
    assert (await queue.getJob(job.id)).progress == 100
    row = await task_row(sessions, task.id)
    assert (row["status"], row["progress"], row["execution_id"]) == (TaskStatus.COMPLETED, 100,
                                                                     None)
    if kind == "export":
        assert len(list(csv.DictReader(io.StringIO(row["result_csv"])))) > 0
        assert row["result_summary"].endswith("(filters: status=['OPEN'])")
        assert row["expires_at"] > datetime.now(UTC) + timedelta(hours=23)
    else:
        assert await reminder_effects(sessions, ticket.id) == (1, 1, base[2] + 1)
    assert not recorder.of("failed")

    again = await once_more_changes_nothing(sessions, task.id,
                                            worker_run(queue, recorder, task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"


async def test_transient_error_retries_same_run_with_short_backoff(
        sessions, demo, queue, start_worker, recorder, gates):
    """Q1, Q2, P7, I3, W2 (test 3): the first real read fails; the same worker retries the
    same job after a 30 ms backoff; attemptsMade is 2 in the ledger and in the queue; the
    first `failed` is logged exhausted=false."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"priority": ["LOW"]})
    fault = gates.fault("export.after_read", OSError("connection reset while reading"))
    await start_worker("W", backoff_delay_ms=30)
    job = await enqueue(queue, task.id)
    first = await recorder.wait_for("failed", job_id=job.id)
    assert (first["exhausted"], first["attempts_made"]) == (False, 1)
    await recorder.wait_for("completed", job_id=job.id)
    assert fault.fired == 1
    row = await task_row(sessions, task.id)
    assert (row["status"], row["attempts"], row["last_error"]) == (
        TaskStatus.COMPLETED, 2, "Attempt 1 of 3 failed with a temporary error; retrying "
        "automatically.")
    assert (await queue.getJob(job.id)).attemptsMade == 2
    again = await once_more_changes_nothing(sessions, task.id,
                                            worker_run(queue, recorder, task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"


async def test_permanent_rejection_fails_at_once(sessions, demo, queue, start_worker, recorder):
    """P7, P8, W2 (test 4): invalid filters make the processor write FAILED itself and throw
    UnrecoverableError; the queue job is failed after 1 attempt, logged exhausted=true; the
    ledger was written by the processor, not by the event listener."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {})
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == task.id)
                        .values(filters={"colour": "red"}))
    await start_worker("W", backoff_delay_ms=30)
    job = await enqueue(queue, task.id)
    ev = await recorder.wait_for("failed", job_id=job.id)
    assert (ev["exhausted"], ev["attempts_made"]) == (True, 1)
    assert ev["error"].startswith("UnrecoverableError: Rejected")
    assert await job.getState() == "failed"
    row = await task_row(sessions, task.id)
    assert (row["status"], row["attempts"], row["execution_id"]) == (TaskStatus.FAILED, 1, None)
    assert row["last_error"] == ("Rejected: the export's filters are no longer valid. "
                                 "Create a new export with valid filters.")
    again = await once_more_changes_nothing(sessions, task.id,
                                            worker_run(queue, recorder, task.id))
    assert again == "not claimed"  # FAILED stays FAILED until a manual retry (R2)


async def test_finished_job_records_keep_the_queue_retention_options(
        settings, sessions, demo, queue, redis, start_worker, recorder):
    """Q1, D2, P8: jobs added by the real dispatcher and finished by a real worker — one
    completed, one failed for good (a permanent rejection) — carry the contract's
    retention in the options stored in Redis: `removeOnComplete = {age: 86400, count:
    1000}`, `removeOnFail = {age: 604800, count: 1000}`. Read from the job hash itself,
    after the move to completed/failed (where BullMQ applies them), not from the options
    the test passed: it passes none. Both records are still there afterwards, as those
    options say they must be (a `True` would have deleted them at once)."""
    async with sessions() as s:
        good = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    async with sessions() as s:
        bad = await exports.request_export(s, "acme", "ben", {})
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == bad.id)
                        .values(filters={"colour": "red"}))
    assert (await dispatch_tasks(queue, settings)).added == 2
    await start_worker("W")
    await recorder.wait_for("completed", job_id=task_job_id(good.id, 0))
    failed = await recorder.wait_for("failed", job_id=task_job_id(bad.id, 0))
    assert failed["exhausted"] is True

    async def stored_opts(task_id: str) -> dict:
        raw = await redis.hget(queue.toKey(task_job_id(task_id, 0)), "opts")
        assert raw is not None, "the job record was removed"
        return json.loads(raw)

    done, gave_up = await stored_opts(good.id), await stored_opts(bad.id)
    assert await (await queue.getJob(task_job_id(good.id, 0))).getState() == "completed"
    assert await (await queue.getJob(task_job_id(bad.id, 0))).getState() == "failed"
    for opts in (done, gave_up):
        assert opts["removeOnComplete"] == {"age": 86400, "count": 1000}
        assert opts["removeOnFail"] == {"age": 604800, "count": 1000}
        assert opts["attempts"] == 3
