"""Notebook 90's write-it-yourself invariant and its diagnosis case, judged by the real
system. The invariant is exercise `90.invariant` of the registry
(`test_exercise_registry.py`: the starter and the named wrong answers refused, the hidden
solution accepted), its context the notebook's two chaos runs, made once per process
(`ch90.notebook_runs`, the `chaos_90_runs` fixture); here only what the registry does not
ask: that the pair is the notebook's, and that a function which raises is answered, not a
crash. The stall-limit case is staged by real workers and the dispatcher, and judged on
its cause and rule."""

from __future__ import annotations

from labs.exercises import check
from labs.scenes import ch90


async def test_90_invariant_runs_are_the_notebooks_and_a_raising_answer_is_a_verdict(
        chaos_90_runs, service_settings):
    """P3, P5, W2: the product's run is conclusive and the counterexample clobbered; the
    pair the registry's context reads is this one (made once); an answer that raises is
    refused with its error named."""
    clean, cx = chaos_90_runs
    assert clean.conclusive and ch90.clobbered_ids(cx), (clean.verdict(), cx.violations)
    assert await ch90.notebook_runs(service_settings) is chaos_90_runs
    raised = await check("90.invariant", lambda rows, history: 1 / 0, report=clean,
                         cx_report=cx)
    assert not raised.ok and "ZeroDivisionError" in str(raised), raised


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
