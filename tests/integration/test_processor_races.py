"""The book's database race tests (ch. 26 §8), made deterministic with gates at probe
points. The processor is called directly with a `FakeJob` as in the book; the ledger,
the team lock and the transactions are real PostgreSQL. Every test ends with one more
sequential run showing no extra side effect.
"""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from bullmq.custom_errors import UnrecoverableError
from sqlalchemy import text, update

from teamdesk.db.models import (
    BackgroundTask,
    TaskStatus,
    Ticket,
)
from teamdesk.services import exports, tasks, teams, tickets
from teamdesk.tasks.processor import TaskContext, process_task
from teamdesk.testing import FakeJob, reminder_effects, task_row
from tests.integration.conftest import direct_run, once_more_changes_nothing

T = 8.0  # bound for every wait: only detects a sync point that never came




@pytest.fixture
def ctx(settings, sessions):
    def make(actor: str, **timings) -> TaskContext:
        return TaskContext(settings=settings.replace(**timings), actor=actor)
    return make


async def reminder(sessions) -> tuple[Ticket, BackgroundTask]:
    async with sessions() as s:
        return await tickets.create_ticket(s, "acme", "eve", "Renew contract",
                                           due_at=datetime.now(UTC), assignee_id="cai")


async def test_reminder_takeover_old_executor_commits_nothing(sessions, demo, ctx, gates):
    """P3, P10, P11, P12: A pauses after its eligibility read (inside the team lock), B
    claims outside the lock. A's notification, version bump and event roll back with its
    failed completion gate; B produces exactly one of each."""
    ticket, task = await reminder(sessions)
    base = await reminder_effects(sessions, ticket.id)
    g_a = gates.gate("reminder.after_lease_check", actor="A")
    g_b = gates.gate("claim.after", actor="B")
    run_a = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("A")))
    await g_a.reached()
    run_b = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("B")))
    b_ctx = await g_b.reached()
    snapshot = await task_row(sessions, task.id)
    assert snapshot["execution_id"] == b_ctx["execution_id"] != g_a.context["execution_id"]

    g_a.release()
    assert (await asyncio.wait_for(run_a, T)).startswith("lease lost")
    assert await reminder_effects(sessions, ticket.id) == base
    assert await task_row(sessions, task.id) == snapshot

    g_b.release()
    assert (await asyncio.wait_for(run_b, T)).startswith("Reminder sent")
    n, e, v = await reminder_effects(sessions, ticket.id)
    assert (n, e, v) == (1, 1, base[2] + 1)
    row = await task_row(sessions, task.id)
    assert (row["status"], row["progress"], row["execution_id"]) == (TaskStatus.COMPLETED, 100,
                                                                     None)

    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx("C"), task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"


async def _claims_waiting_on_an_open_completion(sessions) -> list[dict]:
    """Backends of this test's database that wait on a *lock* in an UPDATE of the ledger,
    each with a backend blocking it, that blocker's state and last statement, and the
    kinds of lock the waiter has not been granted. Read from `pg_stat_activity`,
    `pg_blocking_pids` and `pg_locks`: what PostgreSQL itself says is waiting, not an
    inference from timing."""
    async with sessions() as s:
        rows = (await s.execute(text(
            "SELECT w.pid, w.query AS waiting_query, b.pid AS blocker, "
            "       b.state AS blocker_state, b.query AS blocker_query, "
            "       (SELECT array_agg(l.locktype::text) FROM pg_locks l "
            "        WHERE l.pid = w.pid AND NOT l.granted) AS waiting_for "
            "FROM pg_stat_activity w "
            "CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS bp(pid) "
            "JOIN pg_stat_activity b ON b.pid = bp.pid "
            "WHERE w.datname = current_database() AND w.wait_event_type = 'Lock' "
            "  AND w.query ILIKE '%update%background_tasks%'"))).mappings().all()
    return [dict(r) for r in rows]


