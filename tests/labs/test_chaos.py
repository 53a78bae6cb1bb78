"""A short seeded chaos run inside the suite (P10-P13, D5, D6, W4; `labs.chaos`, the run
behind `python -m benchmarks.chaos`).

Two real `teamdesk worker` processes, 120 tasks made by the services (exports with varied
filters, some of a demoted agent; reminders with superseded revisions and closed tickets),
about 10 s of seeded faults: SIGKILL and SIGTERM of workers (restarted), restarts of the
embedded Redis, and cuts of one worker's Redis link through `labs.faults.RedisProxy`. Then
the invariant checker must find nothing — and, fed a tampered ledger, must find each
tampering. Redis is restarted only when REDIS_URL is unset (the shared embedded server of
this test run), and `run_chaos` always starts it again in a `finally`.

Waiting is bounded polling of observable state (heartbeats, the ledger); the fault
schedule's offsets are the faults themselves, not a way to order events.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sqlalchemy import select, text

from labs.chaos import (
    KINDS,
    ChaosConfig,
    ExportSpec,
    Invariant,
    ReminderSpec,
    check_invariants,
    make_plan,
    make_schedule,
    run_chaos,
)
from labs.procs import clear_prefix
from teamdesk.db.models import BackgroundTask, TaskStatus, TaskType

ROOT = Path(__file__).resolve().parents[2]


def test_same_seed_gives_the_same_schedule_and_plan():
    """Same (seed, workers, duration, kinds) → the same faults at the same offsets; the
    first faults cover every kind; another seed gives another schedule."""
    a = make_schedule(7, 2, 10.0)
    assert a == make_schedule(7, 2, 10.0)
    assert a != make_schedule(8, 2, 10.0)
    assert {e.kind for e in a} == set(KINDS)
    assert all(0.5 <= e.at <= 9.5 for e in a)
    redis = [e for e in a if e.kind == "redis"]
    assert all(b.at >= r.at + r.hold + 1.0 for r, b in itertools.pairwise(redis))
    no_redis = make_schedule(7, 2, 10.0, ("sigkill", "sigterm", "cut"))
    assert "redis" not in {e.kind for e in no_redis}
    plan = make_plan(7, 120)
    assert plan == make_plan(7, 120)
    assert sum(1 if isinstance(s, ExportSpec) else s.tasks for s in plan) == 120
    reminders = [s for s in plan if isinstance(s, ReminderSpec)]
    assert any(s.tasks > 1 for s in reminders), "the plan must supersede revisions"
    assert any(isinstance(s, ExportSpec) and s.rejected for s in plan)


def test_dry_run_prints_the_same_schedule_for_the_same_seed():
    """The command line prints the schedule before a run; `--dry-run` only prints it."""
    cmd = [sys.executable, "-m", "benchmarks.chaos", "--seed", "11", "--workers", "3",
           "--tasks", "50", "--duration", "12", "--dry-run"]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    lines = [ln.strip() for ln in first.stdout.splitlines() if " s  " in ln]
    assert lines == [f"{e.describe()}".strip() for e in make_schedule(11, 3, 12.0)]


async def test_short_seeded_chaos_run_keeps_every_invariant(settings, tmp_path, monkeypatch):
    """P10-P13, D5, D6, W4: after one fault of each kind and a bounded settle, every task is
    COMPLETED or FAILED with a fixed text, nothing is lost, each export's CSV equals a
    fresh recomputation, each current reminder revision delivered exactly once and
    superseded ones never, and no COMPLETED row changed after it was first seen. A run
    without findings removes the worker-log folder it made. Then the checker is shown to fail on a
    tampered ledger."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where run_chaos makes its logs
    kinds = KINDS if not os.environ.get("REDIS_URL") else tuple(
        k for k in KINDS if k != "redis")
    lines: list[str] = []
    # Seed 3's 6 s schedule strikes once with each kind (sigkill, sigterm, redis, cut):
    # every kind of fault, each on running work of its own, in the least time.
    config = ChaosConfig(seed=3, workers=2, tasks=60, duration=6.0, kinds=kinds,
                         settle=45.0)
    try:
        report = await run_chaos(settings, config, out=lines.append)
    finally:
        await clear_prefix(settings)
    output = "\n".join(lines)
    assert report.settled, output
    assert report.violations == [], output
    assert sum(report.executed.values()) >= 3, output
    assert report.conclusive, report.verdict()  # each kind struck running work of its own
    assert report.by_status["EXPORT COMPLETED"] > 0 and report.by_status[
        "REMINDER COMPLETED"] > 0, output
    assert "violations: 0" in output
    if report.findings:  # something to read in the logs: they are kept
        assert report.log_dir is not None and report.log_dir.is_dir(), output
    else:
        assert report.log_dir is None and not list(tmp_path.glob("teamdesk-chaos-*")), output
        assert "worker logs: removed" in output

    # The checker can fail: tamper with the ledger and the side effects, check again.
    from teamdesk.db.engine import create_engine, session_factory

    engine = create_engine(settings.database_url)
    sessions = session_factory(engine)
    try:
        async with sessions() as s, s.begin():
            export = await s.scalar(select(BackgroundTask).where(
                BackgroundTask.type == TaskType.EXPORT,
                BackgroundTask.status == TaskStatus.COMPLETED).limit(1))
            export.result_csv += "999,forged row\n"
            reminder = await s.scalar(select(BackgroundTask).where(
                BackgroundTask.type == TaskType.REMINDER,
                BackgroundTask.status == TaskStatus.COMPLETED,
                BackgroundTask.result_summary.like("Reminder sent%")).limit(1))
            await s.execute(text(
                "INSERT INTO notifications (ticket_id, team_id, reminder_revision, "
                "recipient_id, message) VALUES (:t, 'ops', :r, 'someone-else', 'twice')"),
                {"t": reminder.ticket_id, "r": reminder.reminder_revision})
            other = await s.scalar(select(BackgroundTask).where(
                BackgroundTask.id.not_in([export.id, reminder.id])).limit(1))
            other.status, other.execution_id = TaskStatus.RUNNING, "0" * 36
        violations, _, _ = await check_invariants(sessions, report.expected,
                                                  report.completed_seen)
    finally:
        await engine.dispose()
    found = "\n".join(map(str, violations))
    assert f"{export.id}: CSV differs" in found, found
    changed = [v for v in violations
               if v.invariant is Invariant.UNCHANGED and v.task_id == export.id]
    assert changed and "result_csv" in changed[0].text, found
    assert {v.invariant for v in violations} == {Invariant.CSV, Invariant.UNCHANGED,
                                                 Invariant.REMINDERS, Invariant.TERMINAL}
    assert f"ticket {reminder.ticket_id}: 2 notification(s)" in found, found
    assert f"{other.id}: not terminal (RUNNING" in found, found
