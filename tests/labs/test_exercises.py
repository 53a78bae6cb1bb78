"""Write-it-yourself exercises are judged by the real system. That each judge refuses the
notebook's starter and accepts its hidden solution is `test_exercise_registry.py`'s job;
here: why a wrong answer is refused, and the pieces a judge is built from."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from labs import fences
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
        assert len(fences.LEASE_CONDITION.findall(QUERIES[name])) == 1, name


@pytest.mark.parametrize(("where", "message"), [
    ("", "write the condition"), ("id = 1; DROP TABLE x", "without ';'"),
    ("id = %(ticket_id)s", "unknown parameter"), (42, "write the condition")])
def test_a_condition_that_is_not_one_is_refused_with_a_reason(where, message):
    with pytest.raises(ValueError, match=message):
        ch26b.where_fence(where)
