"""The task path's SQL and the dispatcher's clock and stall limit (D1, D6, D9).

Real PostgreSQL; clocks are compressed by ageing rows (explicit `updated_at` /
`dispatched_at` values, which the trigger keeps), never by waiting.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select, text, update

from devkit import services
from teamdesk.db.models import BackgroundTask, Scope, TaskStatus, TaskType, Ticket
from teamdesk.services import exports, tickets
from teamdesk.services.tasks import retry_task
from teamdesk.tasks import ledger as ledger_module
from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.dispatcher import STALLED_ERROR, dispatch_tasks
from teamdesk.tasks.lease import claim
from teamdesk.tasks.ledger import QUERIES, Ledger, StatementLog
from teamdesk.tasks.processor import process_task
from teamdesk.tasks.queue import create_task_queue
from teamdesk.testing import FakeJob, age, enqueue, task_row


@pytest.fixture
async def queue(settings, redis):
    q = create_task_queue(settings)
    yield q
    await q.close()


async def _insert(sessions, **values: Any) -> str:
    row = BackgroundTask(**{"type": TaskType.EXPORT, "status": TaskStatus.WAITING, "run": 0,
                            "owner_id": "ben", "team_id": "acme", "scope": Scope.TEAM,
                            "filters": {}, **values})
    async with sessions() as s, s.begin():
        s.add(row)
    return row.id


async def _row(sessions, task_id: str) -> BackgroundTask:
    async with sessions() as s:
        return await s.scalar(select(BackgroundTask).where(BackgroundTask.id == task_id))


# ---------------------------------------------------------------- the statement registry

class _QueueSays:
    """A stand-in queue whose every job is in `state` (None: there is no job): the
    dispatcher's statements are under test here, not its talk with Redis (D4 per row)."""

    def __init__(self, state: str | None) -> None:
        self.state = state

    async def getJob(self, job_id: str) -> Any:  # bullmq's camelCase API
        return None if self.state is None else self

    async def getState(self) -> str | None:
        return self.state

    async def add(self, name: str, data: Any, opts: dict[str, Any]) -> None:
        return None

    async def remove(self, job_id: str, opts: dict[str, Any] | None = None) -> int:
        raise AssertionError("not reached in this test")


async def test_the_task_path_runs_every_statement_by_name(settings, sessions, demo):
    """P2–P10, D1–D7: what ran, recorded by the ledger (`Ledger(recorder=StatementLog())`),
    not what the source text says. Each step of the book runs its own named statement, with
    the lease's `task_id, run, execution_id` in every fenced one (P3); together they run
    every statement of queries.sql, and nothing runs that is not there."""
    log = StatementLog()
    ledger = Ledger(settings.database_url, recorder=log)
    ran: set[str] = set()

    def next_step() -> None:
        ran.update(log.names)
        log.clear()

    ctx = TaskContext(settings=settings.replace(export_batch_size=10), actor="A",
                      ledger=ledger)
    lease_keys = {"task_id", "run", "execution_id"}

    # An export in batches (X1, P4, P5): claim, the first batch with the authorization,
    # progress per batch, the re-check, the result.
    async with sessions() as s:
        export = await exports.request_export(s, "acme", "ben", {})
    await process_task(FakeJob(export.id), None, ctx)
    names = log.names
    assert names[:3] == ["claim", "export_start", "progress"]
    batches = names[3:-2]
    if len(batches) % 2:  # the last read came back empty: no progress write for it
        assert batches.pop() == "export_batch"
    assert len(batches) >= 4 and batches == ["export_batch", "progress"] * (len(batches) // 2)
    assert names[-2:] == ["export_recheck", "export_result"]
    _, params = log.queries[-1]
    assert set(params) == lease_keys | {"result_csv", "result_summary", "ttl_s"}
    assert params["task_id"] == export.id and params["run"] == 0

    # An old run's message (P1): the claim misses, a cheap read says why.
    next_step()
    assert (await process_task(FakeJob(export.id), None, ctx)).startswith("skipped")
    assert log.names == ["claim", "task_state"]

    # A reminder (P10): one transaction under the team lock, the completion last.
    next_step()
    async with sessions() as s:
        _, reminder = await tickets.create_ticket(s, "acme", "eve", "Call back",
                                                  due_at=datetime.now(UTC),
                                                  assignee_id="cai")
    await process_task(FakeJob(reminder.id), None, ctx)
    assert log.names == ["claim", "team_lock", "reminder_ticket", "reminder_effects",
                         "reminder_completion"]
    assert set(log.queries[-1][1]) == lease_keys | {"result_summary"}

    # The error report (P7): retryable, then the last attempt's final one.
    async with sessions() as s:
        failing = await exports.request_export(s, "acme", "ben", {"priority": ["HIGH"]})
    for attempts_made, report in ((0, "report_retryable"), (2, "report_final")):
        next_step()
        with pytest.raises(ConnectionError):
            await process_task(FakeJob(failing.id, attempts_made=attempts_made,
                                       fail_at=lambda v: True), None, ctx)
        assert log.names[-2:] == ["progress", report]
        assert set(log.queries[-1][1]) == lease_keys | {"last_error"}

    # The dispatcher (D1–D4, D6, D7): a new row is added and marked; a row the queue gave
    # up on while WAITING without a lease is failed; recovery and purge close each tick.
    fresh = await _insert(sessions)
    next_step()
    await dispatch_tasks(_QueueSays(None), settings, ledger=ledger)
    assert log.names == ["scan", "mark_dispatched", "recover_and_purge"]
    assert fresh in log.queries[1][1]["ids"]
    async with sessions() as s, s.begin():  # D1: its enqueue check is due again
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == fresh).values(
            dispatched_at=BackgroundTask.dispatched_at - text("interval '31 seconds'")))
    next_step()
    report = await dispatch_tasks(_QueueSays("failed"), settings, ledger=ledger)
    assert log.names == ["scan", "fail_from_queue", "recover_and_purge"]
    assert report.failed_from_queue == 1

    # A catch-up round of the loop (D8): the scan runs inside the tried catch-up lock, and
    # the tail is left to the tick's end.
    next_step()
    await dispatch_tasks(_QueueSays(None), settings, ledger=ledger, recover=False,
                         catch_up=True)
    assert log.names[0] == "catch_up_lock" and log.names[-1] == "catch_up_unlock"
    assert "scan" in log.names and "recover_and_purge" not in log.names

    next_step()
    # Every statement of queries.sql is run by the task path, but the request's count
    # (`export_count`, run in the request's own transaction: test_export_filters.py).
    assert ran == set(QUERIES) - {"export_count"}


