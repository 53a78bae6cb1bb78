"""Several dispatchers on one ledger never deadlock each other (D8, D5; P2, P3).

Duplicate dispatch is normal (D5): two worker processes each run a dispatch loop, and
their scans overlap. Each multi-row UPDATE of a tick (mark, fail from queue, recovery,
purge) therefore meets the same rows in another dispatcher's statement. D8 says they never
deadlock: every such UPDATE locks its rows in one global order (by id) first. This test
drives dispatchers, claims and the queue-side churn hard enough that the old statements
(each UPDATE locking rows in whatever order its plan met them) deadlocked, and asserts
that no statement of any actor died of `deadlock detected` and that no tick faulted.

The load is bounded by counts (rounds per dispatcher), not by time; nothing here orders
events by sleeping. The churn actors make the scans disagree about what a row needs
(one dispatcher adds a job another finds queued), which is what put the same rows into
two marks in different orders.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from typing import Any

import psycopg
from bullmq import Worker
from bullmq.custom_errors import UnrecoverableError
from sqlalchemy import text

from teamdesk.tasks.dispatcher import dispatch_tasks
from teamdesk.tasks.lease import LeaseLost, claim, leased_update
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.queue import create_task_queue, redis_client, task_job_id

#: Dispatchers on the one ledger, and the scan rounds each runs.
DISPATCHERS = 4
ROUNDS = 8
#: WAITING rows whose job stays queued, and rows whose job the queue already failed. The
#: batch covers nearly all of them, so every two marks running at once share most rows.
LIVE_ROWS = 500
FAILED_ROWS = 40
BATCH = 500
SYNC_TIMEOUT = 8.0  # only detects a sync point that never came

_INSERT = """
INSERT INTO background_tasks (type, status, run, owner_id, team_id, scope, filters, run_at)
SELECT 'EXPORT', 'WAITING', 0, 'ben', 'acme', 'TEAM', '{}'::jsonb,
       now() - interval '1 minute' + g * interval '1 ms'
FROM generate_series(1, :n) AS g
RETURNING id
"""


async def _insert(sessions, n: int) -> list[str]:
    async with sessions() as s, s.begin():
        return list((await s.execute(text(_INSERT), {"n": n})).scalars())


async def _fail_jobs(settings, queue, ids: list[str]) -> None:
    """Jobs the queue gave up on (failed) while their rows wait without a lease: each
    dispatcher that scans such a row fails it (D4 failed branch, `fail_from_queue`)."""
    failed = asyncio.Event()
    count = 0

    async def rejects(job, token):
        raise UnrecoverableError("permanent")  # ends the job at once

    def on_failed(job, err):
        nonlocal count
        count += 1
        if count == len(ids):
            failed.set()

    for task_id in ids:
        await queue.add("execute", {"taskId": task_id, "run": 0},
                        {"jobId": task_job_id(task_id, 0)})
    worker = Worker(settings.queue_name, rejects, {
        "connection": redis_client(settings, blocking=True), "prefix": settings.queue_prefix,
        "concurrency": 8})
    worker.on("failed", on_failed)
    try:
        await asyncio.wait_for(failed.wait(), SYNC_TIMEOUT)
    finally:
        closing = asyncio.ensure_future(worker.close())
        done, _ = await asyncio.wait({closing}, timeout=2.0)
        if not done:  # ARCHITECTURE.md: a plain close can hang; force it
            await asyncio.wait({asyncio.ensure_future(worker.close(force=True))}, timeout=2.0)


async def _deadlocks(database_url: str) -> int:
    """PostgreSQL's own count of deadlocks detected in this test's database."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await (await conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )).fetchone()
        return int(row[0])


async def _dispatcher(settings: Any, reports: list[Any], faults: Counter[str]) -> None:
    """One dispatcher: `ROUNDS` scan rounds on a connection of its own."""
    queue = create_task_queue(settings)
    ledger = await Ledger.pooled(settings.database_url, size=1)
    try:
        for _ in range(ROUNDS):
            try:
                reports.append(await dispatch_tasks(queue, settings, ledger=ledger))
            except Exception as err:  # a dispatch fault (D8); counted, then go on
                faults[type(err).__name__] += 1
    finally:
        await ledger.close()
        await queue.close()