async def _observed(probe, what: str) -> list[dict]:
    """Poll an observable condition until it holds; bounded by T, which only detects a
    condition that never came (it orders nothing)."""
    deadline = asyncio.get_running_loop().time() + T
    while not (found := await probe()):
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"never observed within {T:g} s: {what}")
        await asyncio.sleep(0.02)
    return found


async def test_completion_wins_and_a_concurrent_claim_waits_then_matches_nothing(
        sessions, demo, ctx, gates):
    """P12 (first half), P10, P2: A's reminder transaction has run its lease-conditioned
    completion UPDATE (one row matched) but not committed — it is held at
    `reminder.after_completion`, so it holds the task row's lock. A second delivery B reads
    the row (still RUNNING, committed state), passes P1 and starts its claim: PostgreSQL
    shows B's claim UPDATE waiting on a lock held by A's open transaction, and B is not
    done. A commits; B's claim re-checks its WHERE against the committed row (COMPLETED is
    not WAITING/RUNNING) and matches nothing; the follow-up read then finds COMPLETED and B
    returns as P1 says ("skipped: … COMPLETED"). The ledger keeps A's summary
    and lease-free COMPLETED, the ticket got exactly one notification, and one more
    sequential run changes nothing."""
    ticket, task = await reminder(sessions)
    base = await reminder_effects(sessions, ticket.id)
    g_a = gates.gate("reminder.after_completion", actor="A")
    g_b = gates.gate("claim.before", actor="B")
    run_a = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("A")))
    a_ctx = await g_a.reached()

    run_b = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("B")))
    await g_b.reached()  # B is about to claim (the claim is its first ledger statement)
    g_b.release()
    waits = await _observed(lambda: _claims_waiting_on_an_open_completion(sessions),
                            "B's claim waiting on the row lock of A's open transaction")
    assert len(waits) == 1, waits
    # A row lock (the wait is for A's transaction id), not the team's advisory lock: the
    # claim runs outside the team lock (P11).
    assert waits[0]["waiting_for"] == ["transactionid"], waits
    assert waits[0]["blocker_state"] == "idle in transaction"  # A, paused before COMMIT
    assert "update" in waits[0]["blocker_query"].lower()  # its last statement: the completion
    assert not run_b.done()
    row = await task_row(sessions, task.id)  # what others see while A is open
    assert (row["status"], row["execution_id"]) == (TaskStatus.RUNNING, a_ctx["execution_id"])
    assert await reminder_effects(sessions, ticket.id) == base

    g_a.release()
    summary = await asyncio.wait_for(run_a, T)
    assert summary.startswith("Reminder sent")
    # B's claim matched nothing; what it then read is A's committed COMPLETED row.
    assert await asyncio.wait_for(run_b, T) == "skipped: ledger is run 0 COMPLETED"
    row = await task_row(sessions, task.id)
    assert (row["status"], row["progress"], row["execution_id"], row["result_summary"],
            row["attempts"]) == (TaskStatus.COMPLETED, 100, None, summary, 1)
    assert await reminder_effects(sessions, ticket.id) == (1, 1, base[2] + 1)

    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx("C"), task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"


async def test_recovery_scan_clears_lease_old_executor_rolls_back(sessions, demo, ctx, gates):
    """P12, D6: while A is paused, the recovery scan's update (simulated for this task id,
    as in the book) puts the task back to WAITING; A's completion matches 0 rows and rolls
    back; a normal run afterwards gives the only result."""
    ticket, task = await reminder(sessions)
    base = await reminder_effects(sessions, ticket.id)
    g_a = gates.gate("reminder.after_lease_check", actor="A")
    run_a = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("A")))
    await g_a.reached()
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(
            BackgroundTask.id == task.id, BackgroundTask.status == TaskStatus.RUNNING).values(
            status=TaskStatus.WAITING, execution_id=None, dispatched_at=None))
    g_a.release()
    assert (await asyncio.wait_for(run_a, T)).startswith("lease lost")
    row = await task_row(sessions, task.id)
    assert (row["status"], row["execution_id"]) == (TaskStatus.WAITING, None)
    assert await reminder_effects(sessions, ticket.id) == base

    assert (await process_task(FakeJob(task.id), None, ctx("B"))).startswith("Reminder sent")
    assert await reminder_effects(sessions, ticket.id) == (1, 1, base[2] + 1)
    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx("C"), task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"


