"""The backlog scenario: how fast a burst of due rows reaches the queue (D8).

N due rows are written at once (the outbox insert, O1) while K real `teamdesk worker`
processes run with the production timings; it reports the seconds until every row is in
the queue (marked `dispatched_at` by D3, or already taken by a worker) and until all are
COMPLETED. Next to it, in the same run, the raw queue: N no-op jobs added one `add` per
job, `DEFAULT_CONCURRENCY` at a time (as the dispatcher adds), while K no-op bullmq
workers (the queue bound's children) drain them — the time of the adds and of the drain.
The ratio backlog-to-queue / raw adds says how close the dispatcher comes to the queue's
speed (D8: a burst drains at the queue's speed, not 100 rows per tick).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text

from benchmarks._world import (
    SQL,
    Busy,
    Progress,
    all_ready,
    dispatch_faults,
    insert_tasks,
    prepared_and_beating,
    worker_timings,
)
from benchmarks.queue_bound import close_noop_side, queue_drained, start_noop_workers
from labs.procs import WorkerProc, World, stop_all
from teamdesk.config import Settings
from teamdesk.tasks.dispatcher import DEFAULT_CONCURRENCY
from teamdesk.testing import wait_until


@dataclass
class BacklogRun:
    """A burst of N due rows through K `teamdesk worker` processes (production timings),
    next to N raw no-op adds through the same queue and K no-op workers, same run."""

    n: int
    workers: int
    #: Seconds from the outbox insert until every row is in the queue (D3's mark, or
    #: already taken by a worker), and until every row is COMPLETED.
    queued_s: float = 0.0
    completed_s: float = 0.0
    #: Seconds for N `add` calls, `DEFAULT_CONCURRENCY` at a time, and until no-op
    #: workers had drained them.
    raw_add_s: float = 0.0
    raw_drain_s: float = 0.0
    busy: float = 0.0
    raw_busy: float = 0.0
    faults: int = 0

    @property
    def ratio(self) -> float:
        """Backlog to queue / raw adds (D8: at the queue's speed means close to 1)."""
        return self.queued_s / self.raw_add_s if self.raw_add_s else float("inf")


async def measure_backlog(base: Settings, n: int, k: int, log_dir: Path,
                          concurrency: int = 1) -> BacklogRun:
    """N due rows at once, K real `teamdesk worker` processes with the production timings:
    the seconds until all are in the queue and until all are COMPLETED."""
    run = BacklogRun(n=n, workers=k)
    world = World.open(base, "bbacklog")
    procs = [WorkerProc(world.settings, f"b{k}w{i + 1}", log_dir, worker_timings(concurrency))
             for i in range(k)]
    try:
        await prepared_and_beating(world, n, procs)
        progress = Progress(f"backlog of {n:,}, {k} worker process(es)", n)
        busy = Busy()
        t0 = time.perf_counter()
        await insert_tasks(world, n)

        async def all_done() -> bool:
            async with world.sessions() as s:
                queued, completed, failed = (await s.execute(text(SQL["in_queue"]))).one()
            if failed:
                raise RuntimeError(f"{failed} task(s) FAILED in the backlog benchmark")
            if queued == n and not run.queued_s:
                run.queued_s = time.perf_counter() - t0
                print(f"      … all {n:,} rows in the queue after {run.queued_s:.1f} s",
                      flush=True)
            progress.show(completed)
            return completed == n

        await wait_until(all_done, 120 + n / 5, f"{n} backlog tasks to complete",
                         interval=0.1, on_timeout=lambda: "\n".join(
                             f"--- {w.name}\n{w.tail()}" for w in procs))
        run.completed_s = time.perf_counter() - t0
        run.busy = busy.share()
        run.faults = dispatch_faults(procs)
        codes = [await w.stop(30) for w in procs]
        if any(c != 0 for c in codes):
            raise RuntimeError(f"worker exit codes {codes}")
    finally:
        stop_all(procs)
        await world.close()
    await measure_raw_adds(base, run, concurrency)
    return run


async def measure_raw_adds(base: Settings, run: BacklogRun, concurrency: int = 1) -> None:
    """The queue's own speed for the same burst: N no-op jobs, one `add` each,
    `DEFAULT_CONCURRENCY` at a time (as the dispatcher adds), while K raw no-op bullmq
    workers drain them; fills `run.raw_add_s` and `run.raw_drain_s`."""
    from teamdesk.tasks.queue import JOB_NAME, create_task_queue

    n = run.n
    world = World.open(base, "braw")
    queue = create_task_queue(world.settings)
    children: list[subprocess.Popen] = []
    try:
        children = start_noop_workers(world.settings, run.workers, concurrency)
        await all_ready(children)
        busy = Busy()
        t0 = time.perf_counter()
        pending = iter(range(n))

        async def lane() -> None:
            for j in pending:  # shared iterator: each job is added by exactly one lane
                await queue.add(JOB_NAME, {"taskId": f"R{j}", "run": 0}, {"jobId": f"R{j}-0"})

        await asyncio.gather(*(lane() for _ in range(DEFAULT_CONCURRENCY)))
        run.raw_add_s = time.perf_counter() - t0
        await wait_until(lambda: queue_drained(queue), 60 + n / 20, f"{n} raw no-op jobs",
                         interval=0.05)
        run.raw_drain_s = time.perf_counter() - t0
        run.raw_busy = busy.share()
    finally:
        await close_noop_side(children, queue, world)