async def test_only_a_ledger_with_a_recorder_records(settings):
    """The hot path pays nothing for the recorder it does not have: a plain ledger hands
    out psycopg's own connections. A recording one reports only named statements."""
    import psycopg

    async with Ledger(settings.database_url).connection() as conn:
        assert type(conn) is psycopg.AsyncConnection
    log = StatementLog()
    async with Ledger(settings.database_url, recorder=log).connection() as conn:
        await conn.execute("SELECT 1")
        await ledger_module.fetch_one(conn, "task_state", {"task_id": "none"})
    assert log.queries == [("task_state", {"task_id": "none"})]
    pooled = await Ledger.pooled(settings.database_url, size=1, recorder=log)
    try:
        async with pooled.connection() as conn:
            await ledger_module.fetch_one(conn, "task_state", {"task_id": "other"})
    finally:
        await pooled.close()
    assert log.names == ["task_state", "task_state"]


def test_duplicate_statement_names_are_refused(tmp_path):
    """A second `-- name --` would silently shadow the first."""
    path = tmp_path / "q.sql"
    path.write_text("-- a --\nSELECT 1;\n-- a --\nSELECT 2;\n")
    with pytest.raises(ValueError, match="defined twice"):
        ledger_module.load_queries(path)


def test_fragments_are_written_into_statements_and_are_not_statements(tmp_path):
    """A `_name` section is written where a statement says {{_name}} (the export filter is
    one such piece, shared by export_start and export_batch); it is not runnable by itself,
    and a reference to a fragment that does not exist is refused."""
    path = tmp_path / "q.sql"
    path.write_text("-- _f --\n-- a note\nx > 1\n-- a --\nSELECT 1 WHERE {{_f}};\n")
    assert ledger_module.load_queries(path) == {"a": "SELECT 1 WHERE x > 1"}
    path.write_text("-- a --\nSELECT 1 WHERE {{_missing}};\n")
    with pytest.raises(ValueError, match="no fragment named '_missing'"):
        ledger_module.load_queries(path)
    assert "{{" not in QUERIES["export_start"] and "{{" not in QUERIES["export_batch"]


# ---------------------------------------------------------------- generic plans (D1, D6, D7)