async def test_failure_after_event_insert_rolls_back_all_four(sessions, demo, ctx, gates):
    """P10, P7: a fault after the real event INSERT rolls back notification, version and
    event with the completion; the task is WAITING with its lease cleared; the second run
    gives the only result, with attempts = 2 (I3)."""
    ticket, task = await reminder(sessions)
    base = await reminder_effects(sessions, ticket.id)
    gates.fault("reminder.after_event", RuntimeError("disk full"), actor="A")
    with pytest.raises(RuntimeError, match="disk full"):
        await process_task(FakeJob(task.id, attempts_made=0), None, ctx("A"))
    row = await task_row(sessions, task.id)
    assert (row["status"], row["execution_id"], row["attempts"]) == (TaskStatus.WAITING, None, 1)
    assert row["last_error"] == ("Attempt 1 of 3 failed with a temporary error; "
                                 "retrying automatically.")
    assert await reminder_effects(sessions, ticket.id) == base

    await process_task(FakeJob(task.id, attempts_made=1), None, ctx("A"))
    row = await task_row(sessions, task.id)
    assert (row["status"], row["attempts"]) == (TaskStatus.COMPLETED, 2)
    assert await reminder_effects(sessions, ticket.id) == (1, 1, base[2] + 1)
    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx("C"), task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"


async def test_mid_progress_failure_over_attempts_then_manual_retry(sessions, demo, ctx):
    """P4, P7, R2, R3 (ch. 26 §3's table): the first queue progress report fails on each of
    attemptsMade 0, 1, 2 → WAITING, WAITING, FAILED, never a partial CSV. A manual retry
    opens run 1; the old run's message is skipped; the new run completes."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    expected = [TaskStatus.WAITING, TaskStatus.WAITING, TaskStatus.FAILED]
    for made, status in enumerate(expected):
        with pytest.raises(ConnectionError):
            await process_task(FakeJob(task.id, attempts_made=made,
                                       fail_at=lambda v: True), None, ctx("A"))
        row = await task_row(sessions, task.id)
        assert (row["status"], row["attempts"], row["result_csv"], row["execution_id"]) == (
            status, made + 1, None, None)
        assert 0 < row["progress"] < 100  # the ledger took the progress the queue did not
    assert row["last_error"].startswith("Failed 3 of 3 attempts")

    async with sessions() as s:
        await tasks.retry_task(s, "acme", "ben", task.id)
    old = await process_task(FakeJob(task.id, run=0), None, ctx("A"))
    assert old == "skipped: ledger is run 1 WAITING"
    assert (await task_row(sessions, task.id))["status"] == TaskStatus.WAITING
    job = FakeJob(task.id, run=1)
    await process_task(job, None, ctx("A"))
    row = await task_row(sessions, task.id)
    assert (row["status"], row["run"], row["attempts"], row["progress"]) == (
        TaskStatus.COMPLETED, 1, 1, 100)
    assert job.reported[-1] == 100
    for run in (0, 1):  # a late message of the old run, and a duplicate of the new one
        again = await once_more_changes_nothing(sessions, task.id,
                                                direct_run(ctx("C"), task.id, run))
        assert again == "skipped: ledger is run 1 COMPLETED"


async def _rename_open_tickets(sessions, prefix: str) -> None:
    async with sessions() as s, s.begin():
        await s.execute(update(Ticket).where(Ticket.team_id == "acme", Ticket.status == "OPEN")
                        .values(title=prefix + Ticket.title))


@pytest.mark.parametrize("point", ["export.after_read", "export.before_result"])
async def test_export_takeover_old_executor_cannot_overwrite(sessions, demo, ctx, gates, point):
    """P3, P5, P6: A pauses (after read / after final authorization), B takes over with E2
    and reads tickets retitled meanwhile. A's late write matches 0 rows: the whole row still
    equals B's claim snapshot and A never reports 100. B's CSV is the one saved."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    g_a = gates.gate(point, actor="A")
    g_b = gates.gate("claim.after", actor="B")
    job_a = FakeJob(task.id)
    run_a = asyncio.create_task(process_task(job_a, None, ctx("A", export_batch_size=1000)))
    await g_a.reached()
    await _rename_open_tickets(sessions, "B-era: ")
    run_b = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("B")))
    await g_b.reached()
    snapshot = await task_row(sessions, task.id)

    g_a.release()
    assert (await asyncio.wait_for(run_a, T)).startswith("lease lost")
    assert await task_row(sessions, task.id) == snapshot
    assert 100 not in job_a.reported

    g_b.release()
    await asyncio.wait_for(run_b, T)
    row = await task_row(sessions, task.id)
    assert row["status"] == TaskStatus.COMPLETED
    titles = [r["title"] for r in csv.DictReader(io.StringIO(row["result_csv"]))]
    assert titles and all(t.startswith("B-era: ") for t in titles)

    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx("C"), task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"


