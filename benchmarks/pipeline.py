"""Pipeline benchmark: tasks/s from the outbox insert to COMPLETED, with real worker
processes, next to a queue-bound and a ledger-bound baseline measured in the same run; and
a backlog scenario: how fast a burst of due rows reaches the queue.

    .venv/bin/python -m benchmarks.pipeline [--tasks 5000] [--repeat 3] [--workers 1,2]
                                            [--backlog 10000] [--json PATH] [--profile]

For each worker count K (default 1, then 2), in a fresh cloned database and a fresh queue
prefix each time:

- **queue bound**: K subprocesses each run a raw bullmq `Worker` (the product's worker
  options: concurrency 1, the same fail-fast Redis client) with a no-op processor; N jobs
  are added (`addBulk`, the product's default job options) and the clock stops when no job
  is waiting, delayed or active any more.
- **ledger bound**: K subprocesses, one PostgreSQL connection each, do per task what the
  leased processor writes: the claim UPDATE (P2), one progress UPDATE fenced by the lease
  (P3, P4) and the completion UPDATE fenced by the lease (P5) — raw psycopg, autocommit,
  no reads, no Redis.
- **pipeline**: K real `teamdesk worker` subprocesses (each with its own dispatch tick,
  so duplicate dispatch happens as in production, D5) with the **production timings**
  (3 s tick, a full scan followed at once by the next, D8). N tasks — half small EXPORTs
  (TEAM scope, a text filter matching one ticket of 300), half REMINDERs due a minute ago
  (each for its own ticket of a second team) — are written to the ledger by one INSERT …
  SELECT (the outbox insert); the clock runs from just before that insert until the
  ledger shows all N COMPLETED (polled every 0.1 s).
- **pipeline, 0.2 s tick, one scan per tick**: the same, with the configuration this
  benchmark used before (`TEAMDESK_DISPATCH_TICK_S=0.2` and `TEAMDESK_DISPATCH_BUDGET_S=0`:
  one scan of at most 100 rows per tick, the book's loop), for comparison.

It prints tasks/s, the pipeline's share of the tighter baseline (target: at least 30 %
with the same number of workers), the share of the machine's CPU that was busy (anyone's
work: other work on the machine moves every figure), and the medians over `--repeat` runs.

**Backlog** (`--backlog N`, default 10,000; 0 skips it), once, with the largest K: N due
rows are written at once while K `teamdesk worker` processes run with the production
timings; it reports the seconds until every row is in the queue (marked `dispatched_at`,
or already taken by a worker) and until all are COMPLETED, next to the raw queue in the
same run: N no-op jobs added one `add` per job, 8 at a time (the dispatcher's concurrency),
while K no-op bullmq workers drain them — the time of the adds and of the drain. The
ratio backlog-to-queue / raw adds says how close the dispatcher comes to the queue's
speed (D8: a burst drains at the queue's speed, not 100 rows per tick).

If the throughput target is missed — or with `--profile` — one in-process worker (the
same `create_task_worker` + `DispatchLoop`) runs under cProfile and the summary says where
the time goes. `--json PATH` writes every figure (each run and the medians) as JSON.

Real services (embedded by default, or DATABASE_URL / REDIS_URL). Figures are printed,
never asserted: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import text

from benchmarks._machine import machine_info
from devkit import services
from labs.procs import WorkerProc, World, stop_all, wait_heartbeats, wait_until
from labs.timings import ONE_SCAN_02, PRODUCTION
from teamdesk.config import Settings
from teamdesk.seed import seed_demo
from teamdesk.tasks.dispatcher import DEFAULT_CONCURRENCY
from teamdesk.testing import FakeJob

#: The pipeline's share of the tighter of its two bounds (queue, ledger) it should reach;
#: below it the benchmark prints where the time goes. The worker timings are the
#: production defaults, compared with `labs.timings.ONE_SCAN_02` (a 0.2 s tick with one
#: scan of at most 100 rows per tick: the book's loop, no catch-up).
TARGET = 0.30
#: The hot path's budget: worker CPU per task, each kind.
CPU_TARGET_MS = 4.0

_REMINDER_TICKETS = """
INSERT INTO tickets (team_id, title, creator_id, assignee_id, due_at, version,
                     reminder_revision)
