"""The queue bound: how fast the queue alone moves jobs, with nothing behind it.

K child processes each run a raw bullmq `Worker` with the product's worker options
(concurrency, lock duration, stall check, the same fail-fast Redis client) and a no-op
processor; N jobs are added (`addBulk`, the product's default job options) and the clock
stops when no job is waiting, delayed or active any more. No PostgreSQL: the pipeline can
never be faster than this with the same workers, so the pipeline's share of it says what
the ledger, the dispatcher (D1–D8) and the executors cost.

The child is `python -m benchmarks.pipeline --role noop-worker` (`noop_worker_main`); the
backlog scenario (`benchmarks.backlog`) drains its raw adds with the same children.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from typing import Any

from benchmarks._world import Progress, all_ready, start_child
from labs.procs import World
from teamdesk.config import Settings
from teamdesk.testing import wait_until


async def noop_worker_main() -> int:
    """Child: a raw bullmq Worker with a no-op processor and the product's options. Says
    "ready" once both Redis connections are up; stops on SIGTERM."""
    from bullmq import Worker

    from teamdesk.tasks.queue import redis_client

    settings = Settings.from_env()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    async def noop(job, token):
        return "ok"

    worker = Worker(settings.queue_name, noop, {
        "connection": redis_client(settings, blocking=True), "prefix": settings.queue_prefix,
        "autorun": False, "concurrency": settings.worker_concurrency,
        "lockDuration": settings.lock_duration_ms,
        "stalledInterval": settings.stalled_interval_ms,
        "maxStalledCount": settings.max_stalled_count, "drainDelay": 1})
    await worker.blockingRedisConnection.getRedisVersion()
    await worker.redisConnection.getRedisVersion()
    running = asyncio.ensure_future(worker.run())
    print("ready", flush=True)
    await stop.wait()
    closing = asyncio.ensure_future(worker.close())
    done, _ = await asyncio.wait({closing}, timeout=5)
    if not done:
        await asyncio.wait({asyncio.ensure_future(worker.close(force=True))}, timeout=5)
    running.cancel()
    return 0


def start_noop_workers(settings: Settings, k: int, concurrency: int = 1
                       ) -> list[subprocess.Popen]:
    """K no-op worker children on `settings`' queue (wait for them with `all_ready`; stop
    them with `close_noop_side`)."""
    return [start_child("noop-worker", settings, [], concurrency) for _ in range(k)]


async def queue_drained(queue: Any, progress: Progress | None = None) -> bool:
    """No job waiting, delayed, active, prioritized or paused; a failed no-op job is an
    error."""
    counts = await queue.getJobCounts("waiting", "delayed", "active", "prioritized",
                                      "paused", "failed")
    if counts.get("failed"):
        raise RuntimeError(f"no-op jobs failed: {counts}")
    left = sum(counts.values())
    if progress is not None:
        progress.show(progress.total - left)
    return left == 0


async def close_noop_side(children: list[subprocess.Popen], queue: Any, world: World) -> None:
    """SIGTERM the no-op worker processes (killed after 15 s), close the queue and the world."""
    for c in children:
        with contextlib.suppress(Exception):
            c.send_signal(signal.SIGTERM)
    for c in children:
        try:
            c.wait(15)
        except subprocess.TimeoutExpired:
            c.kill()
    with contextlib.suppress(Exception):
        await queue.close()
    await world.close()


async def measure_queue(base: Settings, n: int, k: int, concurrency: int = 1) -> float:
    """N no-op jobs through K raw bullmq worker processes; returns jobs/s."""
    from teamdesk.tasks.queue import JOB_NAME, create_task_queue

    world = World.open(base, "bqueue")
    queue = create_task_queue(world.settings)
    children: list[subprocess.Popen] = []
    try:
        children = start_noop_workers(world.settings, k, concurrency)
        await all_ready(children)
        progress = Progress(f"queue bound, {k} process(es)", n)
        t0 = time.perf_counter()
        for i in range(0, n, 1000):
            await queue.addBulk([{"name": JOB_NAME, "data": {"taskId": f"Q{j}", "run": 0},
                                  "opts": {"jobId": f"Q{j}-0"}}
                                 for j in range(i, min(n, i + 1000))])
        await wait_until(lambda: queue_drained(queue, progress), 60 + n / 20,
                         f"{n} no-op jobs", interval=0.05)
        return n / (time.perf_counter() - t0)
    finally:
        await close_noop_side(children, queue, world)
