"""Dispatcher benchmark: scan cost on a big ledger, and drain throughput vs raw adds.

    .venv/bin/python -m benchmarks.dispatch [--rows 100000] [--drain 5000]

(a) A cloned database is filled with `--rows` ledger rows (mostly COMPLETED, a few
    thousand WAITING: never dispatched, checked long ago, checked just now) by one
    INSERT … SELECT generate_series. It prints the D1 scan's time per tick, the time of a
    whole idle tick (scan + D6 + D7 on that ledger), and the scan's EXPLAIN plan, and
    asserts the plan reads `background_tasks` through an index (no Seq Scan).
(b) With `--drain` WAITING tasks, it drains them with `dispatch_tasks` (ticks until the
    scan is empty) and compares tasks/s with raw sequential `queue.add` of as many jobs in
    the same run (target: dispatcher ≥ 50 % of raw). The book's strictly sequential loop
    (concurrency 1) is shown too.

Real services (embedded by default, or DATABASE_URL / REDIS_URL). Figures are printed,
never asserted: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from devkit import services
from labs.procs import World, clear_prefix
from teamdesk.config import Settings
from teamdesk.db.engine import create_engine
from teamdesk.tasks.dispatcher import DEFAULT_CONCURRENCY, dispatch_tasks, scan
from teamdesk.tasks.ledger import QUERIES, Ledger, load_queries
from teamdesk.tasks.queue import JOB_NAME, create_task_queue

#: The benchmark's own statements (`dispatch.sql`; `benchmarks.scale` uses them too).
SQL = load_queries(Path(__file__).with_name("dispatch.sql"))


async def _explain(database_url: str, settings: Settings) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the D1 scan (statement `scan`, both halves), with the
    values a tick binds."""
    values = {"limit": settings.dispatch_batch_size, "age_s": float(settings.redispatch_age_s)}
    async with Ledger(database_url).connection() as conn:
        rows = await (await conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + QUERIES["scan"], values)).fetchall()
    return "\n".join(r[0] for r in rows)


async def timed_scans(database_url: str, settings: Settings, n: int) -> tuple[list[float], int]:
    """`n` D1 scans on one connection (prepared after the first few, as in a worker
    process): their times in ms and how many rows the last returned."""
    timings, found = [], 0
    async with Ledger(database_url).connection() as conn:
        for _ in range(n):
            t0 = time.perf_counter()
            found = len(await scan(conn, settings))
            timings.append((time.perf_counter() - t0) * 1000)
    return timings, found


async def _fill(database_url: str, rows: int) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            for name in ("team", "team_member"):
                await conn.execute(text(SQL[name]))
            await conn.execute(text(SQL["fill"]), {"rows": rows})
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(SQL["vacuum_ledger"]))
    finally:
        await engine.dispose()


async def scan_benchmark(base: Settings, rows: int, ticks: int = 30) -> None:
    """(a): the scan on a ledger of `rows` rows must stay an index read."""
    world = World.open(base, "bench")
    settings, sessions = world.settings, world.sessions
    url = settings.database_url
    queue = create_task_queue(settings)
    try:
        started = time.perf_counter()
        await _fill(url, rows)
        print(f"(a) filled {rows:,} ledger rows in {time.perf_counter() - started:.1f} s")
        async with sessions() as s:
            counts = dict((await s.execute(text(SQL["status_counts"]))).all())
            due = (await s.execute(text(SQL["due_count"]))).scalar_one()
        print(f"    by status: {counts}; WAITING and due for a (re)check: {due:,}")

        timings, found = await timed_scans(url, settings, ticks)
        print(f"    D1 scan ({found} rows returned): median {statistics.median(timings):.2f}"
              f" ms, max {max(timings):.2f} ms over {ticks} scans")

        plan = await _explain(url, settings)
        print("    EXPLAIN (ANALYZE, BUFFERS) of the scan:")
        print("      " + plan.replace("\n", "\n      "))
        assert "Seq Scan on background_tasks" not in plan, "the D1 scan must not seq-scan"
        assert "ix_background_tasks_undispatched" in plan, "the D1 scan must use its index"

        # An idle tick on the same ledger: nothing due (all WAITING rows checked just now),
        # so this is scan + D6 + D7 only.
        async with sessions() as s, s.begin():
            await s.execute(text(SQL["mark_all_checked"]))
        idle = []
        for _ in range(ticks):
            t0 = time.perf_counter()
            report = await dispatch_tasks(queue, settings)
            idle.append((time.perf_counter() - t0) * 1000)
        assert report.scanned == 0
        print(f"    idle tick (scan + D6 recovery + D7 purge, nothing due): median "
              f"{statistics.median(idle):.2f} ms")
        late_plan = await _explain(url, settings)
        assert "Seq Scan on background_tasks" not in late_plan
        print("    scan plan with nothing due:")
        print("      " + late_plan.replace("\n", "\n      "))
    finally:
        await queue.close()
        await world.close()