SELECT 'ops', 'Bench reminder ' || g, 'dan', 'ben', now() - interval '1 minute', 1, 1
FROM generate_series(1, :n) AS g
"""

#: The outbox insert: N rows, types alternating, as the services would write them (O1):
#: WAITING, run 0, never dispatched. Exports: TEAM scope by an agent, a text filter that
#: matches exactly one seeded ticket. Reminders: one per `ops` ticket, current revision.
_TASKS = """
WITH rt AS (SELECT id, creator_id, reminder_revision,
                   row_number() OVER (ORDER BY id) AS rn
            FROM tickets WHERE team_id = 'ops')
INSERT INTO background_tasks (type, status, run, owner_id, team_id, ticket_id,
                              reminder_revision, scope, filters, run_at)
SELECT CASE WHEN g % 2 = 0 THEN 'REMINDER'::task_type ELSE 'EXPORT'::task_type END,
       'WAITING', 0,
       CASE WHEN g % 2 = 0 THEN rt.creator_id ELSE 'ben' END,
       CASE WHEN g % 2 = 0 THEN 'ops' ELSE 'acme' END,
       rt.id, rt.reminder_revision,
       CASE WHEN g % 2 = 0 THEN 'OWN'::task_scope ELSE 'TEAM'::task_scope END,
       CASE WHEN g % 2 = 0 THEN '{}'::jsonb
            ELSE jsonb_build_object('text', '#' || (g % 300 + 1) || ')') END,
       now() - interval '1 minute'
FROM generate_series(:first, :first + :n - 1) AS g
LEFT JOIN rt ON g % 2 = 0 AND rt.rn = g / 2
WHERE CAST(:kind AS text) IS NULL
   OR CAST(:kind AS text) = CASE WHEN g % 2 = 0 THEN 'REMINDER' ELSE 'EXPORT' END
"""

_COUNTS = """
SELECT count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'FAILED'),
       count(*) FROM background_tasks
