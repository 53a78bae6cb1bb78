"""The takeover race staged by gates in worker processes (`labs.chaos` kind `takeover`,
notebook 90's counterexample): E1 frozen past its lock, E2 held between two batches once
it has taken the task over, E1 woken, E2 released only once E1's late write has landed.
Nothing depends on timing, so with the lease-less export every race staged is a clobber
the checker names (P3, P5, W2) — race after race in one run, none missed."""

from __future__ import annotations

import dataclasses

from labs.chaos.schedule import make_schedule
from labs.scenes import ch90
from labs.scenes.ch90 import chaos_run

#: Eight races scheduled in one run (for this seed and window). Each race asks for
#: exports of its own when due and waits until one is held, on a task no race has held
#: before: every race is staged, none skipped, none half-staged.
REPEAT = dataclasses.replace(ch90.CX_CONFIG, tasks=100, duration=10.0, waves=6,
                             upfront=0.3)


async def test_every_staged_takeover_race_is_a_clobber_the_checker_names(service_settings):
    schedule = make_schedule(REPEAT.seed, REPEAT.workers, REPEAT.duration, REPEAT.kinds)
    assert len(schedule) >= 8
    report = await chaos_run(REPEAT, "repeat", service_settings)
    raced = [s for s in report.strikes if s.kind == "takeover"]
    assert len(raced) == len(schedule), (report.executed, report.missed)
    assert report.executed["takeover"] == len(raced)
    assert len({s.task_id for s in raced}) == len(raced)
    assert all(s.on_running and s.lease_after == "taken over" for s in raced), raced
    # Each race's task, and no other, is named: E1's result over E2's newer lease.
    assert ch90.clobbered_ids(report) == {s.task_id for s in raced}, report.violations