async def _churn_once(conn: Any, queue: Any, live: list[str], doomed: list[str],
                      rng: random.Random) -> None:
    """One round of disagreement with the dispatchers, single-row writes only."""
    for task_id in rng.sample(live, 8):  # lost job records: re-add (D4)
        await queue.remove(task_job_id(task_id, 0))
    for task_id in rng.sample(live, 4):  # claim, then report back (P2, P7)
        got = await claim(conn, task_id, 0, 1)
        if got is not None and rng.random() < 0.7:
            await leased_update(conn, got[0], "report_retryable", last_error="retry")
        elif got is not None:  # left RUNNING, stale: recovery (D6, D9)
            await conn.execute("UPDATE background_tasks SET updated_at = now() - "
                               "interval '5 s' WHERE id = %s", (task_id,))
    for task_id in rng.sample(doomed, 4):  # D4: fail from queue again
        await conn.execute("UPDATE background_tasks SET status = 'WAITING', "
                           "last_error = NULL, stale_recoveries = 0 WHERE id = %s",
                           (task_id,))


async def test_concurrent_dispatchers_and_claims_never_deadlock(settings, sessions, demo):
    """D8, D5: four dispatchers scan overlapping rows round after round (re-dispatch age 0,
    so every WAITING row is re-checked by each scan) while churn makes them disagree: jobs
    are removed (one dispatcher re-adds what another refreshes), executors claim rows and
    report back (P2, P3: single-row writes), claimed rows are left stale for recovery (D6,
    D9) and failed jobs' rows are put back to WAITING (D4 fail from queue again). No
    statement of any actor dies of `deadlock detected`, and no tick faults."""
    settings = settings.replace(redispatch_age_s=0.0, stale_running_age_s=1.0,
                                dispatch_batch_size=BATCH)
    live = await _insert(sessions, LIVE_ROWS)
    doomed = await _insert(sessions, FAILED_ROWS)
    setup_queue = create_task_queue(settings)
    try:
        await _fail_jobs(settings, setup_queue, doomed)
    finally:
        await setup_queue.close()
    deadlocks_before = await _deadlocks(settings.database_url)

    faults: Counter[str] = Counter()
    churn_errors: Counter[str] = Counter()
    reports: list[Any] = []
    done = asyncio.Event()
    rng = random.Random(19)

    async def churn() -> None:
        """Queue and executor side: single-row writes only, as the product's are."""
        queue = create_task_queue(settings)
        ledger = await Ledger.pooled(settings.database_url, size=1)
        try:
            while not done.is_set():
                try:
                    async with ledger.connection() as conn:
                        await _churn_once(conn, queue, live, doomed, rng)
                except LeaseLost:
                    pass  # a recovery or another claim took the row first (P3): fine
                except psycopg.Error as err:
                    churn_errors[type(err).__name__] += 1
        finally:
            await ledger.close()
            await queue.close()

    churning = asyncio.create_task(churn())
    try:
        await asyncio.gather(*(_dispatcher(settings, reports, faults)
                               for _ in range(DISPATCHERS)))
    finally:
        done.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(churning, SYNC_TIMEOUT)

    total = Counter()
    for r in reports:
        total.update({k: v for k, v in vars(r).items() if isinstance(v, int)})
    # The load really overlapped: every kind of multi-row UPDATE ran, many times.
    assert total["added"] + total["re_added"] > 0 and total["refreshed"] > 0, total
    assert total["failed_from_queue"] > 0 and total["recovered_stale"] > 0, total
    assert faults == Counter(), f"dispatch faults {dict(faults)} over {total}"
    assert churn_errors == Counter(), f"churn statements failed: {dict(churn_errors)}"
    assert await _deadlocks(settings.database_url) == deadlocks_before

