"""Write-it-yourself exercises are judged by the real system: for each one, the judge
rejects the notebook's own starter and accepts its hidden solution (a judge that cannot
tell them apart judges nothing)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from labs.scenes import ch26b
from teamdesk.tasks.lease import FENCED
from teamdesk.tasks.ledger import QUERIES

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _assigned(notebook: str, tag: str, name: str) -> object:
    """The literal value the cell tagged `tag` assigns to `name` (a starter or solution)."""
    cells = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if tag not in cell["metadata"].get("tags", []):
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return ast.literal_eval(node.value)
    raise AssertionError(f"{notebook}: no cell tagged {tag!r} assigns {name}")


def test_every_fenced_statement_has_the_lease_condition_a_learner_rewrites():
    """P3: the learner's fence replaces exactly one condition in each fenced statement."""
    for name in FENCED:
        assert len(ch26b.LEASE_CONDITION.findall(QUERIES[name])) == 1, name


@pytest.mark.parametrize(("where", "message"), [
    ("", "write the condition"), ("id = 1; DROP TABLE x", "without ';'"),
    ("id = %(ticket_id)s", "unknown parameter"), (42, "write the condition")])
def test_a_condition_that_is_not_one_is_refused_with_a_reason(where, message):
    with pytest.raises(ValueError, match=message):
        ch26b.where_fence(where)


async def test_26a_retry_or_reject_judge_rejects_the_starter_and_accepts_the_solution(lab):
    """P7, P8: run through the real processor, retrying a lasting problem fails only after
    three executions and rejecting a passing one fails a task a retry would finish; the
    notebook's starter (retry everything) is judged wrong, its solution right."""
    from labs.scenes import ch26a
    from teamdesk.tasks.context import TaskContext

    ctx = TaskContext(settings=lab.settings, actor="A")
    starter = _assigned("26a-identities-and-retries.ipynb", "exercise", "my_kinds")
    solution = _assigned("26a-identities-and-retries.ipynb", "solution", "solution_kinds")
    bad = await ch26a.judge_kinds(lab, ctx, starter)
    good = await ch26a.judge_kinds(lab, ctx, solution)
    assert not bad.ok and "only after 3 executions" in bad.text, bad.text
    assert good.ok, good.text
    all_reject = await ch26a.judge_kinds(lab, ctx, dict.fromkeys(solution, "reject"))
    assert not all_reject.ok and "a retry would have finished" in all_reject.text
