"""`ledger_vs_queue()` verdicts, each built from a real situation: real dispatcher scans,
a real worker, real gates, a real retry and a real loss of Redis data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from labs import faults, tables
from labs.tables import IN_STEP, LEDGER_BEHIND, NO_JOB, ORPHAN_JOB, QUEUE_BEHIND
from teamdesk.tasks.queue import task_job_id


async def _verdicts(lab) -> dict[str, tuple]:
    df = await tables.ledger_vs_queue(lab)
    assert tuple(df.columns) == tables.COMPARE_COLUMNS
    return {row.job_id: (_v(row.status), _v(row.state), row.verdict)
            for row in df.itertuples()}


def _v(value):
    """Missing cells are NA in pandas (NaN in a str column): compare them as None."""
    return None if pd.isna(value) else value


async def test_queue_behind_in_step_and_no_job(lab):
    """queue behind (WAITING, no job) → dispatched: in step (WAITING + waiting / delayed)
    → claimed and paused: in step (RUNNING + active) → in step (COMPLETED + completed) →
    Redis data of the prefix lost: no job (COMPLETED) and queue behind (WAITING) → a later
    scan re-adds the reminder: in step again."""
    export = await lab.request_export({"status": ["OPEN"]})
    _, reminder = await lab.create_ticket("Call back", due_at=datetime.now(UTC)
                                          + timedelta(days=1), assignee_id="ben")
    e, r = task_job_id(export.id, 0), task_job_id(reminder.id, 0)
    assert await _verdicts(lab) == {e: ("WAITING", None, QUEUE_BEHIND),
                                    r: ("WAITING", None, QUEUE_BEHIND)}

    assert (await lab.dispatch()).added == 2
    assert await _verdicts(lab) == {e: ("WAITING", "waiting", IN_STEP),
                                    r: ("WAITING", "delayed", IN_STEP)}

    gate = lab.gate("export.after_read")
    await lab.start_worker("W")
    await gate.reached()
    assert (await _verdicts(lab))[e] == ("RUNNING", "active", IN_STEP)
    gate.release()
    await lab.wait_for("completed", job_id=e)
    assert (await _verdicts(lab))[e] == ("COMPLETED", "completed", IN_STEP)

    assert await faults.flush_prefix(lab) > 0
    assert (await tables.queue(lab)).empty
    assert await _verdicts(lab) == {e: ("COMPLETED", None, NO_JOB),
                                    r: ("WAITING", None, QUEUE_BEHIND)}
    # The loss heals by itself: once its dispatch check is 30 s old (row aged, D1), the
    # next scan adds the reminder again (D4 "no job → add").
    await lab.age(reminder.id, 31)
    report = await lab.dispatch()
    assert (report.scanned, report.added) == (1, 1)
    assert (await _verdicts(lab))[r] == ("WAITING", "delayed", IN_STEP)


async def test_ledger_behind_then_reconciled(lab):
    """A is paused after its read; a recovery scan (row aged 121 s, D6) puts the task
    back to WAITING and clears A's lease; A resumes, loses its lease and returns, so the
    queue completes the job: ledger behind (WAITING + completed). The next real scan
    re-adds it (D4), the worker runs it again: in step (COMPLETED + completed)."""
    task = await lab.request_export({"priority": ["HIGH"]})
    job_id = task_job_id(task.id, 0)
    gate = lab.gate("export.after_read", actor="A")
    await lab.start_worker("A")
    await lab.dispatch()
    await gate.reached()
    await lab.age(task.id, 121)
    report = await lab.dispatch()
    assert report.recovered_stale == 1
    assert (await _verdicts(lab))[job_id] == ("WAITING", "active", IN_STEP)

    gate.release()
    first = await lab.wait_for("completed", job_id=job_id)
    assert first["result"] == "lease lost during progress"
    assert (await _verdicts(lab))[job_id] == ("WAITING", "completed", LEDGER_BEHIND)

    assert (await lab.dispatch()).re_added == 1
    await lab.wait_for("completed", job_id=job_id, where=lambda ev: ev is not first)
    assert (await _verdicts(lab))[job_id] == ("COMPLETED", "completed", IN_STEP)
    assert lab.history.of(actor="A", type="fail", op="progress", task_id=task.id)


async def test_failed_in_step_then_orphan_after_retry(lab):
    """A permanent rejection (the export limit shrank before execution, P8): FAILED +
    failed is in step. A manual retry opens run 1 (R2): the new job does not exist yet
    (queue behind) and the run-0 job is now an orphan; a scan adds run 1 (in step)."""
    task = await lab.request_export()
    await lab.start_worker("W", export_limit=5)
    await lab.dispatch()
    await lab.wait_for("failed", job_id=task_job_id(task.id, 0))
    assert lab.acknowledge(source="worker failed", job_id=task_job_id(task.id, 0)) == 1
    old, new = task_job_id(task.id, 0), task_job_id(task.id, 1)
    assert await _verdicts(lab) == {old: ("FAILED", "failed", IN_STEP)}

    await lab.stop_worker("W")
    await lab.retry(task.id)
    assert await _verdicts(lab) == {new: ("WAITING", None, QUEUE_BEHIND),
                                    old: (None, "failed", ORPHAN_JOB)}
    await lab.dispatch()
    df = await tables.ledger_vs_queue(lab)
    assert df["job_id"].tolist() == [new, old]
    assert df["verdict"].tolist() == [IN_STEP, ORPHAN_JOB]
    assert df.loc[1, "task_id"] == task.id and int(df.loc[1, "run"]) == 0


async def test_table_columns_are_stable(lab):
    """Fixed column orders and short execution ids."""
    task = await lab.request_export()
    gate = lab.gate("export.after_read")
    await lab.start_worker("W")
    await lab.enqueue(task.id)
    ctx = await gate.reached()
    led = await tables.ledger(lab)
    assert tuple(led.columns) == tables.LEDGER_COLUMNS
    assert led.loc[0, "execution"] == ctx["execution_id"][:8]
    q = await tables.queue(lab)
    assert tuple(q.columns) == tables.QUEUE_COLUMNS
    assert q[["job_id", "state"]].values.tolist() == [[task_job_id(task.id, 0), "active"]]
    gate.release()
    await lab.wait_for("completed", task_id=task.id)


def test_verdict_rules():
    """The rule table itself, for the states real runs rarely show."""
    v = tables.verdict
    assert v("RUNNING", "waiting") == IN_STEP         # redelivery after a stall
    assert v("RUNNING", None) == QUEUE_BEHIND
    assert v("RUNNING", "failed") == LEDGER_BEHIND
    assert v("WAITING", "unknown") == QUEUE_BEHIND
    assert v("COMPLETED", "failed") == IN_STEP        # the ledger is the truth (W2, W3)
    assert v("FAILED", None) == NO_JOB
    assert v(None, "waiting") == ORPHAN_JOB


def test_integer_columns_survive_missing_values():
    """A None in an integer column (a task with no job) must not blank the other rows:
    pandas would store the column as floats and the int check would reject `3.0`."""
    from labs.tables import _frame

    df = _frame([{"job_id": "T-1", "attemptsMade": None}, {"job_id": "T-0", "attemptsMade": 3}],
                ("job_id", "attemptsMade"), ints=("attemptsMade",))
    assert df["attemptsMade"].isna().tolist() == [True, False]
    assert int(df["attemptsMade"].iloc[1]) == 3


async def test_board_names_tasks_and_leases_and_row_is_the_whole_row(lab):
    """`board` for people: only the tasks asked for, in that order, by name, the lease as
    E1, `dispatched_at` as set/missing; `row` is every column of the ledger row."""
    from labs.names import Names

    names = Names()
    first = names("first", await lab.request_export({"status": ["OPEN"]}))
    second = names("second", await lab.request_export({"status": ["CLOSED"]}))
    gate = lab.gate("export.after_read", when=lambda ctx: ctx["task_id"] == first.id)
    await lab.start_worker("W")
    await lab.enqueue(first.id)
    ctx = await gate.reached()
    assert names.lease(ctx["execution_id"]) == "E1"
    shown = await tables.board(lab, ["task", "status", "execution", "dispatched_at"],
                               names=names, tasks=[second, first])
    assert shown.values.tolist() == [["second", "WAITING", tables.MISSING, tables.MISSING],
                                     ["first", "RUNNING", "E1", tables.MISSING]]
    whole = await tables.row(lab, first.id)
    assert whole["execution_id"] == ctx["execution_id"] and whole["status"].value == "RUNNING"
    assert set(whole) == {c.name for c in tables.BackgroundTask.__table__.columns}
    gate.release()
    await lab.wait_for("completed", task_id=first.id)
    await lab.stop_worker("W")  # so that `second` stays WAITING once dispatched
    await lab.dispatch()  # marks `second` dispatched (D2)
    shown = await tables.board(lab, ["task", "dispatched_at"], names=names, tasks=[second])
    assert shown.values.tolist() == [["second", "set"]]


def test_names_keep_the_first_name_of_a_lease_and_let_a_label_win():
    from labs.names import Names

    names = Names()
    assert [names.lease("aaaaaaaa-1"), names.lease("bbbbbbbb-2"), names.lease("aaaaaaaa-9")] \
        == ["E1", "E2", "E1"]
    assert names.lease("cccccccc-3", "E3 (retry)") == "E3 (retry)"
    assert names.lease_of("cccccccc") == "E3 (retry)" and names.lease_of("") is None
    assert names.of("unnamed") == "unnamed"
    assert names.text("written under cccccccc's lease, not aaaaaaaa") == \
        "written under E3 (retry)'s lease, not E1"
    names.clear()
    assert names.lease("bbbbbbbb-2") == "E1"
