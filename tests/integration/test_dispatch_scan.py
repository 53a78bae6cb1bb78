"""The dispatcher's scan and its add, against real PostgreSQL and real Redis (D1, D2; I2,
Q1; ch. 23 §3).

Proves which WAITING rows one scan picks and in what order (D1: never dispatched first by
`run_at`, then longest-unchecked; at most a batch; a check exactly at the 30 s cutoff
excluded; no `run_at <= now` condition), that the rows past the limit are picked by the
next tick, and that each row becomes the job D2 describes — `execute` {taskId, run} under
the job id of I2 with the queue's defaults (Q1), delayed by `run_at - now` in the
database's clock. Timestamps are written into the rows as explicit values; nothing waits
for a clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from teamdesk.db.models import BackgroundTask, TaskStatus, TaskType
from teamdesk.tasks.dispatcher import dispatch_tasks, scan
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.queue import JOB_NAME, task_job_id
from teamdesk.testing import task_row
from tests.integration.dispatch_helpers import insert_task, job_state


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
        ids[(run_at, dispatched)] = await insert_task(sessions, run_at=run_at,
                                                      dispatched_at=dispatched)
    far = datetime.max.replace(tzinfo=UTC)
    for key in sorted(ids, key=lambda k: (k[1] is not None, k[1] or far, k[0])):
        expected.append(ids[key])
    excluded = [
        await insert_task(sessions, dispatched_at=now - timedelta(seconds=5)),
        # Not < cutoff, with 15 s to spare for the test's own inserts on a busy machine.
        await insert_task(sessions, dispatched_at=now - timedelta(seconds=15)),
        *[await insert_task(sessions, status=s) for s in
          (TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.FAILED)],
    ]
    async with Ledger(settings.database_url).connection() as conn:
        scanned = [r.id for r in await scan(conn, settings)]
    assert scanned == expected[:100]

    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.added) == (100, 100)
    states = {tid: await job_state(queue, tid) for tid in expected + excluded}
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
    assert all([await job_state(queue, t) in ("waiting", "delayed") for t in expected[100:]])
    assert all([await job_state(queue, t) is None for t in excluded])


async def test_future_run_at_is_a_delayed_job_now(settings, sessions, demo, queue):
    """D1, D2: no `run_at <= now` condition — tomorrow's reminder is enqueued today as a
    delayed job with delay = run_at - now; a past run_at gets delay 0 (waiting). The job is
    `execute` {taskId, run} with jobId task-run (I2) and the queue's defaults (Q1)."""
    now = datetime.now(UTC)
    tomorrow = await insert_task(sessions, type=TaskType.REMINDER,
                                 run_at=now + timedelta(days=1))
    overdue = await insert_task(sessions, run_at=now - timedelta(hours=2))
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
        assert (await task_row(sessions, tid))["dispatched_at"] > now