def _generic(name: str) -> str:
    """The statement with `$n` placeholders, for `EXPLAIN (GENERIC_PLAN)` (PG 16+): the
    plan a prepared statement gets, which may differ from one with bound values."""
    numbers: dict[str, int] = {}

    def number(m: re.Match) -> str:
        return f"${numbers.setdefault(m.group(1), len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, QUERIES[name])


def _node(plan: list[str], i: int) -> str:
    """Plan line `i` and the detail lines under it (deeper indent, up to the next node)."""
    indent = len(plan[i]) - len(plan[i].lstrip())
    lines = [plan[i]]
    for ln in plan[i + 1:]:
        if len(ln) - len(ln.lstrip()) <= indent or ln.lstrip().startswith("->"):
            break
        lines.append(ln)
    return "\n".join(lines)


async def test_dispatcher_statements_have_index_bounded_generic_plans(settings, demo):
    """D1, D6, D7: with 40,000 ledger rows (1,000 WAITING, 500 of them never
    dispatched, 200 RUNNING, 3,000 exports holding a CSV), the generic plan of each
    dispatcher statement reads one index, bounded by an Index Cond or a partial index that
    holds only its rows — never a Seq Scan, never a walk over every WAITING entry (the old
    `IS NULL OR <` scan with nothing due read them all: 9.3 ms at 1M rows)."""
    async with Ledger(settings.database_url).connection() as conn:
        if conn.info.server_version < 160000:  # a server of one's own (README: 14+)
            pytest.skip("EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16 or newer; this server is "
                        f"{conn.info.server_version // 10000}")
        await conn.execute("""
            INSERT INTO background_tasks (type, status, owner_id, team_id, dispatched_at,
                                          updated_at, expires_at, result_csv)
            SELECT 'EXPORT',
                   (CASE WHEN g % 40 = 0 THEN 'WAITING' WHEN g % 200 = 1 THEN 'RUNNING'
                         ELSE 'COMPLETED' END)::task_status,
                   'ben', 'acme',
                   CASE WHEN g % 80 = 0 THEN NULL ELSE now() - interval '5 seconds' END,
                   now(), now() + interval '1 day',
                   CASE WHEN g % 13 = 0 THEN 'id' ELSE NULL END
              FROM generate_series(1, 40000) AS g""")
        await conn.execute("ANALYZE background_tasks")
        # statement → the indexes its plan must read, and whether that read needs an
        # Index Cond (a partial index holding exactly the rows wanted needs none).
        expected = {
            "scan": {"ix_background_tasks_undispatched": False,
                     "ix_background_tasks_dispatch": True},
            "recover_and_purge": {"ix_background_tasks_stale_running": True,
                                  "ix_background_tasks_expiry": True},
        }
        for name, indexes in expected.items():
            plan = [r[0] for r in await (await conn.execute(
                f"EXPLAIN (GENERIC_PLAN) {_generic(name)}")).fetchall()]
            text_plan = "\n".join(plan)
            assert "Seq Scan" not in text_plan, f"{name}:\n{text_plan}"
            for index, needs_cond in indexes.items():
                nodes = [_node(plan, i) for i, ln in enumerate(plan)
                         if f"Scan using {index} " in ln]
                assert nodes, f"{name} does not use {index}:\n{text_plan}"
                if needs_cond:
                    assert all("Index Cond" in node for node in nodes), (
                        f"{name} walks all of {index}:\n{text_plan}")
        # What this test catches: the old single scan (`dispatched_at IS NULL OR
        # dispatched_at < $1`) has no Index Cond — it walks every WAITING entry.
        old = await (await conn.execute(
            "EXPLAIN (GENERIC_PLAN) SELECT id FROM background_tasks WHERE status = 'WAITING' "
            "AND (dispatched_at IS NULL OR dispatched_at < $1) "
            "ORDER BY dispatched_at ASC NULLS FIRST, run_at LIMIT 100")).fetchall()
        assert "Index Cond" not in "\n".join(r[0] for r in old)


#: The dispatcher's multi-row UPDATEs: every UPDATE of the ledger that is not a single-row
#: write by task id (the claim and the executors' fenced writes, P2, P3).
_MULTI_ROW = sorted(name for name, sql in QUERIES.items()
                    if "UPDATE background_tasks" in sql and "id = %(task_id)s" not in sql)

_PARAMS = {"ids": ["T1", "T2"], "runs": [0, 0], "last_error": "x", "age_s": 120.0,
           "max_recoveries": 2, "stalled_error": "y"}