async def _waiting_tasks(sessions: async_sessionmaker[AsyncSession], n: int) -> None:
    async with sessions() as s, s.begin():
        await s.execute(text(SQL["clear_ledger"]))
        await s.execute(text(SQL["waiting_tasks"]), {"n": n})


async def drain_benchmark(base: Settings, n: int) -> None:
    """(b): a full drain by the dispatcher vs raw sequential adds of as many jobs."""
    world = World.open(base, "bench")
    settings, engine, sessions = world.settings, world.engine, world.sessions
    queue = create_task_queue(settings)
    try:
        async with engine.begin() as conn:
            for name in ("team", "team_member"):
                await conn.execute(text(SQL[name]))
        await queue.add(JOB_NAME, {"warm": True}, {"jobId": "warm-up"})  # load scripts
        await queue.getJob("warm-up")
        await clear_prefix(settings)

        t0 = time.perf_counter()
        for i in range(n):
            await queue.add(JOB_NAME, {"taskId": f"R{i}", "run": 0}, {"jobId": f"R{i}-0"})
        raw = n / (time.perf_counter() - t0)
        await clear_prefix(settings)
        t0 = time.perf_counter()
        await queue.addBulk([{"name": JOB_NAME, "data": {"taskId": f"R{i}", "run": 0},
                              "opts": {"jobId": f"R{i}-0"}} for i in range(n)])
        bulk = n / (time.perf_counter() - t0)
        await clear_prefix(settings)

        print(f"(b) draining {n:,} WAITING tasks (batch {settings.dispatch_batch_size})")
        print(f"    raw sequential queue.add:          {raw:8.0f} jobs/s")
        print(f"    raw queue.addBulk (one pipeline):  {bulk:8.0f} jobs/s   (context only)")
        for concurrency in (1, DEFAULT_CONCURRENCY):
            await _waiting_tasks(sessions, n)
            added = ticks = 0
            t0 = time.perf_counter()
            while True:
                report = await dispatch_tasks(queue, settings,
                                              concurrency=concurrency)
                if report.scanned == 0:
                    break
                added += report.added
                ticks += 1
            rate = added / (time.perf_counter() - t0)
            async with sessions() as s:
                left = (await s.execute(text(SQL["undispatched_count"]))).scalar_one()
            jobs = sum((await queue.getJobCounts("waiting")).values())
            assert (added, left, jobs) == (n, 0, n), (added, left, jobs)
            label = "book-like sequential" if concurrency == 1 else "default"
            print(f"    dispatch_tasks, concurrency {concurrency} ({label}): {rate:8.0f} "
                  f"tasks/s in {ticks} ticks = {rate / raw:.0%} of raw add")
            await clear_prefix(settings)
    finally:
        await queue.close()
        await world.close()


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--drain", type=int, default=5_000)
    args = parser.parse_args(argv)
    base = services.resolve_settings(owner_pid=os.getpid())
    await scan_benchmark(base, args.rows)
    print()
    await drain_benchmark(base, args.drain)


if __name__ == "__main__":
    import logging

    logging.getLogger("teamdesk.dispatcher").setLevel(logging.WARNING)
    asyncio.run(main())
