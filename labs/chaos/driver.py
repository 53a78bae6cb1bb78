"""The driver of one chaos run: its clock, worker processes, proxies and Redis, and one
method per fault kind (named after the kind in `labs.chaos.kinds.FAULT_KINDS`), plus the
background duties of the window — a supervisor, the waves of new tasks, the snapshots of
COMPLETED rows — and the settle phase after it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from labs.chaos.checker import completed_rows
from labs.chaos.config import ChaosConfig
from labs.chaos.guards import RedisRestart
from labs.chaos.kinds import FAULT_KINDS
from labs.chaos.plan import Spec
from labs.chaos.report import ChaosReport
from labs.chaos.schedule import FaultEvent
from labs.chaos.workload import Expected, create, later_specs
from labs.procs import WorkerProc
from labs.timings import CHAOS_WORKER
from teamdesk.config import Settings


class Driver:
    """One chaos run's live machinery; `run_chaos` builds it and strikes the schedule."""

    def __init__(self, settings: Settings, config: ChaosConfig, report: ChaosReport,
                 out: Callable[[str], None], sessions: async_sessionmaker[AsyncSession],
                 redis: RedisRestart | None) -> None:
        self.settings = settings
        self.config = config
        self.report = report
        self.out = out
        self.sessions = sessions
        #: How the `redis` faults stop and start the run's own server.
        self.restarter = redis
        self.redis_down = False
        self.procs: list[WorkerProc] = []
        self.proxies: list[Any] = []
        self.locks: list[asyncio.Lock] = []
        self.t0 = 0.0
        #: The wall clock at `t0`, to place the workers' log lines in the fault windows.
        self.wall0 = 0.0
        #: (start, end) offsets of Redis outages, for recovery notes.
        self.outages: list[tuple[float, float]] = []

    # ------------------------------------------------------------ the clock, the workers

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, line: str) -> None:
        self.out(f"    {self.now():+7.2f} s  {line}")

    def open_window(self) -> None:
        """Start the run's clock: fault offsets count from here."""
        self.t0, self.wall0 = time.monotonic(), time.time()

    async def _sleep_until(self, offset: float) -> None:
        delay = self.t0 + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the schedule's own clock, not an ordering device

    async def add_workers(self, log_dir: Path, proxy_cls: Any) -> None:
        """The run's worker processes (not started yet), each behind a proxy of its own
        when there are link cuts, through the counterexample's entry when one is on."""
        entry = (["-m", "labs.counterexample_worker", self.config.counterexample]
                 if self.config.counterexample else None)
        for i in range(self.config.workers):
            redis_url = None
            if proxy_cls is not None:
                proxy = await proxy_cls.start(self.settings)
                self.proxies.append(proxy)
                redis_url = proxy.url
            self.procs.append(WorkerProc(self.settings, f"w{i + 1}", log_dir,
                                         CHAOS_WORKER.to_env(), redis_url=redis_url,
                                         entry=entry))
            self.locks.append(asyncio.Lock())

    async def start_redis(self) -> None:
        if self.restarter is not None:
            await self.restarter.start()
        self.redis_down = False

    async def running(self) -> int:
        """RUNNING rows in the ledger right now (how many executions a fault may hit)."""
        async with self.sessions() as s:
            return int((await s.execute(text(
                "SELECT count(*) FROM background_tasks WHERE status = 'RUNNING'"))).scalar_one())

    # ------------------------------------------------------------ the faults, one per kind

    async def fault(self, ev: FaultEvent) -> None:
        """Strike `ev` at its offset, through the method named after its kind."""
        await self._sleep_until(ev.at)
        busy = await self.running() if FAULT_KINDS[ev.kind].target != "server" else 0
        await getattr(self, ev.kind)(ev, busy)

    async def redis(self, ev: FaultEvent, busy: int) -> None:
        """Stop the run's own Redis, start it again (empty) after the hold."""
        assert self.restarter is not None
        started = self.now()
        self.redis_down = True
        await self.restarter.stop()
        self.note(f"redis stopped ({self.now() - started:.2f} s to stop); start again "
                  f"in {ev.hold:.2f} s")
        try:
            await asyncio.sleep(ev.hold)
        finally:
            await self.start_redis()
        self.outages.append((started, self.now()))
        self.report.timeline.append((started, self.now(), "redis", "redis"))
        self.note(f"redis started again (empty); unavailable for {self.now() - started:.2f} s")
        self.report.executed["redis"] += 1

    async def cut(self, ev: FaultEvent, busy: int) -> None:
        """Cut one worker's Redis link (its proxy), heal it after the hold."""
        assert ev.worker is not None
        w, proxy = self.procs[ev.worker], self.proxies[ev.worker]
        n = await proxy.cut()
        cut_at = self.now()
        self.report.struck_running[ev.kind] += 1 if busy else 0
        self.note(f"cut {w.name}'s Redis link ({n} connection(s), {busy} task(s) RUNNING) "
                  f"for {ev.hold:.2f} s")
        try:
            await asyncio.sleep(ev.hold)
        finally:
            await proxy.heal()
            self.report.timeline.append((cut_at, self.now(), w.name, "cut"))
        self.note(f"healed {w.name}'s Redis link")
        self.report.executed["cut"] += 1

    async def sigkill(self, ev: FaultEvent, busy: int) -> None:
        """SIGKILL a worker (no drain), restart it after the hold."""
        async with self._process_fault(ev, busy) as w:
            if w is None:
                return
            pid = w.pid
            w.send(signal.SIGKILL)
            code = await w.wait_exit(10)
            self.note(f"SIGKILL {w.name} (pid {pid}): exit {code}")
            await self._restart_after(w, ev.hold)

    async def sigterm(self, ev: FaultEvent, busy: int) -> None:
        """SIGTERM a worker: it must drain and exit 0, or 3 after its drain timeout (W4);
        restart it after the hold."""
        async with self._process_fault(ev, busy) as w:
            if w is None:
                return
            pid = w.pid
            w.send(signal.SIGTERM)
            code = await w.wait_exit(CHAOS_WORKER.drain_timeout_s + 8)
            if code is None:
                w.kill()
                code = w.p.returncode if w.p else None
                self.report.notes.append(f"{w.name} ignored SIGTERM; killed")
            self.note(f"SIGTERM {w.name} (pid {pid}): exit {code}")
            if code == -signal.SIGTERM:
                # Still importing: its handler (installed before it takes any job) was not
                # there yet. Nothing can have been running.
                self.report.notes.append(f"{w.name} got SIGTERM while still starting "
                                         "(exit -15, before its drain handler existed)")
            elif code not in (0, 3) and not w.started_up:
                self.report.findings.append(
                    f"{w.name} exited {code} before it had started (the SIGTERM met a "
                    f"start that was failing anyway): {w.tail(1).strip()[:160]}")
            elif code not in (0, 3):
                self.report.violate(f"{w.name} exited {code} after SIGTERM; expected 0 or "
                                    "3 (W4)")
            await self._restart_after(w, ev.hold)

    async def sigstop(self, ev: FaultEvent, busy: int) -> None:
        """Freeze a worker past its lock, SIGCONT after the hold: the job stalls, another
        worker may take it over, and the frozen executor's late writes must match nothing
        (P3, P6)."""
        async with self._process_fault(ev, busy) as w:
            if w is None:
                return
            w.send(signal.SIGSTOP)
            try:
                await asyncio.sleep(ev.hold)
            finally:
                w.send(signal.SIGCONT)
            self.note(f"SIGCONT {w.name} (pid {w.pid}) after {ev.hold:.2f} s frozen")

    @contextlib.asynccontextmanager
    async def _process_fault(self, ev: FaultEvent, busy: int
                             ) -> AsyncIterator[WorkerProc | None]:
        """A fault on a worker process, holding that worker's lock: yields the worker, or
        None (counted as skipped) when an earlier fault still has it down; the span goes
        to the swimlanes and the strike is counted once the body is done."""
        assert ev.worker is not None
        w, lock = self.procs[ev.worker], self.locks[ev.worker]
        if lock.locked() or not w.alive:
            self.report.skipped[ev.kind] += 1
            self.note(f"{ev.kind} {w.name} skipped: an earlier fault still has it down")
            yield None
            return
        async with lock:
            struck_at = self.now()
            self.report.struck_running[ev.kind] += 1 if busy else 0
            self.note(f"{ev.kind} {w.name} with {busy} task(s) RUNNING in the ledger")
            yield w
            self.report.timeline.append((struck_at, self.now(), w.name, ev.kind))
        self.report.executed[ev.kind] += 1

    async def _restart_after(self, w: WorkerProc, hold: float) -> None:
        await asyncio.sleep(hold)
        w.start()
        self.note(f"restarted {w.name} (pid {w.pid})")

    # ------------------------------------------------------------ during the window

    async def supervise(self, stop: asyncio.Event) -> None:
        """Like a process supervisor: a worker that exits by itself (not by a fault of
        ours) is restarted after 0.5 s; each such exit is a finding."""
        while not stop.is_set():
            for w, lock in zip(self.procs, self.locks, strict=True):
                if lock.locked() or w.alive or w.p is None:
                    continue
                async with lock:
                    code = w.p.returncode
                    last = (w.tail(1) or "?").strip()[:160]
                    when = "while starting" if not w.started_up else "while running"
                    self.note(f"{w.name} exited by itself {when} (exit {code}): {last}")
                    self.report.findings.append(
                        f"{w.name} exited by itself {when} with code {code} at "
                        f"+{self.now():.2f} s; last log line: {last}")
                    await asyncio.sleep(0.5)
                    w.start()
                    self.note(f"restarted {w.name} (pid {w.pid}) as a supervisor would")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    async def waves(self, plan: list[Spec], upfront: int, expected: Expected) -> None:
        """The rest of the plan in waves across the fault window (PostgreSQL only, O4)."""
        later = later_specs(plan, upfront)
        waves = max(1, self.config.waves)
        per = -(-len(later) // waves) if later else 0
        for i in range(waves):
            chunk = later[i * per:(i + 1) * per]
            if not chunk:
                break
            await self._sleep_until(self.config.duration * (i + 0.5) / waves)
            n = 0
            for spec in chunk:
                n += await create(self.sessions, spec, expected)
            self.note(f"wave {i + 1}: {n} task(s) created through the services")

    async def snapshots(self, stop: asyncio.Event) -> None:
        """A snapshot of the COMPLETED rows every second until `stop`."""
        while not stop.is_set():
            await self.snapshot()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    async def snapshot(self) -> None:
        """Remember each COMPLETED row as first seen (P1, D3, P12: it must not change)."""
        rows = await completed_rows(self.sessions, skip=set(self.report.completed_seen))
        for task_id, row in rows.items():
            self.report.completed_seen.setdefault(task_id, row)
        self.report.snapshots += 1
        if self.t0:
            self.report.completions.append((self.now(), len(self.report.completed_seen)))

    # ------------------------------------------------------------ after the window

    async def restore(self) -> None:
        """After the window: Redis up, every link healed, every worker running."""
        if self.redis_down:
            await self.start_redis()
        for proxy in self.proxies:
            if proxy.is_cut:
                await proxy.heal()
        for w, lock in zip(self.procs, self.locks, strict=True):
            async with lock:
                if not w.alive:
                    w.start()
                    self.note(f"restarted {w.name} for the settle phase")

    async def settle(self, total: int) -> tuple[bool, float]:
        """Poll the ledger (bounded by `config.settle`) until every task is terminal:
        (settled?, seconds it took)."""
        started = time.monotonic()
        last = 0.0
        while True:
            async with self.sessions() as s:
                counts = dict((await s.execute(text(
                    "SELECT status::text, count(*) FROM background_tasks GROUP BY 1"))).all())
            open_ = counts.get("WAITING", 0) + counts.get("RUNNING", 0)
            elapsed = time.monotonic() - started
            if open_ == 0 and sum(counts.values()) >= total:
                self.note(f"settled after {elapsed:.1f} s: {counts}")
                return True, elapsed
            if elapsed > self.config.settle:
                self.note(f"NOT settled after {elapsed:.1f} s: {counts}")
                return False, elapsed
            if elapsed - last >= 2.0:
                last = elapsed
                self.note(f"settling … {counts}")
            await asyncio.sleep(0.1)  # poll interval of an external state

    async def all_started(self, timeout: float) -> None:
        """Before the final SIGTERM: every worker running and past its start (bounded), so
        the drain is tested on a worker that could drain."""
        for w in self.procs:
            if not w.alive:
                w.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(w.started_up or not w.alive for w in self.procs):
                return
            await asyncio.sleep(0.05)  # poll interval of an external state

    async def final_stop(self) -> None:
        """SIGTERM every worker; judge each exit code (W4: 0, or 3 after the drain
        timeout); what is not the product's doing is a finding, not a violation."""
        codes = [await w.stop(15) for w in self.procs]
        self.out(f"  workers stopped (SIGTERM): exit codes {codes}")
        for w, code in zip(self.procs, codes, strict=True):
            if code == 0:
                continue
            if not w.started_up:
                self.report.findings.append(
                    f"{w.name} had not finished starting when the final SIGTERM came "
                    f"(exit {code}): {w.tail(1).strip()[:160]}")
            elif code == 3 and self.report.settled:
                self.report.findings.append(
                    f"{w.name} exited 3 (drain timeout, 'running job abandoned') on the final "
                    "SIGTERM although no task was RUNNING: its bullmq worker did not close "
                    "within the drain timeout (after a Redis outage the Python port sleeps "
                    "runRetryDelay, 15 s by default, before it notices the close)")
            else:
                self.report.violate(f"{w.name} exited {code} on the final SIGTERM "
                                    "(W4 expects 0, or 3 after the drain timeout)")

    def logs(self) -> dict[str, str]:
        """Each worker's whole log (every start), by name."""
        return {w.name: w.output() for w in self.procs}
