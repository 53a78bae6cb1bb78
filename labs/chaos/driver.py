"""The driver of one chaos run: its clock, worker processes, proxies and Redis, and one
method per fault kind (named after the kind in `labs.chaos.kinds.FAULT_KINDS`). Every
fault goes through `_struck`: its sync points, waited for in the schedule's order, then
its strike on a RUNNING task of its own. What runs beside the faults (a supervisor, the
waves of new tasks, the snapshots) is `labs.chaos.window`'s; what comes after the window
(restore, settle, the final stop) is `labs.chaos.settle`'s. Its notes speak the edition's
language (`labs.i18n.say`); the workers' own log lines stay as the product writes them."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from labs import statements
from labs.chaos.config import ChaosConfig
from labs.chaos.guards import RedisRestart
from labs.chaos.holds import Held, Holds, read_history
from labs.chaos.kinds import FAULT_KINDS
from labs.chaos.plan import STRIKE_EXPORT
from labs.chaos.report import CLEARED, KEPT, LEASE_AFTER, TAKEN_OVER, ChaosReport, Strike
from labs.chaos.schedule import FaultEvent
from labs.chaos.workload import create
from labs.history import short
from labs.i18n import say
from labs.procs import WorkerProc
from labs.timings import CHAOS_WORKER
from teamdesk.config import Settings
from teamdesk.tasks.runner import EXIT_DRAIN_TIMEOUT
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
        #: The strike holds of the run's workers (`labs.chaos.holds`).
        self.holds: Holds | None = None
        #: Whose turn it is to wait for its sync points and strike (`_turn`): the faults
        #: take turns in the schedule's order.
        self._turns = asyncio.Condition()
        self._next_fault = 0
        #: Takeover races are staged one after another (`takeover`).
        self._race = asyncio.Lock()
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

    async def sleep_until(self, offset: float) -> None:
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

    def _index(self, name: str) -> int:
        return next(i for i, w in enumerate(self.procs) if w.name == name)

    @contextlib.asynccontextmanager
    async def _turn(self, index: int) -> AsyncIterator[None]:
        """Fault `index`'s turn to wait for its sync points and strike. Faults take turns
        in the schedule's order, one at a time, so what one arms the next cannot undo;
        the turn ends at the strike, not with the fault."""
        async with self._turns:
            await self._turns.wait_for(lambda: self._next_fault >= index)
        try:
            yield
        finally:
            async with self._turns:
                self._next_fault = max(self._next_fault, index + 1)
                self._turns.notify_all()

    @contextlib.asynccontextmanager
    async def _struck(self, ev: FaultEvent
                      ) -> AsyncIterator[tuple[WorkerProc, Held, Strike] | None]:
        """A fault's sync points, then its strike. In its turn (`_turn`): its worker free
        of any earlier fault (the worker's lock, kept until this fault is over), then
        holding an export of a task no fault has struck yet, between two batches, RUNNING
        under that worker's lease. Yields (worker, hold, strike), and the body strikes at
        once; or None when `config.hold_wait` passed first, which is a violation: the
        fault brought exports of its own, so only a stuck system gets there."""
        index = self.schedule.index(ev)
        async with self._turn(index):
            got = await self._hold_for(ev, index, time.monotonic() + self.config.hold_wait)
        if got is None:
            yield None
            return
        w, lock, held, strike = got
        try:
            yield w, held, strike
            if FAULT_KINDS[ev.kind].target == "process":
                self.report.timeline.append((strike.at, self.now(), w.name, ev.kind))
            self.report.executed[ev.kind] += 1
        finally:
            self._let_go(held)
            lock.release()

    async def _hold_for(self, ev: FaultEvent, index: int, deadline: float
                        ) -> tuple[WorkerProc, asyncio.Lock, Held, Strike] | None:
        """`_struck`'s waits: the worker's lock (a fault on one worker) or some free worker
        (`_free`), then a hold (`_wait_hold`); records the strike."""
        lock: asyncio.Lock | None = None
        if ev.worker is not None:
            lock = self.locks[ev.worker]
            try:
                await asyncio.wait_for(lock.acquire(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return self._missed(ev, say("chaos.driver.still-faulted", "{worker} was still "
                                            "under an earlier fault",
                                            worker=f"w{ev.worker + 1}"))
            targets = [ev.worker]
            w = self.procs[ev.worker]
            if not w.alive:  # it exited by itself; the supervisor waits for its lock
                w.start()
                self.note(say("chaos.driver.started-again", "started {worker} again (pid "
                              "{pid}) for the {kind} due", worker=w.name, pid=w.pid,
                              kind=ev.kind))
        else:
            targets = await self._free(ev, deadline)
        try:
            held = (await self._wait_hold(targets, deadline, owned=ev.worker is not None)
                    if targets else None)
            if held is not None and lock is None:
                lock = self.locks[self._index(held.worker)]
                await lock.acquire()  # free when armed; at most a supervisor's moment
        except BaseException:
            if ev.worker is not None:
                self.locks[ev.worker].release()
            raise
        if held is None or lock is None:
            if lock is not None:
                lock.release()
            return self._missed(ev, say("chaos.driver.none-held", "no export of a task not "
                                        "struck yet was held"))
        lane = "redis" if FAULT_KINDS[ev.kind].target == "server" else held.worker
        strike = Strike(self.now(), ev.kind, lane, held.worker, held.task_id,
                        held.execution_id, on_running=True, fault=index, due=ev.at)
        self.report.strikes.append(strike)
        self.report.struck_running[ev.kind] += 1
        return self.procs[self._index(held.worker)], lock, held, strike

    async def _free(self, ev: FaultEvent, deadline: float) -> list[int]:
        """The workers no earlier fault has now (waiting, bounded, until there is one); for
        a Redis restart, preferably ones no later fault is scheduled on while it may hold
        them, so those faults need not wait for it."""
        while True:
            free = [i for i, lock in enumerate(self.locks) if not lock.locked()]
            if free or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)  # poll interval of the earlier faults' locks
        if ev.kind == "redis":
            busy = {e.worker for e in self.schedule
                    if e.worker is not None and ev.at <= e.at <= ev.at + _SERVER_HOLD_S}
            free = [i for i in free if i not in busy] or free
        return free

    async def _wait_hold(self, targets: list[int], deadline: float, *,
                         owned: bool = False) -> Held | None:
        """Arm `targets`, ask the services for the fault's exports (`STRIKE_EXPORT`, one
        per worker) and wait until a target holds an export of a task not struck yet,
        RUNNING under its lease: the first to hold is the one struck. With one target,
        every other free worker is armed as well and kept holding until then, so the
        fault's exports are left to its worker (with one export per worker, one is).
        Then everyone but the held one goes on. None if `deadline` passed first. A target
        whose lock this fault holds (`owned`) and that exits by itself meanwhile (it could
        not start while Redis was down) is restarted here, as the supervisor would."""
        assert self.holds is not None and self.report.expected is not None
        holds, names = self.holds, [w.name for w in self.procs]
        exclude = self.report.struck_tasks
        tokens = {i: holds.arm(names[i], exclude=exclude) for i in targets}
        parked: dict[int, int] = {}
        for _ in range(self.config.workers):
            await create(self.sessions, STRIKE_EXPORT, self.report.expected)
            self.report.strike_exports += 1
        held: Held | None = None
        try:
            while held is None and time.monotonic() < deadline:
                for i in tokens if owned else ():
                    if not self.procs[i].alive:
                        await self.restart_exited(self.procs[i])
                if len(targets) == 1:  # a worker freed meanwhile is parked too
                    for i, lock in enumerate(self.locks):
                        if i not in tokens and i not in parked and not lock.locked():
                            parked[i] = holds.arm(names[i], exclude=exclude)
                found = await holds.reached([names[i] for i in tokens],
                                            {names[i]: t for i, t in tokens.items()},
                                            min(0.25, max(0.0, deadline - time.monotonic())))
                if found is None:
                    continue
                if await self.lease(found.task_id) == ("RUNNING", found.execution_id):
                    held = found
                    break
                # Its lock lapsed while it was held (a starved machine) and another claim
                # has the task now: let it go on and wait for the next one.
                self.note(say("chaos.driver.lapsed", "{worker} held {task}, no longer RUNNING "
                              "under {execution}; waiting for another", worker=found.worker,
                              task=found.task_id, execution=short(found.execution_id)))
                holds.release(found.worker, found.token)
                tokens[self._index(found.worker)] = holds.arm(found.worker, exclude=exclude)
        finally:
            for i, token in [*tokens.items(), *parked.items()]:
                if held is None or names[i] != held.worker:
                    holds.disarm(names[i], token)
                    holds.release(names[i], token)
        return held

    async def restart_exited(self, w: WorkerProc) -> None:
        """What a process supervisor does for a worker that exited by itself (not by a
        fault of ours): note it as a finding, wait 0.5 s, start it again. The window's
        supervisor does it for a worker no fault holds; a fault waiting on its own worker
        does it itself (`_wait_hold`), as the supervisor waits for that worker's lock."""
        code = w.p.returncode if w.p is not None else None
        last = (w.tail(1) or "?").strip()[:160]
        when = (say("chaos.window.while-running", "while running") if w.started_up
                else say("chaos.window.while-starting", "while starting"))
        self.note(say("chaos.window.exited", "{worker} exited by itself {when} "
                      "(exit {code}): {last}", worker=w.name, when=when, code=code, last=last))
        self.report.findings.append(say(
            "chaos.window.exited-finding", "{worker} exited by itself {when} with code "
            "{code} at +{at:.2f} s; last log line: {last}", worker=w.name, when=when,
            code=code, at=self.now(), last=last))
        await asyncio.sleep(0.5)  # a supervisor's restart delay
        w.start()
        self.note(say("chaos.window.restarted", "restarted {worker} (pid {pid}) as a "
                      "supervisor would", worker=w.name, pid=w.pid))

    def _missed(self, ev: FaultEvent, why: str) -> None:
        """A fault whose sync points did not come within the bound: a violation."""
        self.report.missed[ev.kind] += 1
        bound = self.config.hold_wait
        self.note(say("chaos.driver.missed", "{kind} due at +{at:.2f} s MISSED: {why} within "
                      "{bound:g} s", kind=ev.kind, at=ev.at, why=why, bound=bound))
        self.report.violate(say("chaos.driver.missed-violation", "fault {fault!r}: {why} "
                                "within {bound:g} s (a sync point that never came: the system "
                                "is stuck)", fault=ev.describe().strip(), why=why, bound=bound))

    async def _until_lease_replaced(self, held: Held, strike: Strike, timeout: float, *,
                                    cleared_will_do: bool = False) -> None:
        """Before letting a held executor go on: wait (bounded) until a newer execution
        has claimed its task — after a stall, or after a D6 recovery and a re-dispatch —
        so its next fenced write meets a newer lease and must match nothing (P3, P6).
        The bound only detects a takeover that never came. `strike.lease_after` says
        what it found: `TAKEN_OVER`, `CLEARED` (recovered by D6, not claimed again yet)
        or `KEPT`. With `cleared_will_do` a D6 recovery is enough: the lease is gone
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
        strike.lease_after = (TAKEN_OVER if newer else
                              KEPT if state == ("RUNNING", held.execution_id) else CLEARED)

    def _let_go(self, held: Held) -> None:
        """Let a held executor go on (idempotent): no more holding for its token."""
        if self.holds is not None:
            self.holds.disarm(held.worker, held.token)
            self.holds.release(held.worker, held.token)

    @staticmethod
    def _what(held: Held, strike: Strike) -> str:
        if strike.on_running:
            return say("chaos.driver.holding", "holding {task} (execution {execution}, "
                       "RUNNING)", task=held.task_id, execution=short(held.execution_id))
        return say("chaos.driver.holding-not-running", "holding {task} (execution "
                   "{execution}, no longer RUNNING)", task=held.task_id,
                   execution=short(held.execution_id))

    @staticmethod
    def _lease(strike: Strike) -> str:
        """What the held lease had become (`Strike.lease_after`), in the edition's words."""
        return LEASE_AFTER.shown(strike.lease_after or "")

    # ------------------------------------------------------------ the faults, one per kind

    async def fault(self, ev: FaultEvent) -> None:
        """Strike `ev` at its offset or later (`_struck`), through the method named after
        its kind."""
        await self.sleep_until(ev.at)
        await getattr(self, ev.kind)(ev)

    async def redis(self, ev: FaultEvent) -> None:
        """Once a worker holds an export in flight (any free worker): stop the run's own
        Redis, start it again (empty) after the hold; the held executor goes on only once
        its lease is gone — the job vanished with Redis, so only D6 can bring the RUNNING
        row back — and its next write then meets LeaseLost (D6, P6)."""
        assert self.restarter is not None
        async with self._struck(ev) as struck:
            if struck is None:
                return
            _, held, strike = struck
            started = self.now()
            self.redis_down = True
            await self.restarter.stop()
            self.note(say("chaos.driver.redis-stopped", "redis stopped ({took:.2f} s to "
                          "stop), {what} on {worker}; start again in {hold:.2f} s",
                          took=self.now() - started, what=self._what(held, strike),
                          worker=held.worker, hold=ev.hold))
            try:
                await asyncio.sleep(ev.hold)
            finally:
                await self.start_redis()
            self.outages.append((started, self.now()))
            self.report.timeline.append((started, self.now(), "redis", "redis"))
            self.note(say("chaos.driver.redis-started", "redis started again (empty); "
                          "unavailable for {seconds:.2f} s", seconds=self.now() - started))
            await self._until_lease_replaced(held, strike, _SERVER_HOLD_S,
                                             cleared_will_do=True)
            self._let_go(held)
            self.note(say("chaos.driver.released", "released {worker}'s executor of {task}; "
                          "its lease was {lease}", worker=held.worker, task=held.task_id,
                          lease=self._lease(strike)))

    async def cut(self, ev: FaultEvent) -> None:
        """Cut one worker's Redis link (its proxy) while it holds an export, let the
        executor go on into the cut, heal the link after the hold."""
        async with self._struck(ev) as struck:
            if struck is None:
                return
            w, held, strike = struck
            proxy = self.proxies[self._index(w.name)]
            n = await proxy.cut()
            cut_at = self.now()
            self._let_go(held)
            self.note(say("chaos.driver.cut", "cut {worker}'s Redis link ({n} "
                          "connection(s)), {what}, for {hold:.2f} s", worker=w.name, n=n,
                          what=self._what(held, strike), hold=ev.hold))
            try:
                await asyncio.sleep(ev.hold)
            finally:
                await proxy.heal()
                self.report.timeline.append((cut_at, self.now(), w.name, "cut"))
            self.note(say("chaos.driver.healed", "healed {worker}'s Redis link",
                          worker=w.name))

    async def sigkill(self, ev: FaultEvent) -> None:
        """SIGKILL a worker (no drain) while it holds an export in flight, restart it
        after the hold: its RUNNING row stalls and is taken over (D6 if nobody does)."""
        async with self._struck(ev) as struck:
            if struck is None:
                return
            w, held, strike = struck
            pid = w.pid
            w.send(signal.SIGKILL)
            code = await w.wait_exit(10)
            self._let_go(held)  # nothing left to hold; its next start must not stop there
            self.note(say("chaos.driver.sigkill", "SIGKILL {worker} (pid {pid}), {what}: "
                          "exit {code}", worker=w.name, pid=pid, what=self._what(held, strike),
                          code=code))
            await self._restart_after(w, ev.hold)

    async def sigterm(self, ev: FaultEvent) -> None:
        """SIGTERM a worker while it holds an export in flight, and let the export go on:
        it must drain and exit 0, or 3 after its drain timeout (W4); restart it after the
        hold."""
        async with self._struck(ev) as struck:
            if struck is None:
                return
            w, held, strike = struck
            pid = w.pid
            w.send(signal.SIGTERM)
            self._let_go(held)
            code = await w.wait_exit(CHAOS_WORKER.drain_timeout_s + 8)
            if code is None:
                w.kill()
                code = w.p.returncode if w.p else None
                self.report.notes.append(say("chaos.driver.ignored-sigterm", "{worker} "
                                             "ignored SIGTERM; killed", worker=w.name))
            self.note(say("chaos.driver.sigterm", "SIGTERM {worker} (pid {pid}), {what}: "
                          "exit {code}", worker=w.name, pid=pid, what=self._what(held, strike),
                          code=code))
            if code == -signal.SIGTERM:
                # Still importing: its handler (installed before it takes any job) was not
                # there yet. Nothing can have been running.
                self.report.notes.append(say("chaos.driver.sigterm-starting", "{worker} got "
                                             "SIGTERM while still starting (exit -15, before "
                                             "its drain handler existed)", worker=w.name))
            elif code not in (0, EXIT_DRAIN_TIMEOUT) and not w.started_up:
                self.report.findings.append(say(
                    "chaos.driver.sigterm-failing-start", "{worker} exited {code} before it "
                    "had started (the SIGTERM met a start that was failing anyway): {last}",
                    worker=w.name, code=code, last=w.tail(1).strip()[:160]))
            elif code not in (0, EXIT_DRAIN_TIMEOUT):
                self.report.violate(say("chaos.driver.sigterm-exit", "{worker} exited {code} "
                                        "after SIGTERM; expected 0 or 3 (W4)", worker=w.name,
                                        code=code))
            await self._restart_after(w, ev.hold)

    async def sigstop(self, ev: FaultEvent) -> None:
        """Freeze a worker past its lock while it holds an export in flight; SIGCONT
        after the hold, once another claim has taken the task over (bounded): the frozen
        executor's next write must match nothing (LeaseLost, P3, P6)."""
        async with self._struck(ev) as struck:
            if struck is None:
                return
            w, held, strike = struck
            w.send(signal.SIGSTOP)
            self.note(say("chaos.driver.sigstop", "SIGSTOP {worker}, {what}", worker=w.name,
                          what=self._what(held, strike)))
            try:
                await asyncio.sleep(ev.hold)
                await self._until_lease_replaced(held, strike, 6.0)
                self._let_go(held)
            finally:
                w.send(signal.SIGCONT)
            self.note(say("chaos.driver.sigcont", "SIGCONT {worker} (pid {pid}) after "
                          "{seconds:.2f} s frozen; its lease was {lease}", worker=w.name,
                          pid=w.pid, seconds=self.now() - strike.at, lease=self._lease(strike)))

    async def takeover(self, ev: FaultEvent) -> None:
        """The takeover race staged by gates (ch. 26 §4), the same way every run: the
        first worker to hold an export between two batches is frozen (E1) past its lock;
        the executor that takes the task over (E2, another worker) is held between two
        batches in its turn; E1 is released and woken, and E2 is released only once E1's
        late result write has landed in the history. Each wait is bounded and only
        detects a step that never came (then the strike says so). A lease-less export
        clobbers here every time (P3, P5). The product's E1 meets LeaseLost instead (P6)
        and writes no result, so E2 waits for the bound: the kind is for counterexamples."""
        # One race at a time: its gates arm every other worker, which the next fault's
        # arming would undo.
        async with self._race, self._struck(ev) as struck:
            if struck is not None:
                w, held, strike = struck
                await self._stage_takeover(ev, held, w, strike)

    async def _stage_takeover(self, ev: FaultEvent, held: Held, w: WorkerProc,
                              strike: Strike) -> None:
        assert self.holds is not None
        others = [p for p in self.procs if p is not w and p.alive]
        tokens = {p.name: self.holds.arm(p.name, held.task_id) for p in others}
        w.send(signal.SIGSTOP)
        self.note(say("chaos.driver.sigstop-e1", "SIGSTOP {worker} (E1), {what}",
                      worker=w.name, what=self._what(held, strike)))
        e2: Held | None = None
        try:
            e2 = await self.holds.reached(list(tokens), tokens, ev.hold + 8.0)
            strike.lease_after = TAKEN_OVER if e2 is not None else KEPT
            self.note(say("chaos.driver.e2", "E2 {execution} on {worker} took {task} over, "
                          "held between two batches", execution=short(e2.execution_id),
                          worker=e2.worker, task=held.task_id) if e2 else
                      say("chaos.driver.no-e2", "nobody took {task} over within the bound",
                          task=held.task_id))
            self._let_go(held)
            w.send(signal.SIGCONT)
            landed = await self._result_of(held, ev.hold + 8.0)
            self.note(say("chaos.driver.e1-landed", "SIGCONT {worker}: E1's late result "
                          "landed after {seconds:.2f} s; E2 released", worker=w.name,
                          seconds=self.now() - strike.at) if landed else
                      say("chaos.driver.e1-never-landed", "SIGCONT {worker}: E1's late result "
                          "never landed after {seconds:.2f} s; E2 released", worker=w.name,
                          seconds=self.now() - strike.at))
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
            await wait_until(landed, timeout, f"a result of {short(held.execution_id)}")
            return True
        except TimeoutError:
            return False

    async def _restart_after(self, w: WorkerProc, hold: float) -> None:
        await asyncio.sleep(hold)
        w.start()
        self.note(say("chaos.driver.restarted", "restarted {worker} (pid {pid})",
                      worker=w.name, pid=w.pid))

    def logs(self) -> dict[str, str]:
        """Each worker's whole log (every start), by name."""
        return {w.name: w.output() for w in self.procs}
