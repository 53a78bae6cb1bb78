"""Notebook 90's write-it-yourself invariant and its diagnosis case, judged by the real
system: the invariant's judge (not in the exercise registry: its context is the two chaos
runs, made once here for every test that reads them) rejects
the notebook's own starter and accepts its hidden solution (and a plausible wrong answer),
on the two real chaos runs the session made once (`chaos_90_runs`); the stall-limit case
is staged by real workers and the dispatcher, and judged on its cause and rule."""

from __future__ import annotations

import ast
import json

from labs.scenes import ch90
from tests.labs.test_exercises import NOTEBOOKS

NOTEBOOK = "90-chaos.ipynb"


def _defined(tag: str, name: str):
    """The function `name` that the cell tagged `tag` defines (its `def` alone is run)."""
    cells = json.loads((NOTEBOOKS / NOTEBOOK).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if tag not in cell["metadata"].get("tags", []):
            continue
        tree = ast.parse("".join(cell["source"]))
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        if defs:
            namespace: dict = {}
            exec(compile(ast.Module(body=defs, type_ignores=[]), NOTEBOOK, "exec"), namespace)
            return namespace[name], ast.get_source_segment("".join(cell["source"]), defs[0])
    raise AssertionError(f"{NOTEBOOK}: no cell tagged {tag!r} defines {name}")


async def test_90_invariant_judge_rejects_the_starter_and_accepts_the_solution(chaos_90_runs):
    """P3, P5, W2: the learner's invariant runs on both real runs. The starter (names
    nothing) misses the clobber; "claimed more than once" names the product's takeovers;
    the hidden solution names nothing on the product's run and exactly the clobbered
    task(s) on the counterexample's."""
    clean, cx = chaos_90_runs
    assert clean.conclusive and ch90.clobbered_ids(cx), (clean.verdict(), cx.violations)
    starter, starter_text = _defined("exercise", "my_invariant")
    solution, _ = _defined("solution", "solution_invariant")
    assert "newest[" not in starter_text and "execution_id !=" not in starter_text
    assert not ch90.judge_invariant(starter, clean, cx).ok
    solved = ch90.judge_invariant(solution, clean, cx)
    assert solved.ok and solved.facts["on_cx"] == ch90.clobbered_ids(cx), solved

    def claimed_twice(rows, history):
        claims = [c.task_id for c in history if c.kind == "claim"]
        return {t for t in claims if claims.count(t) > 1}

    verdict = ch90.judge_invariant(claimed_twice, clean, cx)
    assert not verdict.ok and "product's run" in verdict.heading, verdict
    assert "raised" in str(ch90.judge_invariant(lambda rows, history: 1 / 0, clean, cx))


async def test_stall_limit_case_is_staged_for_real_and_judged(lab):
    """W3, D4, D6 (ch. 26 §7 test 5): the real queue failed the stalled job while the
    ledger says RUNNING; the judge takes the right cause with W3/D4/W2 and refuses a wrong
    cause or rule (the notebook's starter and solution: the registry test's
    `case.stall-limit`); then D6 and the next scan make it FAILED."""
    case = await lab.case("stall-limit")
    row = case.ledger.iloc[0]
    assert row["status"] == "RUNNING" and row["execution_id"]
    assert case.board.iloc[0]["state"] == "failed"
    assert len(case.choices) >= 4
    assert case.judge(cause="stall-limit", rule="W3").ok
    assert case.judge(cause="stall-limit", rule="d4").ok
    assert not case.judge(cause="listener-crashed", rule="W3").ok
    assert not case.judge(cause="stall-limit", rule="P5").ok
    steps = await ch90.recover(lab, case.task_id)
    assert list(steps["status"]) == ["RUNNING", "WAITING", "FAILED"]
    final = await lab.task(case.task_id)
    assert final.last_error in ch90.FIXED_FAILED_TEXTS and final.execution_id is None
