"""Named worker timings for real `teamdesk worker` processes (Q2), in one place.

Each preset is a `Settings` with only its shortened fields changed; a child process gets
it as `preset.to_env()` (the changed fields only, so the child's own defaults apply to the
rest, and the URLs come from the world it works in). Production defaults stay in
`teamdesk.config` (Q1); nothing here is product configuration.

    WorkerProc(world.settings, "w1", log_dir, CHAOS_WORKER.to_env())
    FAST_WORKER.replace(export_batch_size=100).to_env()     # a variation of one preset
"""

from __future__ import annotations

from teamdesk.config import Settings
from teamdesk.testing import FAST_WORKER

__all__ = ["CHAOS_WORKER", "FAST_WORKER", "ONE_SCAN_02", "PRODUCTION", "SCENE_WORKER",
           "TICK_02", "describe"]

#: The chaos run's workers (`labs.chaos`, `benchmarks.chaos`, notebook 90): a 1 s lock and
#: a 100 ms stall check so a frozen or killed worker's job is taken over within the short
#: fault window; a 3 s stale-RUNNING age and a 2 s re-dispatch age so D6 and D4 happen
#: inside a run; a 1 s Redis timeout so a tick during an outage fails fast (D8); a 2 s
#: drain so SIGTERM faults end quickly (W4); export batches of 10 so faults strike while
#: an export is between batches.
CHAOS_WORKER = Settings(lock_duration_ms=1000, stalled_interval_ms=100, dispatch_tick_s=0.2,
                        stale_running_age_s=3, redispatch_age_s=2, backoff_delay_ms=50,
                        redis_timeout_s=1, heartbeat_ttl_s=1.5, drain_timeout_s=2,
                        export_batch_size=10)
#: `FAST_WORKER`, the product's test timings (`teamdesk.testing`), are notebook 30's class
#: timings too.
#: Notebook 30's scene processes (`labs.scenes.ch30.Processes`, its tests): a quick tick
#: and heartbeat, small export batches; the lock and stall check stay at production values.
SCENE_WORKER = Settings(dispatch_tick_s=0.2, heartbeat_ttl_s=1.5, export_batch_size=10)

#: `benchmarks.pipeline`: the production defaults, and the configuration it ran before for
#: comparison — a 0.2 s tick with one scan per tick (budget 0: the book's loop, D8).
PRODUCTION = Settings()
ONE_SCAN_02 = Settings(dispatch_tick_s=0.2, dispatch_budget_s=0)
#: `benchmarks.scale`'s memory run: a 0.2 s tick, otherwise production timings.
TICK_02 = Settings(dispatch_tick_s=0.2)


def describe(preset: Settings) -> str:
    """The preset's changed fields as `name=value, …` (how runs print their timings)."""
    return ", ".join(f"{name.removeprefix('TEAMDESK_').lower()}={value}"
                     for name, value in preset.to_env().items())
