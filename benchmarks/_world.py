"""What the pipeline benchmark's measurements share: the world they write, the meters they
read, and the child processes they start.

- The world: demo team `acme` (300 tickets) for the exports, team `ops` with one ticket
  per reminder, and the outbox insert of N tasks (O1) — half small EXPORTs (TEAM scope, a
  text filter matching one ticket), half REMINDERs due a minute ago. Its statements are
  `pipeline.sql`, loaded into `SQL` by the product's `load_queries`.
- The meters: the ledger's counts, a progress line on long waits, the machine's busy
  share, CPU seconds of processes and of PostgreSQL backends, dispatch faults (D8) in the
  workers' logs.
- The children: the baseline processes are started as `python -m benchmarks.pipeline
  --role <role>` (the roles are mapped to their mains in `benchmarks.pipeline._entry`) and
  say "ready" / "done N" on stdout.

Used by `benchmarks.pipeline` and its measurement modules, and by `benchmarks.scale`'s
memory run; it imports none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from pathlib import Path

import psutil
from sqlalchemy import text

from labs.procs import WorkerProc, World, wait_heartbeats
from labs.timings import PRODUCTION
from teamdesk.config import Settings
from teamdesk.seed import seed_demo
from teamdesk.tasks.ledger import load_queries
from teamdesk.testing import worker_env

#: The benchmark's own statements (`pipeline.sql`): setup and polling, never the product's.
SQL = load_queries(Path(__file__).with_name("pipeline.sql"))

#: The module whose `--role` command line starts a baseline child (see `start_child`).
CHILD_MODULE = "benchmarks.pipeline"


# ---------------------------------------------------------------- the world


def _reminders(n: int) -> int:
    return n // 2


async def prepare_world(world: World, n: int) -> None:
    """Demo team `acme` (300 tickets) for the exports, team `ops` for the reminders."""
    async with world.sessions() as s:
        await seed_demo(s, team_id="acme", tickets=300)
    async with world.sessions() as s:
        await seed_demo(s, team_id="ops", tickets=0)
    async with world.sessions() as s, s.begin():
        await s.execute(text(SQL["reminder_tickets"]), {"n": _reminders(n)})
        await s.execute(text(SQL["analyze"]))


async def prepared_and_beating(world: World, n: int, procs: list[WorkerProc]) -> None:
    """The world's teams and tickets for `n` tasks (`prepare_world`), then the worker
    processes started, once each has written its heartbeat (built and ticking)."""
    await prepare_world(world, n)
    for w in procs:
        w.start()
    await wait_heartbeats(world.settings, procs)


async def insert_tasks(world: World, n: int, first: int = 1, kind: str | None = None) -> None:
    """The outbox insert of tasks number `first` … `first + n - 1` (reminder g uses the
    g/2-th `ops` ticket, so later batches need `prepare_world` for the whole total); with
    `kind`, only the tasks of that type among them."""
    async with world.sessions() as s, s.begin():
        await s.execute(text(SQL["outbox_tasks"]), {"n": n, "first": first, "kind": kind})


def expected(n: int, kind: str | None) -> tuple[int, int]:
    """(tasks, reminders) that `insert_tasks(n, kind=kind)` writes."""
    reminders = _reminders(n) if kind in (None, "REMINDER") else 0
    exports = n - _reminders(n) if kind in (None, "EXPORT") else 0
    return exports + reminders, reminders


async def ledger_counts(world: World) -> tuple[int, int, int]:
    """(COMPLETED, FAILED, all rows) of the world's ledger."""
    async with world.sessions() as s:
        row = (await s.execute(text(SQL["ledger_counts"]))).one()
    return int(row[0]), int(row[1]), int(row[2])


# ---------------------------------------------------------------- meters


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


def backend_cpu(dbname: str) -> float:
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


def process_cpu(procs: list[psutil.Process]) -> float:
    """CPU seconds (user + system) of `procs` together."""
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def dispatch_faults(procs: list[WorkerProc]) -> int:
    """Dispatch faults (D8) in the workers' logs, e.g. a `deadlock detected`."""
    return sum(w.current_output().count("dispatch.fault") for w in procs)


# ---------------------------------------------------------------- worker processes


def worker_timings(concurrency: int, timings: Settings | None = None) -> dict[str, str]:
    """The workers' environment for a preset (default: production) and a concurrency."""
    return (timings or PRODUCTION).replace(worker_concurrency=concurrency).to_env()


def start_child(role: str, settings: Settings, extra: list[str], concurrency: int = 1
                ) -> subprocess.Popen:
    """A baseline child (`python -m benchmarks.pipeline --role <role> …`) working in
    `settings`' world, with the workers' timings; talk to it with `read_line`."""
    env = worker_env(settings, worker_timings(concurrency))
    return subprocess.Popen([sys.executable, "-m", CHILD_MODULE, "--role", role, *extra],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


async def read_line(p: subprocess.Popen, expect: str, timeout: float = 60) -> str:
    """The child's next stdout line, which must start with `expect`."""
    line = await asyncio.wait_for(asyncio.to_thread(p.stdout.readline), timeout)
    if not line.startswith(expect):
        err = p.stderr.read() if p.poll() is not None else ""
        raise RuntimeError(f"child said {line!r}, expected {expect!r}\n{err}")
    return line


async def all_ready(children: list[subprocess.Popen]) -> None:
    """Until every child said "ready" (its setup done, its clock not started)."""
    for c in children:
        await read_line(c, "ready")