def _locks_in_id_order(plan: list[str]) -> list[str]:
    """Problems with how `plan` takes its row locks: every LockRows node must sit right
    on a Sort by id (or an id-ordered primary-key scan), and no UPDATE may lock rows
    itself in any other order, i.e. each must read `locked`."""
    problems = []
    locks = [i for i, ln in enumerate(plan) if "LockRows" in ln]
    if not locks:
        problems.append("no LockRows node: the UPDATE locks rows in its plan's order")
    for i in locks:
        child = next(j for j in range(i + 1, len(plan)) if "->" in plan[j])
        node = _node(plan, child)
        if not (("Sort" in plan[child] and "Sort Key: background_tasks.id" in node)
                or "Index Scan using background_tasks_pkey" in plan[child]):
            problems.append(f"LockRows is not fed in id order:\n{node}")
    updates = sum("Update on background_tasks" in ln for ln in plan)
    if sum("CTE Scan on locked" in ln for ln in plan) < updates:
        problems.append("an UPDATE does not join the locked rows")
    return problems


@pytest.mark.parametrize("rows", [500, 40_000])
async def test_dispatcher_multi_row_updates_lock_in_id_order_first(settings, demo, rows):
    """D8, D5: every multi-row UPDATE of the dispatcher (mark, fail from queue, recovery +
    purge) takes its row locks in one global order — a `locked` CTE whose LockRows reads
    a Sort by id — and its UPDATEs only touch those rows. Checked on the generic plan (a
    prepared statement's) and on a plan with bound values, for a small ledger (sequential
    scans: heap order, which every mark changes) and a large one (index lookups in the
    order of the ids array). The stress test shows what the old order-by-plan did."""
    assert _MULTI_ROW == ["fail_from_queue", "mark_dispatched", "recover_and_purge"]
    async with Ledger(settings.database_url).connection() as conn:
        await conn.execute("""
            INSERT INTO background_tasks (type, status, owner_id, team_id, dispatched_at,
                                          updated_at, expires_at, result_csv)
            SELECT 'EXPORT',
                   (CASE WHEN g %% 4 = 0 THEN 'WAITING' WHEN g %% 9 = 1 THEN 'RUNNING'
                         ELSE 'COMPLETED' END)::task_status,
                   'ben', 'acme', now() - interval '5 seconds', now(),
                   now() + interval '1 day', CASE WHEN g %% 13 = 0 THEN 'id' END
              FROM generate_series(1, %(rows)s) AS g""", {"rows": rows})
        await conn.execute("ANALYZE background_tasks")
        generic = conn.info.server_version >= 160000
        for name in _MULTI_ROW:
            plans = {"bound": [r[0] for r in await (await conn.execute(
                f"EXPLAIN {QUERIES[name]}", _PARAMS)).fetchall()]}
            if generic:
                plans["generic"] = [r[0] for r in await (await conn.execute(
                    f"EXPLAIN (GENERIC_PLAN) {_generic(name)}")).fetchall()]
            for kind, plan in plans.items():
                problems = _locks_in_id_order(plan)
                assert not problems, f"{name} ({kind} plan): {problems}\n" + "\n".join(plan)


# ---------------------------------------------------------------- D6 in one clock

async def test_the_dispatcher_reads_no_host_clock(settings, sessions, demo, queue):
    """D6 (made precise): `updated_at` is stamped by the database, so the cutoff is
    computed there too, and the dispatcher takes no host clock at all (the old `now`
    parameter is gone): a host whose clock is far ahead recovered live tasks on every tick
    (livelock). A RUNNING task that wrote 0 s ago stays RUNNING; the same row, really stale
    in the database's clock, is recovered."""
    assert "now" not in inspect.signature(dispatch_tasks).parameters
    live = await _insert(sessions, status=TaskStatus.RUNNING, execution_id="live-exec",
                         attempts=1)
    report = await dispatch_tasks(queue, settings)
    assert report.recovered_stale == 0
    row = await _row(sessions, live)
    assert (row.status, row.execution_id) == (TaskStatus.RUNNING, "live-exec")

    await age(sessions, live, 121)
    report = await dispatch_tasks(queue, settings)
    assert report.recovered_stale == 1
    row = await _row(sessions, live)
    assert (row.status, row.execution_id, row.dispatched_at) == (TaskStatus.WAITING, None,
                                                                 None)


# ---------------------------------------------------------------- D9

