"""26c and 26d: the write-it-yourself exercises judged by the real system (the judge
rejects the notebook's starter and accepts its hidden solution), the book's old reminder
code as a counterexample of one lab's actor, and the seam it goes through. Real
PostgreSQL and Redis."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from typing import Any

from labs import counterexamples, tables
from labs.scenes import ch26c
from teamdesk.tasks import reminder_effects
from teamdesk.tasks.lease import Lease, LeaseLost
from teamdesk.tasks.queue import task_job_id
from tests.labs.test_exercises import NOTEBOOKS

T = 8
NB_26C = "26c-reminder-commit-gate.ipynb"


def _defined(notebook: str, tag: str, name: str, **env: Any) -> Any:
    """The function `name` that the cell tagged `tag` defines (a starter or a solution),
    compiled from the notebook's own source with `env` as its globals."""
    cells = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if tag not in cell["metadata"].get("tags", []):
            continue
        tree = ast.parse("".join(cell["source"]))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                namespace = dict(env)
                exec(compile(ast.Module([node], []), notebook, "exec"), namespace)
                return namespace[name]
    raise AssertionError(f"{notebook}: no cell tagged {tag!r} defines {name}")


def _source(notebook: str, tag: str) -> str:
    cells = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]
    return "".join(next(c for c in cells if tag in c["metadata"].get("tags", []))["source"])


async def test_26c_commit_gate_judge_rejects_the_starter_and_accepts_the_solution(
        service_settings):
    """P10, P12, P6: the learner's gate decides the reminder's completion. The starter (it
    ignores the row count) lets A's effects commit after the recovery scan cleared its
    lease; the solution raises LeaseLost and the redelivery gives the only effects; a gate
    that always rolls back stops an executor alone."""
    env = {"Lease": Lease, "LeaseLost": LeaseLost}
    starter = _defined(NB_26C, "exercise", "my_gate", **env)
    solution = _defined(NB_26C, "solution", "solution_gate", **env)
    assert "raise" not in _source(NB_26C, "exercise")  # the starter does not hold the answer
    bad = await ch26c.judge_gate(starter, settings=service_settings)
    assert not bad.ok and bad.alone and not bad.rolled_back, str(bad)
    assert bad.final_status == "FAILED" and "UniqueViolation" in str(bad)  # the redelivery
    good = await ch26c.judge_gate(solution, settings=service_settings)
    assert good.ok and good.final_status == "COMPLETED", str(good)

    def always(rows_matched: int, lease: Lease) -> None:
        raise LeaseLost(lease, "reminder completion")

    wall = await ch26c.judge_gate(always, settings=service_settings)
    assert not wall.ok and not wall.alone, str(wall)


async def test_26c_commit_gate_that_raises_another_error_is_not_a_lost_lease(service_settings):
    """P6: rolling back with an ordinary error is caught as a failure of the task, not as
    a lost lease; the judge names it."""
    def wrong(rows_matched: int, lease: Lease) -> None:
        if rows_matched != 1:
            raise RuntimeError("lease lost")

    verdict = await ch26c.judge_gate(wrong, settings=service_settings)
    assert not verdict.ok and verdict.rolled_back and "raise LeaseLost" in str(verdict)


def test_the_context_writes_the_products_reminder_effects_unless_told_otherwise(settings):
    """P10: `TaskContext.reminder_effects` defaults to the product's one statement; only a
    caller that passes another step (a lab) changes it."""
    from teamdesk.tasks.context import TaskContext

    assert TaskContext(settings=settings).reminder_effects is (
        reminder_effects.write_reminder_effects)


async def test_separate_effects_is_the_books_old_outcome_for_one_actor_only(lab):
    """ch. 26 §5 (P3, P10, P12 broken on purpose, for A only): A's old code commits its
    effects although the recovery scan cleared its lease; the redelivery then skips the
    duplicate notification (unique constraint) while the event and the version go up a
    second time. Another actor keeps the product's one statement."""
    switch = lab.counterexample("separate-effects", actor="A")
    await lab.start_worker("A")
    assert isinstance(lab.workers["A"].ctx.reminder_effects, counterexamples.LabReminderEffects)
    ticket, task = await lab.create_ticket("Renew the domain", due_at=datetime.now(UTC),
                                           assignee_id="cai")
    jid = task_job_id(task.id, 0)
    before = await tables.reminder_effects(lab, ticket.id)
    gate = lab.gate("reminder.after_event", actor="A", when=lambda c: c["task_id"] == task.id)
    await lab.dispatch()
    await gate.reached(T)
    await lab.age(task.id, lab.settings.stale_running_age_s + 1)
    await lab.dispatch()  # D6
    gate.release()
    first = await lab.wait_for("completed", actor="A", job_id=jid, timeout=T)
    assert first["result"].startswith("Reminder sent")
    assert await tables.reminder_effects(lab, ticket.id) == (1, 1, before[2] + 1)
    await lab.dispatch()  # D4: added again
    second = await lab.wait_for("completed", actor="A", job_id=jid, timeout=T,
                                since=first["t"] + 1e-6)
    assert second["result"].startswith("Reminder sent")
    assert await tables.reminder_effects(lab, ticket.id) == (1, 2, before[2] + 2)
    assert (await lab.task(task.id)).status.value == "COMPLETED"
    assert switch.effects == ["reminder completion: 0 rows matched, carried on",
                              "notification: a duplicate, skipped by the unique constraint; "
                              "event and version written again"]
    switch.off()
    assert lab._fences.active("A") is None
