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


async def test_a_learners_function_is_run_bounded_and_its_own_errors_are_a_verdict():
    """`run_answer`: the learner's own `assert` and `TimeoutError` are "raised" (not a wait
    of the harness, not the bound), running past the bound is "still running", and a
    harness wait that ran out inside it propagates for the world to note."""
    import asyncio

    from labs.exercises import run_answer
    from teamdesk.testing import GateTimeout

    async def asserts():
        assert 1 == 2, "my own check"

    async def own_timeout():
        await asyncio.wait_for(asyncio.sleep(1), 0.001)

    async def too_long():
        await asyncio.Event().wait()

    async def waits():
        raise GateTimeout("gate 'x' not reached")

    assert (await run_answer(lambda: 3, bound=1)).value == 3
    for fn in (asserts, own_timeout):
        refused = (await run_answer(fn, bound=5)).refused
        assert refused is not None and refused.heading.endswith("your function raised an error:")
    assert "AssertionError: my own check" in (await run_answer(asserts, bound=5)).refused.notes[0]
    refused = (await run_answer(too_long, bound=0.05)).refused
    assert refused is not None and "still running after 0.05 s" in refused.heading
    with pytest.raises(GateTimeout):
        await run_answer(waits, bound=5)


def test_a_whole_number_is_taken_from_numpy_too_but_not_from_a_bool():
    import numpy as np

    from labs.exercises import whole_number

    assert whole_number(np.int64(25)) == 25 and type(whole_number(np.int64(25))) is int
    assert whole_number(7) == 7
    assert [whole_number(v) for v in (True, 2.0, "3", None)] == [None, None, None, None]


def test_an_old_copy_calling_learn_check_is_told_what_to_do():
    from labs import learn

    with pytest.raises(AttributeError, match=r"updated\.ipynb"):
        learn.check(1, lambda a: True, holds="x")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        learn.nothing  # noqa: B018
