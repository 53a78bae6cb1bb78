"""The real-worker tests of ch. 26 §7 that meet the dispatcher: the late `failed` callback
(test 2) and stalled-over-the-limit (test 5), each ending in real dispatcher scans.

"Aging `updated_at`" compresses the 120 s recovery clock (D6) rather than waiting for it;
removing one job record simulates record loss, not a whole-Redis loss (that one is in
test_dispatch_redis_faults.py). The counterexample run of test 2 installs the *old* ledger-writing
`failed` listener and shows the corruption it causes, so the test is known to detect it.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update

from teamdesk.db.models import BackgroundTask, TaskStatus
from teamdesk.services import exports
from teamdesk.tasks.dispatcher import QUEUE_FAILED_ERROR, dispatch_tasks
from teamdesk.testing import age, enqueue, task_row
from tests.integration.conftest import once_more_changes_nothing, worker_run

A_STUCK = dict(renew_lock=False, lock_duration_ms=1000, stalled_interval_ms=60_000)


def legacy_failed_listener(sessions, release: asyncio.Event, done: asyncio.Event):
    """The old code's `failed` callback (ch. 26 §7, "why the failed callback only logs"):
    on exhaustion it sets FAILED by task_id + run, with no lease. Its SQL is held until
    `release`, to run after the new executor has claimed."""

    pending: set[asyncio.Future] = set()

    def on_failed(job, err) -> None:
        async def write() -> None:
            await release.wait()
            async with sessions() as s, s.begin():
                await s.execute(update(BackgroundTask).where(
                    BackgroundTask.id == job.data["taskId"], BackgroundTask.run == job.data["run"],
                    BackgroundTask.status.in_([TaskStatus.RUNNING, TaskStatus.WAITING]),
                ).values(status=TaskStatus.FAILED, execution_id=None,
                         last_error="failed (legacy callback)"))
            done.set()

        fut = asyncio.ensure_future(write())
        pending.add(fut)
        fut.add_done_callback(pending.discard)

    return on_failed


@pytest.mark.parametrize("listener", ["contract", "legacy-counterexample"])
async def test_late_failed_callback_cannot_fail_the_new_execution(
        settings, sessions, demo, queue, start_worker, recorder, gates, listener):
    """W2, W3, D4, D6, P3 (test 2): A's read fails and its WAITING write fails too, so real
    BullMQ (attempts=1) marks the job failed while the ledger is RUNNING under E1. The
    record is removed; two real dispatcher scans recover the task (WAITING) and re-add the
    same run; B claims E2. Then the old callback's SQL is released: with the contract's
    log-only listener there is none and B completes; with the legacy listener E2 is wiped
    to FAILED — the corruption the contract forbids."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"priority": ["HIGH"]})
    gates.fault("export.after_read", OSError("read failed"), actor="A")
    gates.fault("error.before_write", ConnectionError("ledger briefly unreachable"), actor="A")
    release, legacy_done = asyncio.Event(), asyncio.Event()
    a = await start_worker("A")
    if listener != "contract":
        a.worker.on("failed", legacy_failed_listener(sessions, release, legacy_done))
    job = await enqueue(queue, task.id, attempts=1)
    failed = await recorder.wait_for("failed", actor="A", job_id=job.id)
    assert failed["exhausted"] is True
    row = await task_row(sessions, task.id)
    assert row["status"] == TaskStatus.RUNNING and row["execution_id"]  # E1 still there
    assert await queue.remove(job.id) == 1  # record loss
    await a.close()  # A's process is gone; its old callback may still be in flight

    await age(sessions, task.id, 121)
    first = await dispatch_tasks(queue, settings)
    assert first.recovered_stale == 1
    assert (await task_row(sessions, task.id))["status"] == TaskStatus.WAITING
    second = await dispatch_tasks(queue, settings)
    assert second.added == 1

    g_b = gates.gate("claim.after", actor="B")
    await start_worker("B")
    b_ctx = await g_b.reached()
    release.set()
    if listener == "contract":
        row = await task_row(sessions, task.id)
        assert (row["status"], row["execution_id"]) == (TaskStatus.RUNNING,
                                                        b_ctx["execution_id"])
        g_b.release()
        await recorder.wait_for("completed", actor="B")
        row = await task_row(sessions, task.id)
        assert (row["status"], row["run"], row["progress"]) == (TaskStatus.COMPLETED, 0, 100)
        again = await once_more_changes_nothing(sessions, task.id,
                                                worker_run(queue, recorder, task.id))
        assert again == "skipped: ledger is run 0 COMPLETED"
    else:
        await asyncio.wait_for(legacy_done.wait(), 8)
        row = await task_row(sessions, task.id)
        assert (row["status"], row["execution_id"]) == (TaskStatus.FAILED, None), \
            "the legacy listener should have wiped B's lease"
        g_b.release()
        await recorder.wait_for("completed", actor="B")  # B lost its lease: returns quietly
        assert (await task_row(sessions, task.id))["status"] == TaskStatus.FAILED
        again = await once_more_changes_nothing(sessions, task.id,
                                                worker_run(queue, recorder, task.id))
        assert again == "not claimed"


async def test_stalled_over_the_limit_then_two_scans(settings, sessions, demo, queue,
                                                     start_worker, recorder, gates):
    """W3, D4, D6, P7 (test 5): B checks stalls with maxStalledCount 0, so A's expired
    lock makes the real queue fail the job while the ledger is still RUNNING. Scan 1 (aged
    updated_at) recovers it to WAITING with the lease cleared; scan 2 sees the queue's
    failed record and writes FAILED. A's late error changes nothing afterwards."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["CLOSED"]})
    g_a = gates.gate("export.after_read", actor="A")
    await start_worker("A", **A_STUCK)
    job = await enqueue(queue, task.id)
    await g_a.reached()
    await start_worker("B", stalled_interval_ms=100, max_stalled_count=0)
    await recorder.wait_for("stalled", job_id=job.id)
    # This port fails an over-the-limit job lazily: the stall check marks it (deferred
    # failure) and the next worker to fetch it fails it with UnrecoverableError (W2).
    gave_up = await recorder.wait_for("failed", job_id=job.id, actor="B")
    assert gave_up["exhausted"] is True and gave_up["error"].startswith("UnrecoverableError")
    assert await job.getState() == "failed"
    row = await task_row(sessions, task.id)
    assert row["status"] == TaskStatus.RUNNING  # the queue's word alone changes nothing

    await age(sessions, task.id, 121)
    first = await dispatch_tasks(queue, settings)
    row = await task_row(sessions, task.id)
    assert first.recovered_stale == 1
    assert (row["status"], row["execution_id"], row["dispatched_at"]) == (
        TaskStatus.WAITING, None, None)
    second = await dispatch_tasks(queue, settings)
    assert second.failed_from_queue == 1
    final = await task_row(sessions, task.id)
    assert (final["status"], final["last_error"]) == (TaskStatus.FAILED, QUEUE_FAILED_ERROR)

    g_a.release(raising=OSError("late read error"))
    await g_a.passed()
    await recorder.wait_for("error", actor="A", job_id=job.id)
    assert await task_row(sessions, task.id) == final
    again = await once_more_changes_nothing(sessions, task.id,
                                            worker_run(queue, recorder, task.id))
    assert again == "not claimed"  # FAILED until a manual retry (R2)
