"""Pipeline benchmark: tasks/s from the outbox insert to COMPLETED, with real worker
processes, next to a queue-bound and a ledger-bound baseline measured in the same run; and
a backlog scenario: how fast a burst of due rows reaches the queue.

    .venv/bin/python -m benchmarks.pipeline [--tasks 5000] [--repeat 3] [--workers 1,2]
                                            [--backlog 10000] [--json PATH] [--profile]

For each worker count K (default 1, then 2), in a fresh cloned database and a fresh queue
prefix each time:

- **queue bound** (`benchmarks.queue_bound`): K subprocesses each run a raw bullmq
  `Worker` (the product's worker options: concurrency 1, the same fail-fast Redis client)
  with a no-op processor; N jobs are added (`addBulk`, the product's default job options)
  and the clock stops when no job is waiting, delayed or active any more.
- **ledger bound** (`benchmarks.ledger_bound`): K subprocesses, one PostgreSQL connection
  each, run per task the product's own statements of `teamdesk/tasks/queries.sql`, as the
  processor sends them: `claim` (P2), one `progress` write fenced by the lease (P3, P4) and
  the type's fenced completion, `export_result` (P5) or `reminder_completion` (P10) — raw
  psycopg, autocommit, no reads, no Redis. The floor moves with what the processor runs.
- **pipeline** (`benchmarks.throughput`): K real `teamdesk worker` subprocesses (each with
  its own dispatch tick, so duplicate dispatch happens as in production, D5) with the
  **production timings** (3 s tick, a full scan followed at once by the next, D8). N
  tasks — half small EXPORTs (TEAM scope, a text filter matching one ticket of 300), half
  REMINDERs due a minute ago (each for its own ticket of a second team) — are written to
  the ledger by one INSERT … SELECT (the outbox insert); the clock runs from just before
  that insert until the ledger shows all N COMPLETED (polled every 0.1 s).
- **pipeline, 0.2 s tick, one scan per tick**: the same, with the configuration this
  benchmark used before (`TEAMDESK_DISPATCH_TICK_S=0.2` and `TEAMDESK_DISPATCH_BUDGET_S=0`:
  one scan of at most 100 rows per tick, the book's loop), for comparison.

It prints tasks/s, the pipeline's share of the tighter baseline (target: at least 30 %
with the same number of workers), the share of the machine's CPU that was busy (anyone's
work: other work on the machine moves every figure), and the medians over `--repeat` runs.

**Backlog** (`benchmarks.backlog`; `--backlog N`, default 10,000; 0 skips it), once, with
the largest K: N due rows are written at once while K `teamdesk worker` processes run with
the production timings; it reports the seconds until every row is in the queue (marked
`dispatched_at`, or already taken by a worker) and until all are COMPLETED, next to the raw
queue in the same run: N no-op jobs added one `add` per job, 8 at a time (the dispatcher's
concurrency), while K no-op bullmq workers drain them — the time of the adds and of the
drain. The ratio backlog-to-queue / raw adds says how close the dispatcher comes to the
queue's speed (D8: a burst drains at the queue's speed, not 100 rows per tick).

If the throughput target is missed — or with `--profile` — one in-process worker (the
same `create_task_worker` + `DispatchLoop`) runs under cProfile and the summary says where
the time goes (`benchmarks.worker_profile`). `--json PATH` writes every figure (each run
and the medians) as JSON, which `benchmarks.report` renders into `docs/measurements.md`.

This module is the command line and the orchestration; each measurement is its own module
(named above), and what they share — the world they write (`pipeline.sql`), the meters, the
child processes — is `benchmarks._world`. The baselines' children are started as
`python -m benchmarks.pipeline --role noop-worker|ledger-worker` (`_entry`).

Real services (embedded by default, or DATABASE_URL / REDIS_URL). Figures are printed,
never asserted: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._machine import machine_info
from benchmarks._world import Busy, worker_timings
from benchmarks.backlog import BacklogRun, measure_backlog
from benchmarks.ledger_bound import ledger_worker_main, measure_ledger
from benchmarks.queue_bound import measure_queue, noop_worker_main
from benchmarks.throughput import measure_pipeline
from benchmarks.worker_profile import call_costs, profile_worker
from devkit import services
from labs.timings import ONE_SCAN_02
from teamdesk.config import Settings
from teamdesk.tasks.dispatcher import DEFAULT_CONCURRENCY

#: The pipeline's share of the tighter of its two bounds (queue, ledger) it should reach;
#: below it the benchmark prints where the time goes. The worker timings are the
#: production defaults, compared with `labs.timings.ONE_SCAN_02` (a 0.2 s tick with one
#: scan of at most 100 rows per tick: the book's loop, no catch-up).
TARGET = 0.30
#: The hot path's budget: worker CPU per task, each kind.
CPU_TARGET_MS = 4.0


@dataclass
class Figures:
    queue: dict[int, list[float]] = field(default_factory=dict)
    ledger: dict[int, list[float]] = field(default_factory=dict)
    pipeline: dict[int, list[float]] = field(default_factory=dict)
    one_scan: dict[int, list[float]] = field(default_factory=dict)
    worker_ms: dict[int, list[float]] = field(default_factory=dict)
    postgres_ms: dict[int, list[float]] = field(default_factory=dict)
    busy: dict[int, list[float]] = field(default_factory=dict)
    one_scan_busy: dict[int, list[float]] = field(default_factory=dict)
    faults: dict[int, list[int]] = field(default_factory=dict)
    one_scan_faults: dict[int, list[int]] = field(default_factory=dict)

    def add(self, kind: str, k: int, value: float) -> None:
        getattr(self, kind).setdefault(k, []).append(value)

    def medians(self, k: int) -> dict[str, float]:
        return {name: statistics.median(values[k]) for name, values in vars(self).items()
                if k in values}


def _line(k: int, q: float, led: float, pipe: float) -> tuple[str, float]:
    tight = min(q, led)
    which = "queue" if q <= led else "ledger"
    share = pipe / tight
    mark = "ok" if share >= TARGET else f"BELOW the {TARGET:.0%} target"
    return (f"    {k} worker(s): pipeline {pipe:7.0f} tasks/s | queue bound {q:7.0f} jobs/s | "
            f"ledger bound {led:7.0f} tasks/s | pipeline = {pipe / q:.0%} of queue, "
            f"{pipe / led:.0%} of ledger -> {share:.0%} of the tighter ({which}): {mark}",
            share)


def _compare(k: int, pipe: float, busy: float, old: float, old_busy: float) -> str:
    return (f"    {k} worker(s): production timings {pipe:7.0f} tasks/s (machine {busy:.0%} "
            f"busy) | 0.2 s tick, one scan per tick {old:7.0f} tasks/s (machine "
            f"{old_busy:.0%} busy) -> {pipe / old:.2f}x")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="jobs at once per worker process, pipeline and queue baseline "
                             "alike (default 1, the product default); the ledger baseline "
                             "then uses workers x concurrency connections")
    parser.add_argument("--backlog", type=int, default=10_000,
                        help="due rows of the backlog scenario, with the largest worker "
                             "count (default 10,000; 0 skips it)")
    parser.add_argument("--no-compare", action="store_true",
                        help="skip the 0.2 s one-scan-per-tick comparison runs")
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="also write every figure to PATH as JSON")
    parser.add_argument("--profile", action="store_true",
                        help="always print the profile of one in-process worker")
    parser.add_argument("--profile-tasks", type=int, default=1_000)
    return parser


async def _one_round(base: Settings, args: argparse.Namespace, k: int, log_dir: Path,
                     figures: Figures) -> None:
    """One run of each measurement with `k` worker processes, into `figures`."""
    q = await measure_queue(base, args.tasks, k, args.concurrency)
    print(f"    queue bound ({k}): {q:.0f} jobs/s", flush=True)
    led = await measure_ledger(base, args.tasks, k * args.concurrency)
    print(f"    ledger bound ({k * args.concurrency} connection(s)): {led:.0f} tasks/s",
          flush=True)
    run = await measure_pipeline(base, args.tasks, k, log_dir, args.concurrency)
    print(f"    pipeline ({k}), production timings: {run.rate:.0f} tasks/s; CPU per "
          f"task: worker process(es) {run.worker_ms:.1f} ms, PostgreSQL "
          f"{run.postgres_ms:.1f} ms; machine {run.busy:.0%} busy; dispatch faults "
          f"{run.faults}", flush=True)
    for name, value in (("queue", q), ("ledger", led), ("pipeline", run.rate),
                        ("worker_ms", run.worker_ms), ("postgres_ms", run.postgres_ms),
                        ("busy", run.busy), ("faults", run.faults)):
        figures.add(name, k, value)
    if not args.no_compare:
        old = await measure_pipeline(base, args.tasks, k, log_dir, args.concurrency,
                                     timings=ONE_SCAN_02,
                                     label="pipeline, 0.2 s tick, one scan")
        print(f"    pipeline ({k}), 0.2 s tick, one scan per tick: {old.rate:.0f} "
              f"tasks/s; machine {old.busy:.0%} busy; dispatch faults {old.faults}",
              flush=True)
        figures.add("one_scan", k, old.rate)
        figures.add("one_scan_busy", k, old.busy)
        figures.add("one_scan_faults", k, old.faults)
    print(_line(k, q, led, run.rate)[0], flush=True)


def _print_medians(args: argparse.Namespace, counts: list[int], figures: Figures) -> bool:
    """The medians per worker count; returns whether a share missed `TARGET`."""
    print(f"\n  medians of {args.repeat} run(s), {args.tasks:,} tasks each:")
    missed = False
    for k in counts:
        m = figures.medians(k)
        line, share = _line(k, m["queue"], m["ledger"], m["pipeline"])
        print(line)
        print(f"      CPU per task (median): worker process(es) {m['worker_ms']:.1f} ms, "
              f"PostgreSQL {m['postgres_ms']:.1f} ms")
        if "one_scan" in m:
            print(_compare(k, m["pipeline"], m["busy"], m["one_scan"], m["one_scan_busy"]))
        missed |= share < TARGET
    if len(counts) > 1 and 1 in counts:
        one = statistics.median(figures.pipeline[1])
        for k in counts:
            if k != 1:
                print(f"    scaling: {k} worker processes = "
                      f"{statistics.median(figures.pipeline[k]) / one:.2f}x one")
    return missed


async def _per_kind(base: Settings, args: argparse.Namespace, k: int,
                    log_dir: Path) -> dict[str, Any]:
    """Worker CPU per task for each kind (target: at most `CPU_TARGET_MS` each): one run
    per kind with `k` worker processes, only that kind's half of the N tasks."""
    per_kind = {}
    print(f"\n  per kind, {k} worker process(es), {args.tasks // 2:,} tasks of one kind each:")
    for kind in ("EXPORT", "REMINDER"):
        run = await measure_pipeline(base, args.tasks, k, log_dir, args.concurrency, kind)
        per_kind[kind.lower()] = vars(run)
        mark = "ok" if run.worker_ms <= CPU_TARGET_MS else f"ABOVE the {CPU_TARGET_MS} ms target"
        print(f"    {kind.lower():8s}: {run.rate:6.0f} tasks/s; worker CPU per task "
              f"{run.worker_ms:.2f} ms ({mark}), PostgreSQL {run.postgres_ms:.2f} ms",
              flush=True)
    return per_kind


