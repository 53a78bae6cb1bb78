"""`labs.scenes.ch26c`: the exercise of 26c §5.8 judged on real reminders (P7, P10);
the registry test (`26c.last-point`) checks its starter, solution and a wrong point."""

from __future__ import annotations

from labs import tables
from labs.lab import Lab
from labs.scenes import ch26c


async def test_a_fault_anywhere_inside_the_transaction_rolls_back_and_only_the_last_point_wins(
        service_settings):
    """A fault at `reminder.after_completion` (the completion matched, no COMMIT yet) and
    at `reminder.after_event` both leave nothing between the attempts and one of each
    effect after attempt 2 (P10, P7); only the first is the exercise's answer. Each point
    runs once: the cache answers a second call."""
    async with Lab.open("ch26c", settings=service_settings, tickets=10, close_timeout=3,
                        backoff_delay_ms=30) as lab:
        await lab.start_worker("W")
        tried: dict[str, tuple] = {}
        assert await ch26c.judge_last_point(ch26c.LAST_POINT, lab=lab, tried=tried)
        before, between, after = tried[ch26c.LAST_POINT]
        assert between == before and after == (1, 1, before[2] + 1)
        verdict = await ch26c.judge_last_point("reminder.after_event", lab=lab, tried=tried)
        assert not verdict.ok and verdict.heading.startswith("✗ not the last point"), verdict
        b2, m2, a2 = tried["reminder.after_event"]
        assert m2 == b2 and a2 == (1, 1, b2[2] + 1)
        rows = len(await tables.ledger(lab))
        assert await ch26c.judge_last_point(ch26c.LAST_POINT, lab=lab, tried=tried)
        assert len(await tables.ledger(lab)) == rows  # no new reminder: answered from the cache
