"""Chapter 23 and 24's write-it-yourself exercises and diagnosis cases, judged by the real
system: each judge rejects the notebook's own starter and accepts its hidden solution, and
each case is staged for real and judged on its cause and rule."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest

from labs.lab import Lab
from labs.scenes import ch23
from tests.labs.test_exercises import NOTEBOOKS, _assigned


def _defined(notebook: str, tag: str, name: str) -> Any:
    """The function the cell tagged `tag` defines as `name` (a starter or solution that is
    code, not a literal): the cell's definitions alone are run, nothing else of it."""
    cells = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if tag not in cell["metadata"].get("tags", []):
            continue
        tree = ast.parse("".join(cell["source"]))
        defs = [n for n in tree.body if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)]
        if any(d.name == name for d in defs):
            namespace: dict[str, Any] = {}
            exec(compile(ast.Module(body=defs, type_ignores=[]), notebook, "exec"), namespace)
            return namespace[name]
    raise AssertionError(f"{notebook}: no cell tagged {tag!r} defines {name}")


async def test_23_step_order_judge_rejects_the_starter_and_accepts_the_solution(
        service_settings):
    """D2, D3, D8: under a real Redis outage the starter (mark, then add) loses the row —
    marked dispatched with no job, skipped by the first tick after recovery (D1); the
    solution (add, then mark, a failure raising) leaves it for that tick, which enqueues
    it, and a worker completes it once."""
    starter = _defined("23-outbox.ipynb", "exercise", "my_dispatch_one")
    solution = _defined("23-outbox.ipynb", "solution", "solution_dispatch_one")
    bad = await ch23.judge_order(starter, settings=service_settings)
    good = await ch23.judge_order(solution, settings=service_settings)
    assert not bad.ok and bad.lost and bad.calm_ok, str(bad)
    assert good.ok and not good.lost, str(good)


async def test_23_catching_the_failed_add_and_marking_anyway_is_judged_lost(service_settings):
    """D3: a plausible wrong answer — add first, but mark in `finally` — is the same loss."""
    async def mark_anyway(row, steps):
        try:
            await steps.add_job(row)
        finally:
            await steps.mark_dispatched(row)

    verdict = await ch23.judge_order(mark_anyway, settings=service_settings)
    assert not verdict.ok and verdict.lost, str(verdict)


async def test_23_an_order_that_never_marks_is_rejected(service_settings):
    """D3: adding without the mark passes the outage but leaves every row unmarked."""
    async def add_only(row, steps):
        await steps.add_job(row)

    verdict = await ch23.judge_order(add_only, settings=service_settings)
    assert not verdict.ok and not verdict.calm_ok, str(verdict)
    assert any("dispatched_at was not marked" in line for line in verdict.calm)


async def test_23_judge_says_what_to_write_for_no_answer_or_a_plain_function():
    assert "not attempted" in str(await ch23.judge_order(None))
    assert "async def" in str(await ch23.judge_order(lambda row, steps: None))


@pytest.mark.parametrize(("name", "right", "wrong"), [
    ("waiting-dispatched", ("delayed", "D1"), "stuck"),
    ("orphan-job", ("old-run", "R3"), "d4-missed"),
])
async def test_23_cases_are_staged_for_real_and_judged(service_settings, name, right, wrong):
    """D1, D2 (a delayed reminder is not stuck); I2, R2, R3, Q1 (a failed job of run 0
    beside a COMPLETED run 1): each case is staged by the real system and the judge accepts
    the right cause and rule and rejects a wrong cause (and a wrong rule)."""
    async with Lab.open("test-cases-23", settings=service_settings, tickets=60) as lab:
        case = await lab.case(name)
        row = case.ledger.iloc[0]
        if name == "waiting-dispatched":
            assert (row["status"], row["run"]) == ("WAITING", 0)
            assert row["dispatched_at"] is not None
            assert list(case.board["state"]) == ["delayed"]
        else:
            assert (row["status"], row["run"]) == ("COMPLETED", 1)
            assert sorted(zip(case.board["job_id"], case.board["state"], strict=True)) == [
                (f"{case.task_id}-0", "failed"), (f"{case.task_id}-1", "completed")]
        cause, rule = right
        assert case.judge(cause=cause, rule=rule).ok
        assert not case.judge(cause=wrong, rule=rule).ok
        assert not case.judge(cause=cause, rule="P5").ok


def test_the_exercise_helpers_read_the_notebooks():
    """The 23 starter holds the question's order, not the answer: it marks before it adds."""
    cells = json.loads((NOTEBOOKS / "23-outbox.ipynb").read_text(encoding="utf-8"))["cells"]
    [starter] = ["".join(c["source"]) for c in cells
                 if "exercise" in c["metadata"].get("tags", []) and "my_dispatch_one" in
                 "".join(c["source"])]
    assert starter.index("mark_dispatched") < starter.index("add_job")
    assert _assigned("23-outbox.ipynb", "exercise", "my_cause") is None


async def test_24_stale_check_judge_rejects_the_starter_and_accepts_the_solution(lab):
    """M1, O3, P10: run by the real processor and REMINDER executor with the learner's
    check (`TaskContext.stale_check`), the starter (closed tickets only) reminds for a
    moved and a cleared due date; the solution (the revision) sends only the current one."""
    from labs.scenes import ch24

    starter = _defined("24-reminders.ipynb", "exercise", "my_stale_reason")
    solution = _defined("24-reminders.ipynb", "solution", "solution_stale_reason")
    bad = await ch24.judge_stale(lab, starter)
    good = await ch24.judge_stale(lab, solution)
    assert not bad.ok and bad.right == 2, str(bad)
    assert good.ok and good.right == 4, str(good)
    always = await ch24.judge_stale(lab, lambda task, ticket: None)
    assert not always.ok and always.right == 1, str(always)


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