async def _backlog(base: Settings, args: argparse.Namespace, k: int,
                   log_dir: Path) -> BacklogRun:
    print(f"\n  backlog: {args.backlog:,} due rows at once, {k} worker process(es), "
          "production timings", flush=True)
    backlog = await measure_backlog(base, args.backlog, k, log_dir, args.concurrency)
    print(f"    dispatcher: all in the queue after {backlog.queued_s:.1f} s, all COMPLETED "
          f"after {backlog.completed_s:.1f} s (machine {backlog.busy:.0%} busy; dispatch "
          f"faults {backlog.faults})")
    print(f"    raw queue: {backlog.n:,} no-op adds ({DEFAULT_CONCURRENCY} at a time) in "
          f"{backlog.raw_add_s:.1f} s, drained by {k} no-op worker(s) after "
          f"{backlog.raw_drain_s:.1f} s (machine {backlog.raw_busy:.0%} busy)")
    mark = "ok" if backlog.ratio <= 3 else "ABOVE the 3x target"
    print(f"    in the queue / raw adds = {backlog.ratio:.2f}x ({mark}); all COMPLETED / "
          f"raw drain = {backlog.completed_s / backlog.raw_drain_s:.2f}x", flush=True)
    return backlog


def _write_json(path: Path, base: Settings, args: argparse.Namespace, counts: list[int],
                busy: float, figures: Figures, per_kind: dict[str, Any],
                backlog: BacklogRun | None) -> None:
    path.write_text(json.dumps({
        "benchmark": "pipeline", **machine_info(base), "tasks": args.tasks,
        "repeat": args.repeat,
        "workers": counts, "concurrency": args.concurrency, "cores": os.cpu_count(),
        "timings": {"pipeline": worker_timings(args.concurrency),
                    "one_scan": None if args.no_compare else ONE_SCAN_02.to_env()},
        "machine_busy": busy,
        "runs": {name: {str(k): v for k, v in values.items()}
                 for name, values in vars(figures).items()},
        "medians": {str(k): figures.medians(k) for k in counts},
        "per_kind": per_kind,
        "backlog": None if backlog is None else {**vars(backlog), "ratio": backlog.ratio},
    }, indent=2) + "\n")
    print(f"  figures written to {path}")


