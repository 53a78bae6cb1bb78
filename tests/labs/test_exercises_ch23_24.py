"""Chapter 23 and 24's write-it-yourself exercises and diagnosis cases, judged by the real
system: why each wrong answer is refused (that the starter is refused and the solution
accepted is `test_exercise_registry.py`'s job), and each case staged for real and judged
on its cause and rule."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest

from labs.exercises import check, find
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


def _wrong_order(name: str) -> Any:
    """The notebook's starter, or one of the wrong orders registered with exercise 23.order."""
    if name == "the starter":
        return _defined("23-outbox.ipynb", "exercise", "my_dispatch_one")
    return find("23.order").wrong[name]


@pytest.mark.parametrize(("name", "lost", "calm_ok"), [
    ("the starter", True, True),  # mark, then add: the add meets the outage after the mark
    ("add, then mark in finally", True, True),  # catching the failed add is the same loss
    ("add, never mark", False, False),  # survives the outage, every row stays unmarked
])
async def test_23_each_wrong_order_is_refused_for_what_it_did(service_settings, name, lost,
                                                               calm_ok):
    """D1, D3, D8: under a real Redis outage, marking before the add succeeded loses the
    row — marked dispatched with no job, skipped by the first tick after recovery; an
    order that never marks is refused already with Redis up."""
    verdict = await ch23.judge_order(_wrong_order(name), settings=service_settings)
    assert not verdict.ok, str(verdict)
    assert (verdict.facts["lost"], verdict.facts["calm_ok"]) == (lost, calm_ok), str(verdict)
    if not calm_ok:
        assert any("dispatched_at was not marked" in n for n in verdict.facts["calm"])


async def test_23_judge_says_what_to_write_for_a_plain_function():
    verdict = await ch23.judge_order(lambda row, steps: None)
    assert not verdict.ok and "async def" in str(verdict)


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
        key = f"case.{name}"
        assert (await check(key, (cause, rule), case=case)).ok
        assert not (await check(key, (wrong, rule), case=case)).ok
        assert "not the rule" in str(await check(key, (cause, "P5"), case=case))


def test_the_exercise_helpers_read_the_notebooks():
    """The 23 starter holds the question's order, not the answer: it marks before it adds."""
    cells = json.loads((NOTEBOOKS / "23-outbox.ipynb").read_text(encoding="utf-8"))["cells"]
    [starter] = ["".join(c["source"]) for c in cells
                 if "exercise" in c["metadata"].get("tags", []) and "my_dispatch_one" in
                 "".join(c["source"])]
    assert starter.index("mark_dispatched") < starter.index("add_job")
    assert _assigned("23-outbox.ipynb", "exercise", "my_cause") is None


async def test_24_each_wrong_stale_check_is_refused_for_the_reminders_it_got_wrong(lab):
    """M1, O3, P10: run by the real processor and REMINDER executor with the learner's
    check (`TaskContext.stale_check`), the starter (closed tickets only) still reminds for
    a moved and a cleared due date (2 of 4), and a check that never finds a reminder stale
    (registered with 24.stale) reminds for every one but the current (1 of 4)."""
    from labs.scenes import ch24

    starter = _defined("24-reminders.ipynb", "exercise", "my_stale_reason")
    closed_only = await ch24.judge_stale(starter, lab=lab)
    assert not closed_only.ok and closed_only.facts["right"] == 2, str(closed_only)
    assert "twice for one ticket" in str(closed_only)
    never = await ch24.judge_stale(find("24.stale").wrong["never stale"], lab=lab)
    assert not never.ok and never.facts["right"] == 1, str(never)


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
