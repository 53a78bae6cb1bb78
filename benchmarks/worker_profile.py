"""Where a worker's time goes, printed when the pipeline misses its target (or with
`--profile`): nothing here is a figure the JSON keeps.

- `profile_worker`: one in-process worker — the same `create_task_worker` + `DispatchLoop`
  as `teamdesk worker`, production timings, one pool for both — completes N tasks under
  cProfile; own time by package, then the top functions.
- `call_costs`: CPU and wall time of one call of each ledger step a task makes (the claim,
  P2; the export's start, X1; a fenced progress write, P4; a whole `process_task` of each
  kind), on the product's own functions, no Redis.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import pstats
import time

from benchmarks._world import SQL, insert_tasks, ledger_counts, prepare_world
from labs.procs import World
from teamdesk.config import Settings
from teamdesk.testing import FakeJob, wait_until

#: Own time goes to the first bucket with a needle in `file:function` (else "other").
_BUCKETS = (
    ("waiting for I/O (event loop idle: PostgreSQL/Redis round trips)",
     ("select.epoll", "selectors.py")),
    ("sqlalchemy", ("sqlalchemy",)),
    ("psycopg", ("psycopg",)),
    ("bullmq", ("bullmq",)),
    ("redis client", ("/redis/",)),
    ("asyncio machinery", ("asyncio",)),
    ("logging", ("logging",)),
    ("teamdesk", ("teamdesk",)),
    ("uuid/json/csv/other stdlib", ("uuid", "json", "csv", "enum", "re.py", "typing")),
)


def _bucket(filename: str, func: str) -> str:
    where = f"{filename}:{func}"
    for label, needles in _BUCKETS:
        if any(x in where for x in needles):
            return label
    return "other"


async def profile_worker(base: Settings, n: int) -> None:
    """One in-process worker (create_task_worker + DispatchLoop, production timings) under
    cProfile for `n` tasks: total (own) time by package, then the top functions."""
    from teamdesk.tasks.dispatch_loop import DispatchLoop
    from teamdesk.tasks.ledger import Ledger
    from teamdesk.tasks.queue import create_task_queue
    from teamdesk.tasks.worker import create_task_worker

    world = World.open(base, "bprof")
    settings = world.settings
    queue = create_task_queue(settings)
    worker = None
    ledger = None
    prof = cProfile.Profile()
    # Log like `teamdesk worker` does (INFO lines, here into memory that is dropped).
    import logging

    logger = logging.getLogger("teamdesk")
    sink = logging.StreamHandler(io.StringIO())
    sink.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(sink)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        await prepare_world(world, n)
        # As `teamdesk worker` does: one pool for the worker and the tick.
        ledger = await Ledger.pooled(settings.database_url, size=2)
        worker = await create_task_worker(settings, actor="profiled",
                                          ledger=ledger)
        ticks = DispatchLoop(queue, settings, ledger=ledger)
        ticks.start()
        prof.enable()
        t0 = time.perf_counter()
        await insert_tasks(world, n)

        async def all_completed() -> bool:
            return (await ledger_counts(world))[0] == n

        await wait_until(all_completed, 120 + n / 5, f"{n} profiled tasks", interval=0.1)
        elapsed = time.perf_counter() - t0
        prof.disable()
    finally:
        logger.removeHandler(sink)
        logger.setLevel(level)
        if worker is not None:
            await ticks.stop()
            await worker.close(timeout=5)
        if ledger is not None:
            await ledger.close()
        with contextlib.suppress(Exception):
            await queue.close()
        await world.close()

    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # own time of every function
    by: dict[str, float] = {}
    for (filename, _line, func), v in stats.stats.items():
        by[_bucket(filename, func)] = by.get(_bucket(filename, func), 0.0) + v[2]
    print(f"\n  profile: one in-process worker, {n:,} tasks in {elapsed:.1f} s "
          f"({n / elapsed:.0f} tasks/s under cProfile, which slows Python code down)")
    print("  own time by package (share of profiled time):")
    for label, secs in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"    {secs / total:6.1%}  {secs:6.2f} s  {label}")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    print("  top functions by own time:")
    for ln in lines[start:start + 19]:
        print("    " + ln[:150])


async def call_costs(base: Settings, calls: int = 300) -> None:
    """CPU and wall time of one call of each ledger step a task makes, measured on the
    product's own functions in this process (no Redis): the named statements of
    `teamdesk/tasks/queries.sql` on one pooled psycopg connection (the hot path's shape)."""
    from sqlalchemy import select

    from teamdesk.db.models import BackgroundTask, TaskType
    from teamdesk.tasks.exports import authorize_and_start
    from teamdesk.tasks.lease import claim, leased_update
    from teamdesk.tasks.ledger import Ledger
    from teamdesk.tasks.processor import TaskContext, process_task

    world = World.open(base, "bcost")
    ledger = await Ledger.pooled(world.settings.database_url, size=1)
    try:
        await prepare_world(world, 2 * calls + 80)
        await insert_tasks(world, 2 * calls + 80)
        ctx = TaskContext(settings=world.settings, actor="cost",
                          ledger=ledger)
        async with world.sessions() as s:
            rows = (await s.execute(select(BackgroundTask.id, BackgroundTask.type)
                                    .order_by(BackgroundTask.id))).all()
        exports = [r[0] for r in rows if r[1] is TaskType.EXPORT]
        reminders = [r[0] for r in rows if r[1] is TaskType.REMINDER]
        async with ledger.connection() as conn:
            lease, sample = await claim(conn, exports[-2], 0, 1)

        async def raw() -> None:
            async with ledger.connection() as conn:
                await conn.execute(SQL["ping"])

        async def auth() -> None:
            async with ledger.connection() as conn:
                await authorize_and_start(ctx, conn, sample)

        async def progress() -> None:
            async with ledger.connection() as conn:
                await leased_update(conn, lease, "progress", progress=5)

        async def claim_again() -> None:
            async with ledger.connection() as conn:
                await claim(conn, exports[-3], 0, 1)

        print("\n  cost of one call in the worker's stack (psycopg 3 async pool, named "
              f"statements, auto-prepared; mean of {calls} calls after 20 warm-up calls):")
        print(f"    {'call':58s} {'CPU ms':>7s} {'wall ms':>8s}")

        async def timed(label: str, fn, n: int) -> None:
            for _ in range(20):
                await fn()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                await fn()
            print(f"    {label:58s} {(time.process_time() - c0) / n * 1000:7.2f} "
                  f"{(time.perf_counter() - t0) / n * 1000:8.2f}")

        await timed("pool checkout + SELECT 1", raw, calls)
        await timed("claim UPDATE … RETURNING, P2", claim_again, calls)
        await timed("export_start (member + count + first batch, one query), X1", auth, calls)
        await timed("progress write with the lease, P4", progress, calls)

        def per_task(ids: list[str]):
            pending = iter(ids)

            async def one() -> None:
                await process_task(FakeJob(next(pending)), None, ctx)

            return one

        await timed("process_task, small export (one connection, no Redis)",
                    per_task(exports[:calls]), calls - 20)
        await timed("process_task, reminder (one connection, no Redis)",
                    per_task(reminders[:calls]), calls - 20)
    finally:
        await ledger.close()
        await world.close()
