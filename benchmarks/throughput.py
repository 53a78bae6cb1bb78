"""The pipeline's throughput: tasks/s from the outbox insert to COMPLETED, with real worker
processes, and the CPU each task costs.

K real `teamdesk worker` subprocesses (each with its own dispatch tick, so duplicate
dispatch happens as in production, D5) work in a fresh cloned database and queue prefix.
N tasks — half small EXPORTs, half REMINDERs due a minute ago (`benchmarks._world`) — are
written to the ledger by one INSERT … SELECT (the outbox insert, O1); the clock runs from
just before that insert until the ledger shows all N COMPLETED (polled every 0.1 s). The
CPU of the worker processes and of the PostgreSQL backends serving the world's database
is divided by N; the machine's busy share says how much other work moved the figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from sqlalchemy import text

from benchmarks._world import (
    SQL,
    Busy,
    Progress,
    backend_cpu,
    dispatch_faults,
    expected,
    insert_tasks,
    ledger_counts,
    prepared_and_beating,
    process_cpu,
    worker_timings,
)
from labs.procs import WorkerProc, World, stop_all
from labs.timings import PRODUCTION
from teamdesk.config import Settings
from teamdesk.testing import wait_until


@dataclass
class PipelineRun:
    rate: float
    #: CPU per task, milliseconds: all worker processes together, and the PostgreSQL
    #: backends serving this world's database.
    worker_ms: float
    postgres_ms: float
    #: Share of the whole machine's CPU that was busy (anyone's work, noise included).
    busy: float
    #: Dispatch faults (D8) logged by the worker processes during the run.
    faults: int = 0


async def measure_pipeline(base: Settings, n: int, k: int, log_dir: Path,
                           concurrency: int = 1, kind: str | None = None,
                           timings: Settings | None = None,
                           label: str = "pipeline") -> PipelineRun:
    """N tasks by K real `teamdesk worker` processes: tasks/s and CPU per task. With
    `kind` ("EXPORT" or "REMINDER") only that half of the N is written, so the CPU per
    task is that kind's. `timings`: the workers' timings preset (default: none,
    the production defaults)."""
    total, reminders = expected(n, kind)
    world = World.open(base, "bpipe")
    tag = "p" if timings is None or timings == PRODUCTION else "o"
    procs = [WorkerProc(world.settings, f"{tag}{k}w{i + 1}-{kind or 'mixed'}", log_dir,
                        worker_timings(concurrency, timings)) for i in range(k)]
    try:
        await prepared_and_beating(world, n, procs)
        progress = Progress(f"{label}, {k} worker process(es)", n)
        dbname = world.settings.database_url.rsplit("/", 1)[1]
        ps = [psutil.Process(w.pid) for w in procs]
        cpu0, pg0, busy = process_cpu(ps), backend_cpu(dbname), Busy()
        t0 = time.perf_counter()
        await insert_tasks(world, n, kind=kind)

        async def all_completed() -> bool:
            completed, failed, _ = await ledger_counts(world)
            if failed:
                raise RuntimeError(f"{failed} task(s) FAILED in the pipeline benchmark")
            progress.show(completed)
            return completed == total

        await wait_until(all_completed, 120 + n / 5, f"{total} tasks to complete", interval=0.1,
                         on_timeout=lambda: "\n".join(f"--- {w.name}\n{w.tail()}"
                                                      for w in procs))
        elapsed = time.perf_counter() - t0
        cpu1, pg1, busy_share = process_cpu(ps), backend_cpu(dbname), busy.share()
        async with world.sessions() as s:
            notes = (await s.execute(text(SQL["notifications"]))).scalar_one()
        if notes != reminders:
            raise RuntimeError(f"{notes} notifications for {reminders} reminders")
        codes = [await w.stop(30) for w in procs]
        if any(c != 0 for c in codes):
            raise RuntimeError(f"worker exit codes {codes}")
        return PipelineRun(rate=total / elapsed, worker_ms=(cpu1 - cpu0) / total * 1000,
                           postgres_ms=(pg1 - pg0) / total * 1000, busy=busy_share,
                           faults=dispatch_faults(procs))
    finally:
        stop_all(procs)
        await world.close()
