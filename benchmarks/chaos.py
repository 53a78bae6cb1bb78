"""A seeded chaos run: real worker processes, real faults, then invariants over the ledger.

    .venv/bin/python -m benchmarks.chaos --seed S --workers K --tasks M --duration D
                                         [--kinds sigkill,sigterm,redis,cut[,sigstop,takeover]]
                                         [--settle 90]
                                         [--dry-run]

K `teamdesk worker` subprocesses work on M tasks created through the product's services
while a seeded schedule of faults strikes (`sigkill`, `sigterm`, `redis`, `cut`, and the
opt-in `sigstop` and `takeover`); then the invariants are checked over the ledger. Same
arguments, same schedule (`--dry-run` prints it and stops). Exit 0, or 1 on any violation
(2: refused or bad arguments). Here `redis` restarts a Redis server of the run's own
(started for it, removed after it), never the embedded one that an open lab or the test
suite uses, and with REDIS_URL set as well. The world and the invariants are described in
`labs/chaos/__init__.py`, the kinds in `labs/chaos/kinds.py` (one table).

The run itself (schedule, plan, invariant checker) is `labs.chaos`, shared with
`tests/labs/test_chaos.py` and `notebooks/90-chaos.ipynb`; this is its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from devkit import services
from devkit.world import World
from labs.chaos import (
    ALL_KINDS,
    KINDS,
    ChaosConfig,
    ChaosRefused,
    ExportSpec,
    ReminderSpec,
    make_plan,
    make_schedule,
    print_header,
    run_chaos,
)

# ---------------------------------------------------------------- command line


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds of the fault window")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated fault kinds, of {','.join(ALL_KINDS)}")
    parser.add_argument("--settle", type=float, default=90.0,
                        help="bound of the settle phase after the window, seconds")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the workers' log folder even after a clean run (by "
                             "default it is kept only when there is a violation or a finding)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the fault schedule and the task plan, run nothing")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if (set(kinds) - set(ALL_KINDS)) or not kinds:
        parser.error(f"--kinds must be a comma-separated subset of {','.join(ALL_KINDS)}")
    if args.workers < 1 or args.tasks < 1 or args.duration <= 0:
        parser.error("--workers and --tasks must be >= 1 and --duration > 0")
    args.kinds = kinds
    return args


async def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    config = ChaosConfig(seed=args.seed, workers=args.workers, tasks=args.tasks,
                         duration=args.duration, kinds=args.kinds, settle=args.settle)
    if args.dry_run:
        print_header(config, config.kinds, make_schedule(
            config.seed, config.workers, config.duration, config.kinds), print, [])
        plan = make_plan(config.seed, config.tasks)
        exports = [s for s in plan if isinstance(s, ExportSpec)]
        reminders = [s for s in plan if isinstance(s, ReminderSpec)]
        print(f"  task plan: {len(exports)} export(s) ({sum(s.rejected for s in exports)} "
              f"to be rejected), {len(reminders)} reminder ticket(s) with "
              f"{sum(s.tasks for s in reminders)} reminder task(s) "
              f"({sum(s.tasks - 1 for s in reminders if s.tasks > 1)} superseded revision(s) "
              f"at least, {sum(s.close for s in reminders)} closed)")
        return 0
    base = services.resolve_settings(owner_pid=os.getpid())
    world = await World.open_async(base, "chaos")
    try:
        report = await run_chaos(world.settings, config,
                                 keep_logs=True if args.keep_logs else None)
    except ChaosRefused as err:
        print(f"chaos: refused: {err}")
        return 2
    finally:
        await world.close()
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
