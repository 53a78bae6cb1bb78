"""Write-it-yourself exercises of notebooks 25, 26a and 26b, judged by the real system: why
each plausible wrong answer is rejected (that the judge refuses the notebook's starter and
accepts its hidden solution is `test_exercise_registry.py`'s job)."""

from __future__ import annotations

import asyncio
from typing import Any

from labs.scenes import ch26b


async def _no_lease_assertion(lab: Any) -> None:
    """A plausible wrong test: it waits properly and releases its gates, but asserts only
    what both worlds share — the task ends COMPLETED and B's job completes."""
    from labs.lab import STUCK, WATCHFUL
    from teamdesk.tasks.queue import task_job_id

    t = await lab.request_export({"priority": ["HIGH"]})
    jid = task_job_id(t.id, 0)
    g_a = lab.gate("export.after_read", actor="A", when=lambda c: c["task_id"] == t.id)
    g_b = lab.gate("claim.after", actor="B", when=lambda c: c["task_id"] == t.id)
    try:
        await lab.start_worker("A", **{**STUCK, "stalled_interval_ms": 3_600_000})
        await lab.enqueue(t.id)
        await g_a.reached(8)
        await lab.start_worker("B", **WATCHFUL)
        await g_b.reached(8)
        g_a.release()
        await lab.wait_for("error", actor="A", job_id=jid, timeout=8)
        g_b.release()
        await lab.wait_for("completed", actor="B", job_id=jid, timeout=8)
        assert (await lab.task(t.id)).status.value == "COMPLETED"
    finally:
        g_a.release()
        g_b.release()


async def test_26b_a_test_that_asserts_nothing_about_the_lease_is_rejected(service_settings):
    """P3: a test that passes on the status-only guard too cannot catch the bug."""
    verdict = await ch26b.judge_test(_no_lease_assertion, settings=service_settings)
    assert not verdict.ok, str(verdict)
    product, guard = verdict.facts["product"], verdict.facts["guard"]
    assert (product.outcome, guard.outcome) == ("passed", "passed"), str(verdict)
    assert "cannot catch the bug" in str(verdict)


async def test_26b_a_test_that_hangs_or_keeps_its_gates_is_rejected(service_settings):
    """The book's finally: a test that hangs is bounded and reported; one that leaves a gate
    held is rejected even when it passes."""

    async def hangs(lab: Any) -> None:
        await asyncio.Event().wait()

    async def keeps_its_gate(lab: Any) -> None:
        lab.gate("claim.after", actor="B")

    hung = await ch26b.judge_test(hangs, settings=service_settings, bound=1.0)
    assert not hung.ok and (hung.facts["product"].outcome,
                            hung.facts["guard"].outcome) == ("hung", "hung"), str(hung)
    held = await ch26b.judge_test(keeps_its_gate, settings=service_settings)
    assert not held.ok and held.facts["product"].outcome == "passed"
    assert held.facts["product"].held == ["claim.after for B"], str(held)
    assert "release gates in finally" in str(held)


def test_26a_attempt_times_measure_the_wait_from_each_failure_to_the_next_start():
    """Q1: the backoff is the time from a failed attempt to the next one's start, read from
    the worker's own `active` / `failed` events (the timeline 26a §2 plots)."""
    from types import SimpleNamespace

    from labs.recorder import Recorder
    from labs.scenes import ch26a

    rec = Recorder()
    for kind, t in [("active", 10.0), ("failed", 10.1), ("active", 12.1), ("failed", 12.2),
                    ("active", 16.2), ("failed", 16.3)]:
        rec(kind, {"job_id": "T-0"})
        rec.events[-1]["t"] = t
    rows = ch26a.attempt_times(SimpleNamespace(recorder=rec), "T-0")
    assert [r["waited"] for r in rows] == [None, 2.0, 4.0]
    assert [r["started"] for r in rows] == [0.0, 2.1, 6.2]
    assert ch26a.plot_attempts(rows, title="t").axes  # it draws


async def test_the_kinds_exercise_takes_its_choices_in_chinese_in_the_chinese_edition(
        service_settings, monkeypatch):
    """26a's Exercise E in the Chinese edition: "重试" / "拒绝" are "retry" / "reject"
    (`labs.learn.same`), judged through the real processor like the English."""
    from labs.exercises import check, load_all
    from labs.scenes import ch26a

    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    chinese = {situation: "拒绝" if stays else "重试"
               for situation, (stays, _) in ch26a.SITUATIONS.items()}
    async with load_all()["26a.kinds"].context(service_settings) as context:
        verdict = await check("26a.kinds", chinese, **context)
    assert verdict.ok, str(verdict)
