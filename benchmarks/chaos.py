"""A seeded chaos run: real worker processes, real faults, then invariants over the ledger.

    .venv/bin/python -m benchmarks.chaos --seed S --workers K --tasks M --duration D
                                         [--kinds sigkill,sigterm,redis,cut[,sigstop]]
                                         [--settle 90]
                                         [--dry-run]

K `teamdesk worker` subprocesses (each with its own dispatch tick) work on M tasks created
through the product's services: exports with varied filters and scopes (some by an agent
who is demoted before the run, so they must be rejected), and reminders — a ticket's
creation, due-date changes that supersede earlier revisions, and closings, each group in
one transaction. About 40 % of the tasks exist before the workers start; the rest arrive
in waves during the fault window, while the faults strike.

Faults follow a schedule made only from (seed, K, D, kinds) — same arguments, same
schedule, printed before the run (`--dry-run` prints it and stops):

- `sigkill` — SIGKILL a worker process, restart it after a short pause;
- `sigterm` — SIGTERM a worker (it drains for at most 2 s, exit 0 or 3), restart it;
- `redis`   — stop the Redis server and start it again (it comes back empty). Only the
  embedded Redis of `teamdesk.devservices` (REDIS_URL unset); otherwise the run refuses
  and says how to leave Redis alone. It hits every user of that server;
- `sigstop` — (opt-in, not in the default kinds) SIGSTOP a worker for longer than its
  lock, then SIGCONT: its job stalls and may be taken over while it is frozen;
- `cut`     — `labs.faults.RedisProxy` sits between each worker and Redis; a cut resets
  that worker's Redis connections and refuses new ones for a while, then heals. Dropped
  (and said so) if `labs.faults` is missing or its proxy does not work.

(`--dry-run` assumes every requested kind is available; a run without a working proxy
drops `cut` and says so, which changes the schedule.) The schedule's offsets and hold
times are the faults themselves; nothing waits to order events. A worker that exits by
itself is restarted after 0.5 s, as a process supervisor would, and reported as a finding.
After the window: Redis up, proxies healed, every worker running, then a bounded settle
(poll the ledger) until every task is COMPLETED or FAILED. Then the invariants:

- nothing lost: the ledger holds exactly the tasks the services created, all run 0;
- every task terminal, no lease left; FAILED only with one of the fixed readable texts,
  and never a rejection text for a task whose authorization did not change;
- each export's CSV equals a fresh recomputation (`export_query` + `to_csv`) — the
  exported team's tickets are not changed during the run (a fingerprint says so);
- each current reminder revision: COMPLETED → exactly one notification, one
  `reminder_sent` event, one version bump; FAILED → none; superseded or closed: none;
- no COMPLETED row changed after it was first seen (snapshots every second);

then a summary (faults by kind, tasks by status, FAILED texts, recovery notes from the
worker logs) and exit 0, or 1 on any violation (2: refused or bad arguments). A task may
legitimately end FAILED when faults used up its attempts; that is counted, not hidden.

Short timings through the environment (Q2), printed with the run: lock 1 s, stalled check
100 ms, tick 0.2 s, stale RUNNING age 3 s, re-dispatch age 2 s, backoff 50 ms, Redis call
timeout 1 s, heartbeat TTL 1.5 s, drain timeout 2 s, export batch 10.

The run itself (schedule, plan, invariant checker) is `labs.chaos`, shared with
`tests/integration/test_chaos.py` and `notebooks/90-chaos.ipynb`; this is its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os

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
from labs.procs import clear_prefix
from teamdesk import devservices
from teamdesk.db.templates import clone_database, drop_database

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
    base = devservices.resolve_settings(owner_pid=os.getpid())
    url = await asyncio.to_thread(clone_database, base.database_url, "teamdesk_chaos")
    settings = base.replace(database_url=url, queue_prefix=f"chaos{os.getpid()}")
    try:
        report = await run_chaos(settings, config)
    except ChaosRefused as err:
        print(f"chaos: refused: {err}")
        return 2
    finally:
        with contextlib.suppress(Exception):
            await clear_prefix(settings)
        await asyncio.to_thread(drop_database, url)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
