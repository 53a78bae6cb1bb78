"""Scale benchmark: the dispatcher's scan on a 1M-row ledger, and a worker process's
resident memory after 1k vs 10k tasks.

    .venv/bin/python -m benchmarks.scale [--rows 100000,1000000] [--memory-tasks 10000]
                                         [--skip-scan] [--skip-memory]

(a) For each ledger size, a cloned database is filled by one INSERT … SELECT
    generate_series (mostly COMPLETED; 1 in 40 WAITING, of those a third never
    dispatched, a third checked long ago, a third checked just now — the same fill as
    `benchmarks.dispatch`). It prints the D1 scan's median/max time with work due, the
    scan's time with nothing due (every WAITING row checked just now) and an idle tick's
    (scan + D6 recovery + D7 purge), with how much each scan read (EXPLAIN ANALYZE,
    BUFFERS), and checks the plans read the ledger through its partial index (no Seq
    Scan). The sizes side by side show whether the scan stays flat as the ledger grows.
(b) One real `teamdesk worker` subprocess (tick 0.2 s, otherwise production timings)
    completes small exports and reminders (as in `benchmarks.pipeline`) in batches; its
    RSS (psutil) is read after 1k tasks and after `--memory-tasks` (default 10k), with
    points in between, and the ratio printed. No growth beyond noise is the expectation.

Real services (embedded by default, or DATABASE_URL / REDIS_URL). Figures are printed,
never asserted, except the index use of the scan.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from sqlalchemy import text

from benchmarks._world import Progress, insert_tasks, ledger_counts, prepare_world
from benchmarks.dispatch import SQL, _explain, _fill, timed_scans
from devkit import services
from labs.procs import WorkerProc, World, stop_all, wait_heartbeats
from labs.timings import TICK_02
from teamdesk.config import Settings
from teamdesk.tasks.dispatcher import dispatch_tasks
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.queue import create_task_queue
from teamdesk.testing import wait_until


def _plan_facts(plan: str) -> str:
    """What an EXPLAIN (ANALYZE, BUFFERS) says about how much was read."""
    lines = [ln.strip() for ln in plan.splitlines()]
    scan = next((ln.split(" (")[0].lstrip("-> ") for ln in lines if "Scan" in ln), "?")
    removed = next((ln for ln in lines if ln.startswith("Rows Removed")), "Rows Removed: 0")
    buffers = next((ln for ln in lines if ln.startswith("Buffers")), "")
    return f"{scan}; {removed}; {buffers}"


async def scan_at(base: Settings, rows: int, scans: int = 30
                  ) -> tuple[float, float, float, float]:
    """(median scan ms with work due, max of those, median scan ms with nothing due,
    median idle tick ms) on a ledger of `rows` rows."""
    world = World.open(base, "bscale")
    settings, engine, sessions = world.settings, world.engine, world.sessions
    url = settings.database_url
    queue = create_task_queue(settings)
    try:
        t0 = time.perf_counter()
        print(f"    filling {rows:,} ledger rows …", flush=True)
        await _fill(url, rows)
        async with sessions() as s:
            counts = dict((await s.execute(text(SQL["status_counts"]))).all())
            size = (await s.execute(text(SQL["ledger_size"]))).scalar_one()
        print(f"    filled in {time.perf_counter() - t0:.1f} s: {counts}, table + indexes "
              f"{size}", flush=True)
        timings, found = await timed_scans(url, settings, scans)
        plan = await _explain(url, settings)
        assert "Seq Scan on background_tasks" not in plan, plan
        assert "ix_background_tasks_undispatched" in plan, plan
        # Idle tick: nothing due (every WAITING row checked just now). The mass UPDATE
        # leaves dead index entries a live system's autovacuum would have removed long
        # ago: vacuum them so the tick is measured in a steady state.
        async with sessions() as s, s.begin():
            await s.execute(text(SQL["mark_all_checked"]))
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(SQL["vacuum_ledger"]))
        idle_scans, empty = await timed_scans(url, settings, scans)
        assert empty == 0
        idle = []
        ledger = await Ledger.pooled(url, size=1)
        try:
            for _ in range(scans):
                t = time.perf_counter()
                report = await dispatch_tasks(queue, settings, ledger=ledger)
                idle.append((time.perf_counter() - t) * 1000)
        finally:
            await ledger.close()
        assert report.scanned == 0
        idle_plan = await _explain(url, settings)
        assert "Seq Scan on background_tasks" not in idle_plan, idle_plan
        print(f"    D1 scan with work due ({found} rows returned): median "
              f"{statistics.median(timings):.2f} ms, max {max(timings):.2f} ms over {scans} "
              f"scans\n      plan: {_plan_facts(plan)}", flush=True)
        print(f"    D1 scan with nothing due: median {statistics.median(idle_scans):.2f} ms"
              f"\n      plan: {_plan_facts(idle_plan)}", flush=True)
        return (statistics.median(timings), max(timings), statistics.median(idle_scans),
                statistics.median(idle))
    finally:
        await queue.close()
        await world.close()


async def memory(base: Settings, total: int, log_dir: Path) -> list[tuple[int, float]]:
    """RSS (MiB) of one worker process at checkpoints up to `total` completed tasks."""
    checkpoints = sorted({p for p in (1_000, 2_000, 5_000, total) if p <= total})
    world = World.open(base, "bmem")
    proc = WorkerProc(world.settings, "mem", log_dir, TICK_02.to_env())
    points: list[tuple[int, float]] = []
    try:
        await prepare_world(world, total)
        proc.start()
        await wait_heartbeats(world.settings, [proc])
        ps = psutil.Process(proc.pid)
        rss0 = ps.memory_info().rss / 2**20
        print(f"    worker started: RSS {rss0:.1f} MiB", flush=True)
        done = 0
        progress = Progress("memory run", total)
        for point in checkpoints:
            await insert_tasks(world, point - done, first=done + 1)

            async def reached(point: int = point) -> bool:
                completed, failed, _ = await ledger_counts(world)
                if failed:
                    raise RuntimeError(f"{failed} task(s) FAILED")
                progress.show(completed)
                return completed >= point

            await wait_until(reached, 120 + (point - done) / 5, f"{point} tasks", interval=0.2,
                             on_timeout=proc.tail)
            done = point
            rss = ps.memory_info().rss / 2**20
            points.append((point, rss))
            print(f"    after {point:>6,} tasks: RSS {rss:.1f} MiB", flush=True)
        code = await proc.stop(30)
        if code != 0:
            raise RuntimeError(f"worker exit code {code}:\n{proc.tail()}")
        return points
    finally:
        stop_all([proc])
        await world.close()


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="100000,1000000",
                        help="comma-separated ledger sizes for the scan")
    parser.add_argument("--memory-tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each part; medians are printed")
    parser.add_argument("--skip-scan", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args(argv)
    base = services.resolve_settings(owner_pid=os.getpid())
    print(f"scale benchmark; machine: {os.cpu_count()} cores; {args.repeat} run(s)",
          flush=True)
    if not args.skip_scan:
        print("(a) dispatcher scan vs ledger size")
        sizes = [int(x) for x in args.rows.split(",") if x.strip()]
        results: dict[int, list[tuple[float, float, float, float]]] = {n: [] for n in sizes}
        for r in range(args.repeat):
            for rows in sizes:
                print(f"  run {r + 1}/{args.repeat}, {rows:,} rows", flush=True)
                results[rows].append(await scan_at(base, rows))
        print(f"    medians of {args.repeat} run(s) (each itself the median of 30 scans):")
        print(f"    {'ledger rows':>12s} {'scan, work due':>15s} {'(max)':>9s} "
              f"{'scan, nothing due':>18s} {'idle tick':>10s}")
        for rows, runs in results.items():
            med, mx, empty, idle = (statistics.median(x) for x in zip(*runs, strict=True))
            print(f"    {rows:>12,} {med:>12.2f} ms {mx:>6.2f} ms {empty:>15.2f} ms "
                  f"{idle:>7.2f} ms")
    if not args.skip_memory:
        print(f"(b) worker process memory, {args.memory_tasks:,} tasks "
              "(half small exports, half reminders)")
        log_dir = Path(tempfile.mkdtemp(prefix="teamdesk-scale-"))
        firsts, lasts, ratios = [], [], []
        for r in range(args.repeat):
            print(f"  run {r + 1}/{args.repeat}", flush=True)
            points = await memory(base, args.memory_tasks, log_dir)
            (n1, first), (n2, last) = points[0], points[-1]
            firsts.append(first)
            lasts.append(last)
            ratios.append(last / first)
            print(f"    RSS after {n1:,} tasks {first:.1f} MiB, after {n2:,} tasks "
                  f"{last:.1f} MiB: ratio {last / first:.3f} ({last - first:+.1f} MiB)",
                  flush=True)
        print(f"    medians of {args.repeat} run(s): RSS after {n1:,} tasks "
              f"{statistics.median(firsts):.1f} MiB, after {n2:,} tasks "
              f"{statistics.median(lasts):.1f} MiB, ratio {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    import logging

    logging.getLogger("teamdesk.dispatcher").setLevel(logging.WARNING)
    raise SystemExit(asyncio.run(main()))