async def test_late_permission_rejection_obeys_the_lease(sessions, demo, ctx, gates):
    """P7, P8 (ch. 26 §4's "easy to miss" path): A loses its lease, then finds the owner
    demoted (TaskRejected). Its FAILED write matches 0 rows, so it changes nothing and
    raises nothing. B, holding the lease, is the one that records the rejection."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "cai", {"priority": ["HIGH"]})
    g_a = gates.gate("export.after_progress", actor="A", when=lambda c: c["read"] == c["total"])
    g_b = gates.gate("claim.after", actor="B")
    run_a = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("A")))
    await g_a.reached()
    run_b = asyncio.create_task(process_task(FakeJob(task.id), None, ctx("B")))
    await g_b.reached()
    async with sessions() as s:
        await teams.change_role(s, "acme", "cai", "customer")
    snapshot = await task_row(sessions, task.id)
    g_a.release()
    outcome = await asyncio.wait_for(run_a, T)
    assert outcome == "error not reported, lease no longer held: TaskRejected"
    assert await task_row(sessions, task.id) == snapshot

    g_b.release()
    with pytest.raises(UnrecoverableError):
        await asyncio.wait_for(run_b, T)
    row = await task_row(sessions, task.id)
    assert (row["status"], row["execution_id"]) == (TaskStatus.FAILED, None)
    assert row["last_error"].startswith("Rejected: the requester no longer has access")
    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx("C"), task.id))
    assert again == "not claimed"  # FAILED: the claim matches nothing (P2)


async def test_committed_result_survives_failed_final_progress_report(sessions, demo, ctx):
    """P9: the result is committed; only `update_progress(100)` fails. The error path's
    RUNNING condition matches 0 rows; the processor returns without re-raising."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["PENDING"]})
    job = FakeJob(task.id, fail_at=lambda v: v == 100)
    outcome = await process_task(job, None, ctx("A"))
    assert outcome == "error not reported, lease no longer held: ConnectionError"
    row = await task_row(sessions, task.id)
    assert (row["status"], row["progress"]) == (TaskStatus.COMPLETED, 100)
    assert row["result_csv"] and row["expires_at"] > datetime.now(UTC) + timedelta(hours=23)
    assert 100 not in job.reported
    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx("C"), task.id))
    assert again == "skipped: ledger is run 0 COMPLETED"
