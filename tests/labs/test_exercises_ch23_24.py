"""Chapter 23 and 24's exercises and diagnosis cases beyond what the registry test checks
(`test_exercise_registry.py`: starters, wrong answers and solutions, and why each is
refused, `exercise_reasons.py`): the judge's words for a plain function, each case staged
for real with its evidence, the starters holding no answer, and the seams the exercises
use."""

from __future__ import annotations

import json

import pytest

from labs.exercises import check
from labs.lab import Lab
from labs.scenes import ch23
from tests.labs.test_exercises import NOTEBOOKS, _assigned


async def test_23_judge_says_what_to_write_for_a_plain_function():
    verdict = await ch23.judge_order(lambda row, steps: None)
    assert not verdict.ok and "async def" in str(verdict)
    verdict = await ch23.judge_recovery_test(lambda lab, dispatch: None)
    assert not verdict.ok and "async def" in str(verdict)


@pytest.mark.parametrize(("name", "right", "wrong"), [
    ("waiting-dispatched", ("delayed", "D1"), "stuck"),
    ("orphan-job", ("old-run", "R3"), "d4-missed"),
    ("running-unrecovered", ("ticks-failing", "D8"), "not-due"),
])
async def test_23_cases_are_staged_for_real_and_judged(service_settings, name, right, wrong):
    """D1, D2 (a delayed reminder is not stuck); I2, R2, R3, Q1 (a failed job of run 0
    beside a COMPLETED run 1); D6, D8 (a RUNNING row past the stale age that no tick
    recovers, because every tick fails before its tail): each case is staged by the real
    system and the judge accepts the right cause and rule and rejects a wrong cause (and a
    wrong rule)."""
    async with Lab.open("test-cases-23", settings=service_settings, tickets=60) as lab:
        case = await lab.case(name)
        row = case.ledger.iloc[0]
        if name == "waiting-dispatched":
            assert (row["status"], row["run"]) == ("WAITING", 0)
            assert row["dispatched_at"] is not None
            assert list(case.board["state"]) == ["delayed"]
        elif name == "running-unrecovered":
            assert (row["status"], row["run"], row["progress"]) == ("RUNNING", 0, 0)
            assert row["execution_id"] and await ch23.idle_s(lab, case.task_id) >= 600
            assert list(case.board["state"]) == ["active"]
            claims = [line for line in case.log if "task.claimed" in line]
            assert len(claims) == 1 and case.task_id in claims[0]
            # the evidence names the task (its claim) and shows the scans failing since
            faults = [line for line in case.log if "dispatch.fault" in line]
            assert len(faults) >= 2 and case.log.index(claims[0]) < case.log.index(faults[0])
            recovered = await lab.dispatch()  # a tick that gets through: the recovery comes
            assert recovered.recovered_stale == 1
            assert (await lab.task(case.task_id)).status == "WAITING"
        else:
            assert (row["status"], row["run"]) == ("COMPLETED", 1)
            assert sorted(zip(case.board["job_id"], case.board["state"], strict=True)) == [
                (f"{case.task_id}-0", "failed"), (f"{case.task_id}-1", "completed")]
        cause, rule = right
        key = f"case.{name}"
        assert (await check(key, (cause, rule), case=case)).ok
        assert not (await check(key, (wrong, rule), case=case)).ok
        assert "not the rule" in str(await check(key, (cause, "P5"), case=case))


def test_the_exercise_helpers_read_the_notebooks():
    """The 23 starters hold no answer: exercise A's marks before it adds (the question's
    order), exercise B's test asserts nothing yet."""
    cells = json.loads((NOTEBOOKS / "23-outbox.ipynb").read_text(encoding="utf-8"))["cells"]
    [starter] = ["".join(c["source"]) for c in cells
                 if "exercise" in c["metadata"].get("tags", []) and "my_dispatch_one" in
                 "".join(c["source"])]
    assert starter.index("mark_dispatched") < starter.index("add_job")
    [test] = ["".join(c["source"]) for c in cells
              if "exercise" in c["metadata"].get("tags", []) and "my_test" in
              "".join(c["source"])]
    assert "assert" not in test and "TODO 1" in test  # exercise B: the checks are the learner's
    assert _assigned("23-outbox.ipynb", "exercise", "my_cause") is None


def test_24_starter_does_not_hold_the_answer():
    """The starter never compares revisions: that is what the learner writes (O3)."""
    cells = json.loads((NOTEBOOKS / "24-reminders.ipynb").read_text(encoding="utf-8"))["cells"]
    [starter] = ["".join(c["source"]) for c in cells
                 if "exercise" in c["metadata"].get("tags", [])
                 and "my_stale_reason" in "".join(c["source"])]
    assert "revision" not in starter


async def test_stale_check_seam_defaults_to_the_products_check(lab):
    """M1: `TaskContext.stale_check` None is the product's `stale_reason`: a superseded
    reminder run by the real processor with a plain context completes as a no-op."""
    from datetime import UTC, datetime

    from teamdesk.tasks.context import TaskContext
    from teamdesk.tasks.processor import process_task
    from teamdesk.testing import FakeJob

    ctx = TaskContext(settings=lab.settings, actor="J")
    assert ctx.stale_check is None
    ticket, old = await lab.create_ticket("Seam default", due_at=datetime.now(UTC))
    await lab.set_due_date(ticket.id, datetime.now(UTC))
    await process_task(FakeJob(old.id), None, ctx)
    row = await lab.task(old.id)
    assert row.status == "COMPLETED"
    assert row.result_summary.startswith("No reminder sent: superseded")


async def test_add_job_and_mark_dispatched_are_the_ticks_own_steps(lab):
    """D2, D3: the two public steps do what a tick does for one row — the job
    `<id>-<run>` with the scan's delay (a reminder due tomorrow: delayed), then the mark,
    which matches the WAITING row once and a COMPLETED row never."""
    from datetime import UTC, datetime, timedelta

    from teamdesk.tasks import dispatcher
    from teamdesk.tasks.ledger import Ledger

    _ticket, task = await lab.create_ticket("Steps", due_at=datetime.now(UTC) + timedelta(days=1))
    async with Ledger(lab.settings.database_url).connection() as conn:
        [row] = [r for r in await dispatcher.scan(conn, lab.settings) if r.id == task.id]
        await dispatcher.add_job(lab.queue, lab.settings, row)
        job = await lab.job(task.id)
        assert job.id == f"{task.id}-0" and await job.getState() == "delayed"
        assert job.data == {"taskId": task.id, "run": 0} and job.delay == row.delay_ms
        assert (await lab.task(task.id)).dispatched_at is None  # the add alone marks nothing
        assert await dispatcher.mark_dispatched(conn, [row]) == 1
        assert (await lab.task(task.id)).dispatched_at is not None

        export = await lab.request_export({"status": ["OPEN"]})
        [done] = [r for r in await dispatcher.scan(conn, lab.settings) if r.id == export.id]
        await dispatcher.add_job(lab.queue, lab.settings, done)
        await lab.start_worker("W")
        await lab.wait_for("completed", task_id=export.id)
        assert await dispatcher.mark_dispatched(conn, [done]) == 0  # never turned back
        assert (await lab.task(export.id)).dispatched_at is None
