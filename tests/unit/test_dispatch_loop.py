"""The dispatch loop's schedule, without services: jittered intervals and the report line
(D8, D5). Deterministic: the random source is injected; no timing is measured."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest

from teamdesk.config import Settings
from teamdesk.tasks.dispatch_loop import TICK_JITTER, DispatchLoop
from teamdesk.tasks.dispatcher import DispatchReport


class _Edges:
    """A random source that answers `uniform(a, b)` with a, then b, then a, …"""

    def __init__(self) -> None:
        self.calls = 0

    def uniform(self, a: float, b: float) -> float:
        self.calls += 1
        return a if self.calls % 2 else b


def _loop(rng, tick: float = 3.0, **kw) -> DispatchLoop:
    return DispatchLoop(None, Settings(dispatch_tick_s=tick), rng=rng, **kw)  # type: ignore[arg-type]


def test_tick_intervals_are_jittered_within_bounds():
    """D8 ("about every 3 s"), D5: each interval is drawn from the tick ± 20 %, so two
    processes started together drift apart instead of scanning the same rows in phase;
    the bounds are reached exactly and the mean stays the tick."""
    edges = _loop(_Edges())
    assert [edges.next_interval() for _ in range(2)] == pytest.approx(
        [3.0 * (1 - TICK_JITTER), 3.0 * (1 + TICK_JITTER)])
    one = _loop(random.Random(7))
    drawn = [one.next_interval() for _ in range(2000)]
    assert all(3.0 * (1 - TICK_JITTER) <= d <= 3.0 * (1 + TICK_JITTER) for d in drawn)
    assert statistics.mean(drawn) == pytest.approx(3.0, rel=0.02)
    assert max(drawn) - min(drawn) > 3.0 * TICK_JITTER  # really spread, not one value
    other = _loop(random.Random(8))
    assert [other.next_interval() for _ in range(5)] != drawn[:5]  # not in phase


async def test_the_timer_draws_each_interval_from_the_injected_source():
    """D8: the loop's timer takes its intervals from `next_interval` (the injected
    source), drawing the next one as a tick is triggered; the first tick starts at once."""
    edges = _Edges()
    started = asyncio.Event()

    async def short_scan(*args, **kwargs) -> DispatchReport:
        return DispatchReport()

    loop = _loop(edges, tick=60.0, dispatch=short_scan,
                 listener=lambda event, info: started.set() if event == "tick.start" else None)
    loop.start()
    try:
        await asyncio.wait_for(started.wait(), 8.0)  # only detects a tick that never came
        assert edges.calls == 1
    finally:
        await loop.stop(timeout=2.0)


def test_report_line_shows_every_count_and_a_catch_up():
    """D8: a tick's line shows every count (D9's `failed_stalled` too, 0 or not); rounds
    and a backlog show only when there was a catch-up, and a tail's counts add into the
    tick's report."""
    report = DispatchReport(scanned=3, added=3)
    assert str(report) == ("scanned=3 added=3 refreshed=0 re_added=0 failed_from_queue=0 "
                           "recovered_stale=0 purged=0 failed_stalled=0")
    report.add(DispatchReport(scanned=2, refreshed=2, recovered_stale=1))
    report.rounds, report.backlog = 2, True
    assert str(report) == ("scanned=5 added=3 refreshed=2 re_added=0 failed_from_queue=0 "
                           "recovered_stale=1 purged=0 failed_stalled=0 rounds=2 backlog=true")
