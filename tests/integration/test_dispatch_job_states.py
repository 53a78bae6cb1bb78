"""The dispatcher against a job that already exists, in real bullmq states (D4, D3; D1).

Proves D4's "already queued" and "re-add" rows with real jobs in Redis: a waiting, delayed
or active job (a real bullmq worker parked on an Event holds it) only gets its row's
`dispatched_at` refreshed — no second job, no changed delay; a completed record while the
ledger still waits for that run (inferred), and a record in no state at all (`unknown`,
ours), are removed and added again, or they would swallow every later add.

D1's 30 s re-check clock is compressed, not waited for: the rows' `dispatched_at` is aged
by 31 s with the kit's `age(..., columns=("dispatched_at",))` (the dispatcher compares in
the database's clock), and "refreshed" means a mark later than the clock that call returned.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from bullmq import Job

from teamdesk.tasks.dispatcher import dispatch_tasks
from teamdesk.tasks.queue import task_job_id
from teamdesk.testing import DEFAULT_TIMEOUT_S, age, task_row
from tests.integration.dispatch_helpers import bullmq_worker, insert_task, job_state, wait_set


async def test_waiting_and_delayed_jobs_are_refreshed_only(settings, sessions, demo, queue):
    """D4: waiting / delayed → already queued: only `dispatched_at` is refreshed; no second
    job, no changed delay (the 30 s re-check clock is compressed by ageing the rows 31 s)."""
    now = datetime.now(UTC)
    waiting = await insert_task(sessions)
    delayed = await insert_task(sessions, run_at=now + timedelta(hours=1))
    await dispatch_tasks(queue, settings)
    aged_at = await age(sessions, [waiting, delayed], 31, columns=("dispatched_at",))
    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.refreshed, report.added, report.re_added) == (2, 2, 0, 0)
    assert await job_state(queue, waiting) == "waiting"
    job = await queue.getJob(task_job_id(delayed, 0))
    assert await job.getState() == "delayed" and 3600 * 1000 - 5000 < job.delay <= 3600 * 1000
    assert await queue.getJobCounts("waiting", "delayed") == {"waiting": 1, "delayed": 1}
    for tid in (waiting, delayed):
        assert (await task_row(sessions, tid))["dispatched_at"] > aged_at  # refreshed


async def test_active_job_is_refreshed_only(settings, sessions, demo, queue):
    """D4: active (a real worker holds the job, parked on an Event) → refresh only; the
    job is neither removed nor added again."""
    task_id = await insert_task(sessions)
    entered, release = asyncio.Event(), asyncio.Event()

    async def parked(job: Job, token: str) -> str:
        entered.set()
        await asyncio.wait_for(release.wait(), DEFAULT_TIMEOUT_S)
        return "done"

    await dispatch_tasks(queue, settings)
    async with bullmq_worker(settings, parked):
        await wait_set(entered, "the worker took the job")
        aged_at = await age(sessions, task_id, 31, columns=("dispatched_at",))
        report = await dispatch_tasks(queue, settings)
        assert (report.refreshed, report.added, report.re_added) == (1, 0, 0)
        assert await job_state(queue, task_id) == "active"
        release.set()
    assert (await task_row(sessions, task_id))["dispatched_at"] > aged_at


async def test_completed_job_while_ledger_waiting_is_removed_and_added_again(
        settings, sessions, demo, queue):
    """D4 (inferred): the queue says completed but the ledger is still WAITING for that
    run (the executor returned early, e.g. after losing its lease). Without removal the
    record would swallow every add as a duplicate for 24 h: remove it and add again."""
    task_id = await insert_task(sessions)
    completed = asyncio.Event()

    async def returns_early(job: Job, token: str) -> str:
        return "lease lost; nothing written"  # does not touch the ledger

    await dispatch_tasks(queue, settings)
    async with bullmq_worker(settings, returns_early) as worker:
        worker.on("completed", lambda job, result: completed.set())
        await wait_set(completed, "the worker completed the job")
    assert await job_state(queue, task_id) == "completed"

    aged_at = await age(sessions, task_id, 31, columns=("dispatched_at",))
    report = await dispatch_tasks(queue, settings)
    assert (report.re_added, report.added, report.refreshed) == (1, 0, 0)
    job = await queue.getJob(task_job_id(task_id, 0))
    assert await job.getState() == "waiting" and not job.finishedOn  # a fresh record
    assert (await task_row(sessions, task_id))["dispatched_at"] > aged_at


async def test_orphaned_job_record_is_removed_and_added_again(settings, sessions, demo,
                                                              queue, redis):
    """D4, our decision for `unknown`: a job hash that sits in no state list (here the wait
    list key was lost) would swallow a plain add as a duplicate; it is removed and added
    again, like the completed case."""
    task_id = await insert_task(sessions)
    await dispatch_tasks(queue, settings)
    await redis.delete(queue.toKey("wait"))
    assert await job_state(queue, task_id) == "unknown"
    await age(sessions, task_id, 31, columns=("dispatched_at",))
    report = await dispatch_tasks(queue, settings)
    assert report.re_added == 1 and await job_state(queue, task_id) == "waiting"