async def test_third_stall_of_a_run_fails_it_and_retry_starts_counting_again(
        settings, sessions, demo, queue):
    """D9: D6 recoveries are counted per run. Claimed and stalled twice, the task goes
    back to WAITING twice (count 1, 2); the third time it is still stale it ends FAILED
    with the fixed text, lease cleared. A manual retry opens run 1 with the count at 0
    (R2), so the new round gets its own three chances."""
    task_id = await _insert(sessions)
    ledger = Ledger(settings.database_url)
    for n in (1, 2, 3):
        async with ledger.connection() as conn:
            claimed = await claim(conn, task_id, 0, attempts=1)  # P2: a real claim
        assert claimed is not None
        await age(sessions, task_id, 121)
        report = await dispatch_tasks(queue, settings)
        row = await _row(sessions, task_id)
        if n < 3:
            assert (report.recovered_stale, report.failed_stalled) == (1, 0)
            assert (row.status, row.stale_recoveries, row.execution_id) == (
                TaskStatus.WAITING, n, None)
        else:
            assert (report.recovered_stale, report.failed_stalled) == (0, 1)
            assert (row.status, row.stale_recoveries, row.execution_id, row.last_error) == (
                TaskStatus.FAILED, 3, None, STALLED_ERROR)
            assert "three times" in STALLED_ERROR and "Retry" in STALLED_ERROR
            assert "failed_stalled=1" in str(report)  # shown in the tick's log line
    # A FAILED row is never recovered again, however old.
    await age(sessions, task_id, 600)
    assert (await dispatch_tasks(queue, settings)).failed_stalled == 0

    async with sessions() as s:
        retried = await retry_task(s, "acme", "ben", task_id)
    assert (retried.run, retried.status, retried.stale_recoveries) == (
        1, TaskStatus.WAITING, 0)
    async with ledger.connection() as conn:
        assert await claim(conn, task_id, 1, attempts=1) is not None
    await age(sessions, task_id, 121)
    report = await dispatch_tasks(queue, settings)
    assert report.recovered_stale == 1  # the new round's first stall: recovered, not failed
    assert (await _row(sessions, task_id)).stale_recoveries == 1


# ---------------------------------------------------------------- PostgreSQL restarts

@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")),
                    reason="restarts the embedded PostgreSQL; not done to a given server")
async def test_postgres_restart_mid_export_fails_into_retry_and_completes_whole(
        settings, sessions, demo, queue, start_worker, recorder, gates):
    """P3, P5, P7: no pre-ping per checkout (a round trip each time). PostgreSQL is restarted (fast
    shutdown: every connection cut) while an export holds its pooled connection between
    two batches. Its next fenced write fails on the broken connection; the error report
    takes a fresh connection and writes WAITING with the lease (P7); the queue retries the
    same run, the pool has replaced the connection, and the export completes with the
    whole CSV — nothing half-written. A task that starts afterwards needs no retry.

    The suite's embedded server is restarted on its port and data folder, and is up again
    before this test ends (other tests' engines reconnect with their own pre-ping)."""
    async with sessions() as s:
        first = await exports.request_export(s, "acme", "ben", {})
    gate = gates.gate("export.after_read", actor="W")
    await start_worker("W")
    job = await enqueue(queue, first.id, backoff={"type": "fixed", "delay": 50})
    await gate.reached()
    await asyncio.to_thread(services.restart_postgres)
    gate.release()

    failed = await recorder.wait_for("failed", job_id=job.id)
    assert (failed["exhausted"], failed["attempts_made"]) == (False, 1)
    await recorder.wait_for("completed", job_id=job.id)
    row = await task_row(sessions, first.id)
    async with sessions() as s:
        tickets = await s.scalar(select(func.count()).select_from(Ticket).where(
            Ticket.team_id == "acme", Ticket.deleted_at.is_(None)))
    assert (row["status"], row["attempts"], row["progress"], row["execution_id"]) == (
        TaskStatus.COMPLETED, 2, 100, None)
    assert row["last_error"] == ("Attempt 1 of 3 failed with a temporary error; retrying "
                                 "automatically.")
    assert len(row["result_csv"].splitlines()) == tickets + 1  # header + every ticket

    async with sessions() as s:
        second = await exports.request_export(s, "acme", "ben", {"priority": ["HIGH"]})
    job2 = await enqueue(queue, second.id)
    await recorder.wait_for("completed", job_id=job2.id)
    row2 = await task_row(sessions, second.id)
    assert (row2["status"], row2["attempts"], row2["last_error"]) == (
        TaskStatus.COMPLETED, 1, None)