async def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.tasks < 2 or args.repeat < 1 or args.backlog < 0:
        parser.error("--tasks must be at least 2, --repeat at least 1, --backlog 0 or more")
    counts = [int(x) for x in args.workers.split(",") if x.strip()]
    base = services.resolve_settings(owner_pid=os.getpid())
    whole = Busy()
    print(f"pipeline benchmark: {args.tasks:,} tasks (half small exports, half reminders), "
          f"worker processes {counts}, {args.repeat} run(s); machine: {os.cpu_count()} "
          f"cores; worker timings: production defaults"
          + "".join(f", {k}={v}" for k, v in worker_timings(args.concurrency).items())
          + ("" if args.no_compare else "; compared with "
             + ", ".join(f"{k}={v}" for k, v in ONE_SCAN_02.to_env().items())), flush=True)
    figures = Figures()
    log_dir = Path(tempfile.mkdtemp(prefix="teamdesk-bench-"))
    for r in range(args.repeat):
        print(f"  run {r + 1}/{args.repeat}", flush=True)
        for k in counts:
            await _one_round(base, args, k, log_dir, figures)
    missed = _print_medians(args, counts, figures)
    k = max(counts)
    per_kind = await _per_kind(base, args, k, log_dir)
    backlog = await _backlog(base, args, k, log_dir) if args.backlog else None
    busy = whole.share()
    print(f"\n  machine {busy:.0%} busy over the whole benchmark ({os.cpu_count()} cores)")
    print(f"  worker logs: {log_dir}")
    if args.json:
        _write_json(args.json, base, args, counts, busy, figures, per_kind, backlog)
    if missed or args.profile:
        if missed:
            print(f"\n  the pipeline is below {TARGET:.0%} of the tighter baseline: where the "
                  "time goes")
        await profile_worker(base, min(args.tasks, args.profile_tasks))
        await call_costs(base)
    return 0


def _entry() -> int:
    import logging

    if "--role" in sys.argv:
        role = argparse.ArgumentParser()
        role.add_argument("--role", required=True, choices=["noop-worker", "ledger-worker"])
        role.add_argument("--part", type=int, default=0)
        role.add_argument("--parts", type=int, default=1)
        a = role.parse_args()
        if a.role == "noop-worker":
            return asyncio.run(noop_worker_main())
        return ledger_worker_main(a.part, a.parts)
    logging.getLogger("teamdesk").setLevel(logging.WARNING)
    return asyncio.run(main())


if __name__ == "__main__":
    sys.exit(_entry())