"""


def _reminders(n: int) -> int:
    return n // 2


async def _prepare(world: World, n: int) -> None:
    """Demo team `acme` (300 tickets) for the exports, team `ops` for the reminders."""
    async with world.sessions() as s:
        await seed_demo(s, team_id="acme", tickets=300)
    async with world.sessions() as s:
        await seed_demo(s, team_id="ops", tickets=0)
    async with world.sessions() as s, s.begin():
        await s.execute(text(_REMINDER_TICKETS), {"n": _reminders(n)})
        await s.execute(text("ANALYZE"))


async def _insert_tasks(world: World, n: int, first: int = 1, kind: str | None = None) -> None:
    """The outbox insert of tasks number `first` … `first + n - 1` (reminder g uses the
    g/2-th `ops` ticket, so later batches need `_prepare` for the whole total); with
    `kind`, only the tasks of that type among them."""
    async with world.sessions() as s, s.begin():
        await s.execute(text(_TASKS), {"n": n, "first": first, "kind": kind})


def _expected(n: int, kind: str | None) -> tuple[int, int]:
    """(tasks, reminders) that `_insert_tasks(n, kind=kind)` writes."""
    reminders = _reminders(n) if kind in (None, "REMINDER") else 0
    exports = n - _reminders(n) if kind in (None, "EXPORT") else 0
    return exports + reminders, reminders


async def _counts(world: World) -> tuple[int, int, int]:
    async with world.sessions() as s:
        row = (await s.execute(text(_COUNTS))).one()
    return int(row[0]), int(row[1]), int(row[2])


class Progress:
    """One line per ~2 s on long waits."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.t0 = time.monotonic()
        self.last = self.t0

    def show(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= 2.0:
            self.last = now
            print(f"      … {self.label}: {done:,}/{self.total:,} "
                  f"({done / max(self.total, 1):.0%}) after {now - self.t0:.1f} s", flush=True)


# ---------------------------------------------------------------- pipeline


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


class Busy:
    """The share of the whole machine's CPU that was busy between `__init__` and `share()`
    (anyone's work: other jobs on the machine count too)."""

    def __init__(self) -> None:
        self.t0, self.cpu0 = time.perf_counter(), psutil.cpu_times()

    def share(self) -> float:
        cpu1, elapsed = psutil.cpu_times(), time.perf_counter() - self.t0
        idle = (cpu1.idle - self.cpu0.idle) + (getattr(cpu1, "iowait", 0)
                                               - getattr(self.cpu0, "iowait", 0))
        return max(0.0, min(1.0, 1 - idle / (max(elapsed, 1e-9) * (psutil.cpu_count() or 1))))


def _backend_cpu(dbname: str) -> float:
    """CPU seconds of the PostgreSQL backends connected to `dbname` (by process title)."""
    total = 0.0
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if "postgres" in (proc.info["name"] or "") and dbname in " ".join(
                    proc.info["cmdline"] or []):
                t = proc.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _timings(concurrency: int, timings: Settings | None = None) -> dict[str, str]:
    """The workers' environment for a preset (default: production) and a concurrency."""
    return (timings or PRODUCTION).replace(worker_concurrency=concurrency).to_env()


def _faults(procs: list[WorkerProc]) -> int:
    """Dispatch faults (D8) in the workers' logs, e.g. a `deadlock detected`."""
    return sum(w.current_output().count("dispatch.fault") for w in procs)


async def measure_pipeline(base: Settings, n: int, k: int, log_dir: Path,
                           concurrency: int = 1, kind: str | None = None,
                           timings: Settings | None = None,
                           label: str = "pipeline") -> PipelineRun:
    """N tasks by K real `teamdesk worker` processes: tasks/s and CPU per task. With
    `kind` ("EXPORT" or "REMINDER") only that half of the N is written, so the CPU per
    task is that kind's. `timings`: the workers' timings preset (default: none,
    the production defaults)."""
    total, reminders = _expected(n, kind)
    world = World.open(base, "bpipe")
    tag = "p" if timings is None or timings == PRODUCTION else "o"
    procs = [WorkerProc(world.settings, f"{tag}{k}w{i + 1}-{kind or 'mixed'}", log_dir,
                        _timings(concurrency, timings)) for i in range(k)]
    try:
        await _prepare(world, n)
        for w in procs:
            w.start()
        await wait_heartbeats(world.settings, procs)
        progress = Progress(f"{label}, {k} worker process(es)", n)
        dbname = world.settings.database_url.rsplit("/", 1)[1]
        ps = [psutil.Process(w.pid) for w in procs]
        cpu0, pg0, busy = _cpu(ps), _backend_cpu(dbname), Busy()
        t0 = time.perf_counter()
        await _insert_tasks(world, n, kind=kind)

        async def all_completed() -> bool:
            completed, failed, _ = await _counts(world)
            if failed:
                raise RuntimeError(f"{failed} task(s) FAILED in the pipeline benchmark")
            progress.show(completed)
            return completed == total

        await wait_until(all_completed, 120 + n / 5, f"{total} tasks to complete", interval=0.1,
                         on_timeout=lambda: "\n".join(f"--- {w.name}\n{w.tail()}"
                                                      for w in procs))
        elapsed = time.perf_counter() - t0
        cpu1, pg1, busy_share = _cpu(ps), _backend_cpu(dbname), busy.share()
        async with world.sessions() as s:
            notes = (await s.execute(text("SELECT count(*) FROM notifications"))).scalar_one()
        if notes != reminders:
            raise RuntimeError(f"{notes} notifications for {reminders} reminders")
        codes = [await w.stop(30) for w in procs]
        if any(c != 0 for c in codes):
            raise RuntimeError(f"worker exit codes {codes}")
        return PipelineRun(rate=total / elapsed, worker_ms=(cpu1 - cpu0) / total * 1000,
                           postgres_ms=(pg1 - pg0) / total * 1000, busy=busy_share,
                           faults=_faults(procs))
    finally:
        stop_all(procs)
        await world.close()


# ---------------------------------------------------------------- backlog


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


_IN_QUEUE = """
SELECT count(*) FILTER (WHERE dispatched_at IS NOT NULL OR status <> 'WAITING'),
       count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'FAILED')
  FROM background_tasks
"""


async def measure_backlog(base: Settings, n: int, k: int, log_dir: Path,
                          concurrency: int = 1) -> BacklogRun:
    """N due rows at once, K real `teamdesk worker` processes with the production timings:
    the seconds until all are in the queue and until all are COMPLETED."""
    run = BacklogRun(n=n, workers=k)
    world = World.open(base, "bbacklog")
    procs = [WorkerProc(world.settings, f"b{k}w{i + 1}", log_dir, _timings(concurrency))
             for i in range(k)]
    try:
        await _prepare(world, n)
        for w in procs:
            w.start()
        await wait_heartbeats(world.settings, procs)
        progress = Progress(f"backlog of {n:,}, {k} worker process(es)", n)
        busy = Busy()
        t0 = time.perf_counter()
        await _insert_tasks(world, n)

        async def all_done() -> bool:
            async with world.sessions() as s:
                queued, completed, failed = (await s.execute(text(_IN_QUEUE))).one()
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
        run.faults = _faults(procs)
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
        children = [_child("noop-worker", world.settings, [], concurrency)
                    for _ in range(run.workers)]
        for c in children:
            await _read_line(c, "ready")
        busy = Busy()
        t0 = time.perf_counter()
        pending = iter(range(n))

        async def lane() -> None:
            for j in pending:  # shared iterator: each job is added by exactly one lane
                await queue.add(JOB_NAME, {"taskId": f"R{j}", "run": 0}, {"jobId": f"R{j}-0"})

        await asyncio.gather(*(lane() for _ in range(DEFAULT_CONCURRENCY)))
        run.raw_add_s = time.perf_counter() - t0

        async def drained() -> bool:
            counts = await queue.getJobCounts("waiting", "delayed", "active", "prioritized",
                                              "paused", "failed")
            if counts.get("failed"):
                raise RuntimeError(f"no-op jobs failed: {counts}")
            return sum(counts.values()) == 0

        await wait_until(drained, 60 + n / 20, f"{n} raw no-op jobs", interval=0.05)
        run.raw_drain_s = time.perf_counter() - t0
        run.raw_busy = busy.share()
    finally:
        await _close_noop_side(children, queue, world)


async def _close_noop_side(children: list[subprocess.Popen], queue: Any, world: World) -> None:
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


# ---------------------------------------------------------------- queue bound


async def _noop_worker_main() -> int:
    """Child: a raw bullmq Worker with a no-op processor and the product's options."""
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


def _child(role: str, settings: Settings, extra: list[str], concurrency: int = 1
           ) -> subprocess.Popen:
    env = {**os.environ, **_timings(concurrency), "DATABASE_URL": settings.database_url or "",
           "REDIS_URL": settings.redis_url or "",
           "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix}
    return subprocess.Popen([sys.executable, "-m", "benchmarks.pipeline", "--role", role,
                             *extra], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


async def _read_line(p: subprocess.Popen, expect: str, timeout: float = 60) -> str:
    line = await asyncio.wait_for(asyncio.to_thread(p.stdout.readline), timeout)
    if not line.startswith(expect):
        err = p.stderr.read() if p.poll() is not None else ""
        raise RuntimeError(f"child said {line!r}, expected {expect!r}\n{err}")
    return line


async def measure_queue(base: Settings, n: int, k: int, concurrency: int = 1) -> float:
    """N no-op jobs through K raw bullmq worker processes; returns jobs/s."""
    from teamdesk.tasks.queue import JOB_NAME, create_task_queue

    world = World.open(base, "bqueue")
    queue = create_task_queue(world.settings)
    children: list[subprocess.Popen] = []
    try:
        children = [_child("noop-worker", world.settings, [], concurrency) for _ in range(k)]
        for c in children:
            await _read_line(c, "ready")
        progress = Progress(f"queue bound, {k} process(es)", n)
        t0 = time.perf_counter()
        for i in range(0, n, 1000):
            await queue.addBulk([{"name": JOB_NAME, "data": {"taskId": f"Q{j}", "run": 0},
                                  "opts": {"jobId": f"Q{j}-0"}}
                                 for j in range(i, min(n, i + 1000))])

        async def drained() -> bool:
            counts = await queue.getJobCounts("waiting", "delayed", "active", "prioritized",
                                              "paused", "failed")
            if counts.get("failed"):
                raise RuntimeError(f"no-op jobs failed: {counts}")
            left = sum(counts.values())
            progress.show(n - left)
            return left == 0

        await wait_until(drained, 60 + n / 20, f"{n} no-op jobs", interval=0.05)
        return n / (time.perf_counter() - t0)
    finally:
        await _close_noop_side(children, queue, world)


# ---------------------------------------------------------------- ledger bound

_CLAIM = ("UPDATE background_tasks SET status = 'RUNNING', execution_id = %s, attempts = 1, "
          "progress = 0 WHERE id = %s AND run = 0 AND status IN ('WAITING', 'RUNNING') "
          "RETURNING id")
_PROGRESS = ("UPDATE background_tasks SET progress = 50 WHERE id = %s AND run = 0 AND "
             "execution_id = %s AND status = 'RUNNING'")
_COMPLETE = ("UPDATE background_tasks SET status = 'COMPLETED', progress = 100, "
             "result_csv = %s, result_summary = %s, expires_at = now() + interval '1 day', "
             "execution_id = NULL WHERE id = %s AND run = 0 AND execution_id = %s AND "
             "status = 'RUNNING'")
_CSV = ("id,title,status,priority,creator_id,assignee_id,due_at,created_at\n"
        "17,Login fails with error 500 (#17),OPEN,NORMAL,dan,ben,,2026-01-07T10:28:00+00:00\n")


def _ledger_worker_main(part: int, parts: int) -> int:
    """Child: claim + progress + completion per task over one connection, as fast as it
    goes. Its share: the tasks whose position modulo `parts` is `part`."""
    import uuid

    import psycopg

    url = os.environ["DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute(
            "SELECT id, type FROM background_tasks ORDER BY id").fetchall()]
        mine = ids[part::parts]
        types = dict(conn.execute("SELECT id, type::text FROM background_tasks").fetchall())
        print("ready", flush=True)
        sys.stdin.readline()  # "go"
        done = 0
        for task_id in mine:
            execution_id = str(uuid.uuid4())
            if conn.execute(_CLAIM, (execution_id, task_id)).fetchone() is None:
                continue
            if conn.execute(_PROGRESS, (task_id, execution_id)).rowcount != 1:
                raise RuntimeError(f"progress lost the lease of {task_id}")
            export = types[task_id] == "EXPORT"
            if conn.execute(_COMPLETE, (_CSV if export else None,
                                        "1 tickets exported" if export else "Reminder sent",
                                        task_id, execution_id)).rowcount != 1:
                raise RuntimeError(f"completion lost the lease of {task_id}")
            done += 1
    print(f"done {done}", flush=True)
    return 0


async def measure_ledger(base: Settings, n: int, k: int) -> float:
    """N tasks' lease-conditioned UPDATEs from K processes (one connection each; the
    caller passes workers × concurrency)."""
    world = World.open(base, "bledger")
    children: list[subprocess.Popen] = []
    try:
        await _prepare(world, n)
        await _insert_tasks(world, n)
        children = [_child("ledger-worker", world.settings, ["--part", str(i), "--parts",
                                                             str(k)]) for i in range(k)]
        for c in children:
            await _read_line(c, "ready")
        t0 = time.perf_counter()
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        done = 0
        for c in children:
            done += int((await _read_line(c, "done", timeout=60 + n / 20)).split()[1])
        elapsed = time.perf_counter() - t0
        completed, _, total = await _counts(world)
        if (done, completed, total) != (n, n, n):
            raise RuntimeError(f"ledger baseline: done {done}, COMPLETED {completed} of {n}")
        return n / elapsed
    finally:
        for c in children:
            with contextlib.suppress(Exception):
                c.kill()
                c.wait(5)
        await world.close()


# ---------------------------------------------------------------- profile


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
        await _prepare(world, n)
        # As `teamdesk worker` does: one pool for the worker and the tick.
        ledger = await Ledger.pooled(settings.database_url, size=2)
        worker = await create_task_worker(settings, actor="profiled",
                                          ledger=ledger)
        ticks = DispatchLoop(queue, settings, ledger=ledger)
        ticks.start()
        prof.enable()
        t0 = time.perf_counter()
        await _insert_tasks(world, n)

        async def all_completed() -> bool:
            return (await _counts(world))[0] == n

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
        await _prepare(world, 2 * calls + 80)
        await _insert_tasks(world, 2 * calls + 80)
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
                await conn.execute("SELECT 1")

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


# ---------------------------------------------------------------- main


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


async def _backlog(base: Settings, args: argparse.Namespace, k: int, log_dir: Path) -> Any:
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
                backlog: Any) -> None:
    path.write_text(json.dumps({
        "benchmark": "pipeline", **machine_info(base), "tasks": args.tasks,
        "repeat": args.repeat,
        "workers": counts, "concurrency": args.concurrency, "cores": os.cpu_count(),
        "timings": {"pipeline": _timings(args.concurrency),
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
          + "".join(f", {k}={v}" for k, v in _timings(args.concurrency).items())
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
            return asyncio.run(_noop_worker_main())
        return _ledger_worker_main(a.part, a.parts)
    logging.getLogger("teamdesk").setLevel(logging.WARNING)
    return asyncio.run(main())


if __name__ == "__main__":
    sys.exit(_entry())
