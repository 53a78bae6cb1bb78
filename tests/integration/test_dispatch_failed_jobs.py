"""The dispatcher against a job the queue gave up on (D4's failed row, W3; P2, D6).

Proves that a failed job fails its task only under D4's full condition — the row still
WAITING for that run with no lease (`execution_id` NULL) — written as a conditional UPDATE
with a fixed readable `last_error`, the row neither marked nor re-added: an executor's
claim (P2) landing between the scan and the write makes it match nothing, and a RUNNING
row is never failed from the queue's word until D6 has recovered it, a tick later (W3).

The job is failed for real, by a bullmq worker whose processor raises
`UnrecoverableError`. D1's 30 s re-check clock is compressed by ageing `dispatched_at` by
31 s (the kit's `age`); D6's 120 s clock by writing an `updated_at` 121 s back.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from bullmq import Job
from bullmq.custom_errors import UnrecoverableError

from teamdesk import probes
from teamdesk.config import Settings
from teamdesk.db.models import TaskStatus
from teamdesk.tasks.dispatcher import QUEUE_FAILED_ERROR, DispatchReport, dispatch_tasks
from teamdesk.testing import age, task_row
from tests.integration.dispatch_helpers import (
    bullmq_worker,
    insert_task,
    job_state,
    set_columns,
    wait_set,
)


async def _fail_job(settings: Settings) -> None:
    failed = asyncio.Event()

    async def rejects(job: Job, token: str) -> None:
        raise UnrecoverableError("permanent")  # ends the job at once, whatever its attempts

    async with bullmq_worker(settings, rejects) as worker:
        worker.on("failed", lambda job, err: failed.set())
        await wait_set(failed, "the worker failed the job")


async def test_failed_job_with_waiting_unleased_ledger_sets_failed(settings, sessions, demo,
                                                                   queue):
    """D4, W3: the queue gave up (failed) while the ledger is WAITING with no lease for that
    run → FAILED with a fixed readable last_error; not marked, not re-added."""
    task_id = await insert_task(sessions)
    await dispatch_tasks(queue, settings)
    await _fail_job(settings)
    assert await job_state(queue, task_id) == "failed"

    before = (await task_row(sessions, task_id))["dispatched_at"]
    await age(sessions, task_id, 31, columns=("dispatched_at",))
    aged = (await task_row(sessions, task_id))["dispatched_at"]
    assert aged < before
    report = await dispatch_tasks(queue, settings)
    assert (report.failed_from_queue, report.added, report.re_added, report.refreshed) == (
        1, 0, 0, 0)
    row = await task_row(sessions, task_id)
    assert (row["status"], row["last_error"], row["run"]) == (
        TaskStatus.FAILED, QUEUE_FAILED_ERROR, 0)
    assert row["dispatched_at"] == aged  # not refreshed
    assert await job_state(queue, task_id) == "failed"


async def test_failed_job_does_not_fail_a_row_claimed_during_the_tick(settings, sessions,
                                                                      demo, queue):
    """D4, P2: the scan saw WAITING without a lease and the queue says failed, but an
    executor claims the row (RUNNING, new execution_id) before the tick writes: the FAILED
    write is conditioned on (id, run, WAITING, execution_id NULL) and matches nothing. The
    claim happens at another row's `dispatch.before_add`, which is after the scan and before
    any write of this tick, however the rows are interleaved (that row sorts first)."""
    claimed = await insert_task(sessions)
    await dispatch_tasks(queue, settings)
    await _fail_job(settings)
    fresh = await insert_task(sessions)  # dispatched_at NULL: scanned before `claimed`
    await age(sessions, claimed, 31, columns=("dispatched_at",))

    async def executor_claims(point: str, ctx: dict[str, Any]) -> None:
        if ctx["task_id"] == fresh:
            await set_columns(sessions, claimed, status=TaskStatus.RUNNING,
                              execution_id="exec-new", attempts=1)

    with probes.installed(executor_claims):
        report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.added, report.failed_from_queue) == (2, 1, 0)
    row = await task_row(sessions, claimed)
    assert (row["status"], row["execution_id"], row["last_error"]) == (
        TaskStatus.RUNNING, "exec-new", None)


async def test_failed_job_never_fails_a_running_row_until_recovered(settings, sessions, demo,
                                                                    queue):
    """D4, D6, W3 (ch. 26 §7 test 5): a RUNNING row is never failed from the queue's word —
    its lease may be live. Only after D6 recovers it (aged `updated_at`, which compresses
    the 120 s clock) does a *later* tick see WAITING + no lease + failed and set FAILED:
    recovery runs after the dispatch loop, so it takes two ticks."""
    task_id = await insert_task(sessions)
    await dispatch_tasks(queue, settings)
    await _fail_job(settings)
    await set_columns(sessions, task_id, status=TaskStatus.RUNNING, execution_id="exec-live",
                      dispatched_at=datetime.now(UTC) - timedelta(minutes=5))
    before = await task_row(sessions, task_id)
    report = await dispatch_tasks(queue, settings)
    assert report == DispatchReport()
    assert await task_row(sessions, task_id) == before  # untouched, updated_at included

    await set_columns(sessions, task_id, updated_at=datetime.now(UTC) - timedelta(seconds=121))
    report = await dispatch_tasks(queue, settings)
    assert (report.recovered_stale, report.failed_from_queue) == (1, 0)
    row = await task_row(sessions, task_id)
    assert (row["status"], row["execution_id"], row["dispatched_at"]) == (
        TaskStatus.WAITING, None, None)
    report = await dispatch_tasks(queue, settings)
    assert report.failed_from_queue == 1
    assert (await task_row(sessions, task_id))["status"] is TaskStatus.FAILED
