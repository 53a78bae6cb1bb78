"""The driver of one chaos run: its clock, worker processes, proxies and Redis, and one
method per fault kind (named after the kind in `labs.chaos.kinds.FAULT_KINDS`), plus the
background duties of the window — a supervisor, the waves of new tasks, the snapshots of
COMPLETED rows — and the settle phase after it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from labs import statements
from labs.chaos.checker import completed_rows
from labs.chaos.config import ChaosConfig
from labs.chaos.guards import RedisRestart
from labs.chaos.holds import Held, Holds, read_history
from labs.chaos.plan import Spec
from labs.chaos.report import ChaosReport, Strike
from labs.chaos.schedule import FaultEvent
from labs.chaos.workload import Expected, create, later_specs
from labs.procs import WorkerProc
from labs.timings import CHAOS_WORKER
from teamdesk.config import Settings
from teamdesk.testing import wait_until

#: How long a Redis fault may hold its executor after Redis is back: until D6 has cleared
#: the RUNNING row its vanished job left (the stale age, a tick, a margin).
_SERVER_HOLD_S = float(CHAOS_WORKER.stale_running_age_s) + 5.0


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
        #: The strike holds of the run's workers (`labs.chaos.holds`), and the workers
        #: armed or held for a fault right now (one fault at a time per worker).
        self.holds: Holds | None = None
        #: Takeover races are staged one after another (`takeover`).
        self._race = asyncio.Lock()
        self.holding: dict[int, Held | None] = {}
        #: The run's fault schedule (`run_chaos` sets it before the window opens).
        self.schedule: list[FaultEvent] = []

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
        when there are link cuts, each started through `labs.chaos.worker` (the strike
        holds and the crossing history; the counterexample when one is on)."""
        inflight = log_dir / "inflight"
        self.holds = Holds(inflight)
        for i in range(self.config.workers):
            entry = ["-m", "labs.chaos.worker", "--inflight", str(inflight),
                     "--as", f"w{i + 1}"]
            if self.config.counterexample:
                entry += ["--counterexample", self.config.counterexample]
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

    # ------------------------------------------------------------ holding work in flight

    async def lease(self, task_id: str) -> tuple[str, str | None] | None:
        """(status, execution_id) of a task in the ledger now."""
        async with self.sessions() as s:
            row = (await statements.run(s, "lease_of", {"id": task_id})).first()
        return None if row is None else (row[0], row[1])

    @contextlib.asynccontextmanager
    async def _holding(self, ev: FaultEvent, workers: list[int]
                       ) -> AsyncIterator[Held | None]:
        """Arm `workers` and wait, at most `config.hold_wait` s, until one holds an export
        between two batches (`labs.chaos.holds`); yields it, or None. A worker already
        holding one for an earlier fault is struck as it is (that hold is borrowed, and
        its owner releases it). On exit every hold of this fault is disarmed, and
        released if still held (the strike may release earlier)."""
        deadline = time.monotonic() + self.config.hold_wait
        def armed_elsewhere() -> bool:
            return any(i in self.holding and self.holding[i] is None for i in workers)

        while armed_elsewhere() and time.monotonic() < deadline:  # noqa: ASYNC110
            # Armed for an earlier fault, not holding yet: wait for that hold to share it.
            await asyncio.sleep(0.02)  # poll interval of the earlier fault's state
        borrowed = next((h for i in workers if isinstance(h := self.holding.get(i), Held)),
                        None)
        if borrowed is not None:
            yield dataclasses.replace(borrowed, borrowed=True)
            return
        mine = [i for i in workers if i not in self.holding and self.procs[i].alive]
        if self.holds is None or not mine:
            yield None
            return
        tokens = {self.procs[i].name: self.holds.arm(self.procs[i].name) for i in mine}
        self.holding.update(dict.fromkeys(mine))
        try:
            held = await self.holds.reached(list(tokens), tokens, self.config.hold_wait)
            for i in mine:  # the others need not hold any more
                name = self.procs[i].name
                if held is None or name != held.worker:
                    # Released now, not at the end of the strike: a worker that read its
                    # arm before the disarm still holds once, and with one job slot it
                    # would take no other job (no E2, no takeover) until this fault ends.
                    self.holds.disarm(name, tokens[name])
                    self.holds.release(name, tokens[name])
                    self.holding.pop(i, None)
                else:
                    self.holding[i] = held
            yield held
        finally:
            for name, token in tokens.items():
                self.holds.disarm(name, token)
                self.holds.release(name, token)
            for i in mine:
                self.holding.pop(i, None)

    async def _strike(self, ev: FaultEvent, lane: str, held: Held | None) -> Strike:
        """Record the strike; a held task counts as struck RUNNING only if the ledger says
        RUNNING under the held execution id right now."""
        on_running = False
        if held is not None:
            on_running = await self.lease(held.task_id) == ("RUNNING", held.execution_id)
        strike = Strike(self.now(), ev.kind, lane, held.worker if held else None,
                        held.task_id if held else None,
                        held.execution_id if held else None, on_running)
        self.report.strikes.append(strike)
        self.report.struck_running[ev.kind] += 1 if on_running else 0
        return strike

    async def _until_lease_replaced(self, held: Held, strike: Strike, timeout: float, *,
                                    cleared_will_do: bool = False) -> None:
        """Before letting a held executor go on: wait (bounded) until a newer execution
        has claimed its task — after a stall, or after a D6 recovery and a re-dispatch —
        so its next fenced write meets a newer lease and must match nothing (P3, P6).
        The bound only detects a takeover that never came. `strike.lease_after` says
        what it found: "taken over", "cleared" (recovered by D6, not claimed again yet)
        or "kept". With `cleared_will_do` a D6 recovery is enough: the lease is gone
        all the same, and the executor's next write must match nothing."""
        deadline = time.monotonic() + timeout
        while True:
            state = await self.lease(held.task_id)
            newer = state is None or state[0] not in ("RUNNING", "WAITING") or (
                state[1] is not None and state[1] != held.execution_id)
            cleared = state == ("WAITING", None)
            if newer or (cleared and cleared_will_do) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)  # poll interval of an external state
        strike.lease_after = ("taken over" if newer else
                              "kept" if state == ("RUNNING", held.execution_id) else "cleared")

    def _let_go(self, held: Held | None) -> None:
        """Release a hold this fault owns (a borrowed one is its owner's to release)."""
        if held is not None and not held.borrowed and self.holds is not None:
            self.holds.release(held.worker, held.token)

    @staticmethod
    def _what(held: Held | None, strike: Strike) -> str:
        if held is None:
            return "no export held within the bound"
        return (f"holding {held.task_id} (execution {held.execution_id[:8]}, "
                f"{'RUNNING' if strike.on_running else 'no longer RUNNING'})")

    # ------------------------------------------------------------ the faults, one per kind

    async def fault(self, ev: FaultEvent) -> None:
        """Strike `ev` at its offset, through the method named after its kind."""
        await self._sleep_until(ev.at)
        await getattr(self, ev.kind)(ev)

    async def redis(self, ev: FaultEvent) -> None:
        """Once a worker holds an export in flight (any worker, bounded wait): stop the
        run's own Redis, start it again (empty) after the hold; the held executor goes on
        only once its lease is gone — the job vanished with Redis, so only D6 can bring
        the RUNNING row back — and its next write then meets LeaseLost (D6, P6)."""
        assert self.restarter is not None
        free = [i for i, lock in enumerate(self.locks) if not lock.locked()]
        # Prefer a worker no other fault is scheduled on while this one may hold it, so
        # later faults strike work of their own.
        busy = {e.worker for e in self.schedule
                if e.worker is not None and ev.at <= e.at <= ev.at + _SERVER_HOLD_S}
        free = [i for i in free if i not in busy] or free
        async with self._holding(ev, free) as held:
            strike = await self._strike(ev, "redis", held)
            started = self.now()
            self.redis_down = True
            await self.restarter.stop()
            self.note(f"redis stopped ({self.now() - started:.2f} s to stop), "
                      f"{self._what(held, strike)}; start again in {ev.hold:.2f} s")
            try:
                await asyncio.sleep(ev.hold)
            finally:
                await self.start_redis()
            self.outages.append((started, self.now()))
            self.report.timeline.append((started, self.now(), "redis", "redis"))
            self.note(f"redis started again (empty); unavailable for "
                      f"{self.now() - started:.2f} s")
            if held is not None:
                await self._until_lease_replaced(held, strike, _SERVER_HOLD_S,
                                                 cleared_will_do=True)
                self._let_go(held)
                self.note(f"released {held.worker}'s executor of {held.task_id}; its lease "
                          f"was {strike.lease_after}")
        self.report.executed["redis"] += 1

    async def cut(self, ev: FaultEvent) -> None:
        """Cut one worker's Redis link (its proxy) while it holds an export, let the
        executor go on into the cut, heal the link after the hold."""
        assert ev.worker is not None
        w, proxy = self.procs[ev.worker], self.proxies[ev.worker]
        async with self._holding(ev, [ev.worker]) as held:
            strike = await self._strike(ev, w.name, held)
            n = await proxy.cut()
            cut_at = self.now()
            self._let_go(held)
            self.note(f"cut {w.name}'s Redis link ({n} connection(s)), "
                      f"{self._what(held, strike)}, for {ev.hold:.2f} s")
            try:
                await asyncio.sleep(ev.hold)
            finally:
                await proxy.heal()
                self.report.timeline.append((cut_at, self.now(), w.name, "cut"))
        self.note(f"healed {w.name}'s Redis link")
        self.report.executed["cut"] += 1

    async def sigkill(self, ev: FaultEvent) -> None:
        """SIGKILL a worker (no drain) while it holds an export in flight, restart it
        after the hold: its RUNNING row stalls and is taken over (D6 if nobody does)."""
        async with self._process_fault(ev) as w:
            if w is None:
                return
            async with self._holding(ev, [ev.worker]) as held:
                strike = await self._strike(ev, w.name, held)
                pid = w.pid
                w.send(signal.SIGKILL)
                code = await w.wait_exit(10)
            self.note(f"SIGKILL {w.name} (pid {pid}), {self._what(held, strike)}: exit {code}")
            await self._restart_after(w, ev.hold)

    async def sigterm(self, ev: FaultEvent) -> None:
        """SIGTERM a worker while it holds an export in flight, and let the export go on:
        it must drain and exit 0, or 3 after its drain timeout (W4); restart it after the
        hold."""
        async with self._process_fault(ev) as w:
            if w is None:
                return
            async with self._holding(ev, [ev.worker]) as held:
                strike = await self._strike(ev, w.name, held)
                pid = w.pid
                w.send(signal.SIGTERM)
                self._let_go(held)
                code = await w.wait_exit(CHAOS_WORKER.drain_timeout_s + 8)
            if code is None:
                w.kill()
                code = w.p.returncode if w.p else None
                self.report.notes.append(f"{w.name} ignored SIGTERM; killed")
            self.note(f"SIGTERM {w.name} (pid {pid}), {self._what(held, strike)}: exit {code}")
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

    async def sigstop(self, ev: FaultEvent) -> None:
        """Freeze a worker past its lock while it holds an export in flight; SIGCONT
        after the hold, once another claim has taken the task over (bounded): the frozen
        executor's next write must match nothing (LeaseLost, P3, P6)."""
        async with self._process_fault(ev) as w:
            if w is None:
                return
            async with self._holding(ev, [ev.worker]) as held:
                strike = await self._strike(ev, w.name, held)
                w.send(signal.SIGSTOP)
                self.note(f"SIGSTOP {w.name}, {self._what(held, strike)}")
                try:
                    await asyncio.sleep(ev.hold)
                    if held is not None:
                        await self._until_lease_replaced(held, strike, 6.0)
                        self._let_go(held)
                finally:
                    w.send(signal.SIGCONT)
            after = strike.lease_after
            self.note(f"SIGCONT {w.name} (pid {w.pid}) after {self.now() - strike.at:.2f} s "
                      f"frozen" + (f"; its lease was {after}" if after else ""))

    async def takeover(self, ev: FaultEvent) -> None:
        """The takeover race staged by gates (ch. 26 §4), the same way every run: the
        first worker to hold an export between two batches is frozen (E1) past its lock;
        the executor that takes the task over (E2, another worker) is held between two
        batches in its turn; E1 is released and woken, and E2 is released only once E1's
        late result write has landed in the history. Each wait is bounded and only
        detects a step that never came (then the strike says so). A lease-less export
        clobbers here every time (P3, P5). The product's E1 meets LeaseLost instead (P6)
        and writes no result, so E2 waits for the bound: the kind is for counterexamples."""
        async with self._race:  # one race at a time: its gates arm every other worker
            await self._takeover(ev)

    async def _takeover(self, ev: FaultEvent) -> None:
        free = [i for i, lock in enumerate(self.locks) if not lock.locked()]
        async with self._holding(ev, free) as held:
            if held is None or held.borrowed:  # another fault's hold is that fault's to strike
                self.report.skipped[ev.kind] += 1
                self.note(f"{ev.kind} skipped: no export held within the bound")
                return
            if await self.lease(held.task_id) != ("RUNNING", held.execution_id):
                # E1 must own the lease for there to be a race: on a starved machine its
                # lock can lapse while it is held, and another claim has taken it already.
                self.report.skipped[ev.kind] += 1
                self.note(f"{ev.kind} skipped: {held.worker}'s execution "
                          f"{held.execution_id[:8]} no longer owned {held.task_id}")
                return
            a = next(i for i, w in enumerate(self.procs) if w.name == held.worker)
            async with self.locks[a]:
                await self._stage_takeover(ev, held, self.procs[a])
        self.report.executed[ev.kind] += 1

    async def _stage_takeover(self, ev: FaultEvent, held: Held, w: WorkerProc) -> None:
        assert self.holds is not None
        strike = await self._strike(ev, w.name, held)
        others = [p for p in self.procs if p is not w and p.alive]
        tokens = {p.name: self.holds.arm(p.name, held.task_id) for p in others}
        w.send(signal.SIGSTOP)
        self.note(f"SIGSTOP {w.name} (E1), {self._what(held, strike)}")
        e2: Held | None = None
        try:
            e2 = await self.holds.reached(list(tokens), tokens, ev.hold + 8.0)
            strike.lease_after = "taken over" if e2 is not None else "kept"
            self.note(f"E2 {e2.execution_id[:8]} on {e2.worker} took {held.task_id} over, "
                      "held between two batches" if e2 else
                      f"nobody took {held.task_id} over within the bound")
            self._let_go(held)
            w.send(signal.SIGCONT)
            landed = await self._result_of(held, ev.hold + 8.0)
            self.note(f"SIGCONT {w.name}: E1's late result {'landed' if landed else 'never landed'}"
                      f" after {self.now() - strike.at:.2f} s; E2 released")
        finally:
            w.send(signal.SIGCONT)
            for name, token in tokens.items():
                self.holds.disarm(name, token)
                self.holds.release(name, token)
        if e2 is not None:  # the race is over when E2 has written too: the next takes a new one
            await self._result_of(e2, ev.hold + 8.0)
        self.report.timeline.append((strike.at, self.now(), w.name, ev.kind))

    async def _result_of(self, held: Held, timeout: float) -> bool:
        """Wait (bounded) until the history records a result of `held`'s execution (a
        result crossing comes after its write, fenced or not); whether it came."""
        assert self.holds is not None
        folder = self.holds.folder

        async def landed() -> bool:
            return any(c.kind == "result" and c.execution_id == held.execution_id
                       and c.task_id == held.task_id for c in read_history(folder))
        try:
            await wait_until(landed, timeout, f"a result of {held.execution_id[:8]}")
            return True
        except TimeoutError:
            return False

    @contextlib.asynccontextmanager
    async def _process_fault(self, ev: FaultEvent) -> AsyncIterator[WorkerProc | None]:
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
            entered, strikes = self.now(), len(self.report.strikes)
            yield w
            # The bar starts at the strike (after the wait for a hold), not at the entry.
            struck_at = next((st.at for st in self.report.strikes[strikes:]
                              if st.lane == w.name and st.kind == ev.kind), entered)
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
                counts = dict((await statements.run(s, "status_counts")).all())
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
