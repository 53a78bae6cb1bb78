"""The dispatcher's tick loop (D8): about every `dispatch_tick_s`, never two ticks at once.

`dispatcher.dispatch_tasks` is one scan round; this module decides when rounds run — on
the timer (jittered), at once after a full scan while the tick's budget lasts, at once on
an outbox notification — and runs the tick's tail (D6, D9, D7) once per tick. The worker
process (`runner`) owns one loop; tests and labs drive it through `tick_once()` and its
`listener` events instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from teamdesk.config import Settings
from teamdesk.tasks.dispatcher import DispatchQueue, DispatchReport, dispatch_tail, dispatch_tasks
from teamdesk.tasks.ledger import Ledger

# The same logger as the rounds: one `dispatch.*` stream per process.
log = logging.getLogger("teamdesk.dispatcher")

DispatchFn = Callable[..., Awaitable[DispatchReport]]
LoopListener = Callable[[str, dict[str, Any]], None]

#: What a committed INSERT into the ledger notifies (migration 0003's trigger): a loop
#: that listens starts a tick at once (D8).
OUTBOX_CHANNEL = "teamdesk_outbox"

#: How far each interval between two ticks is drawn from `dispatch_tick_s`, either way
#: (D8: "about every 3 s"): worker processes started together drift apart instead of
#: scanning the same rows in phase. The mean interval stays the tick.
TICK_JITTER = 0.2


class DispatchLoop:
    """Tick the dispatcher about every `settings.dispatch_tick_s`, never two ticks at once
    (D8), the way the book's worker lifecycle does: a timer triggers ticks, and a trigger
    that finds the previous tick still running is *skipped*, not overlapped. A tick that
    raises is logged as one `dispatch.fault error=<type>: <message>` line (no traceback),
    kept in `last_error` and counted in `faults`; the next trigger tries again.

    One tick (D8 made precise): a scan round (`dispatch(..., recover=False)`); a scan that
    came back full (`dispatch_batch_size` rows) means a backlog, so the next round follows
    at once — one at a time, each bounded by the batch size — until a scan comes back
    short, a full round changed nothing (the next scan would return the same rows), or
    the tick's budget is spent (`dispatch_budget_s`, never more than `redispatch_age_s`,
    after which the rows the tick marked come due again), or another process's loop is
    already catching up (`catch_up`: one at a time). Then the tail (D6, D9, D7) once,
    and one `dispatch.tick` line for the whole tick. If the budget ended the rounds on a
    full scan (`report.backlog`), the next tick starts at once instead of after the
    interval: a burst drains at the queue's speed, not 100 rows per tick, and the tail
    still runs after every budget. `dispatch_budget_s` 0 is the book's loop: one scan per
    tick, then the interval.

    The interval before the next tick is drawn from `dispatch_tick_s` ± `TICK_JITTER`
    (`rng`, injectable for tests), so the dispatchers of several processes are not kept
    in phase on purpose; where their scans still meet, D5's duplicates are harmless, and
    their UPDATEs lock rows in one order (D8, `queries.sql`). The first tick starts at
    once.

    With `listen` (the worker process), the loop also LISTENs on `OUTBOX_CHANNEL`: a
    committed INSERT of task rows (O1) wakes it, and a tick starts at once — right after
    the running one, never beside it — so a new task does not wait up to a whole
    interval. The timer stays the safety net: a notification sent while nobody listened
    (or a listening connection that broke, retried after an interval) only costs that
    speed-up; the next tick finds the row anyway (D1).

    `listener(event, info)` (optional) sees `tick.start`, `tick.round`, `tick.done`,
    `tick.fault`, `tick.skipped` and `listen.ready`; tests and labs use it to synchronise
    with the loop without sleeping. `dispatch` is the round function (default
    `dispatch_tasks`); a test may wrap it.
    """

    def __init__(
        self,
        queue: DispatchQueue,
        settings: Settings,
        *,
        dispatch: DispatchFn = dispatch_tasks,
        listener: LoopListener | None = None,
        ledger: Ledger | None = None,
        rng: random.Random | None = None,
        listen: bool = False,
    ) -> None:
        #: The worker process's pool, shared with its task worker; None: each
        #: tick opens connections of its own.
        self.ledger = ledger
        self.queue = queue
        self.settings = settings
        self.dispatch = dispatch
        self.listener = listener
        self.rng = rng or random.Random()
        self.listen = listen
        self._listening: asyncio.Task[None] | None = None
        self.ticks = 0
        self.faults = 0
        self.skipped = 0
        self.last_error: BaseException | None = None
        self.last_report: DispatchReport | None = None
        self._timer: asyncio.Task[None] | None = None
        self._current: asyncio.Task[DispatchReport | None] | None = None
        self._stopping = asyncio.Event()
        #: Set to end the timer's wait early: by `stop()`, or by a tick that ended with
        #: its budget spent on a backlog (the next tick follows at once).
        self._wake = asyncio.Event()

    @property
    def running(self) -> bool:
        return self._timer is not None and not self._timer.done()

    def start(self) -> None:
        """Start ticking (the first tick right away). Needs a running event loop."""
        if self.running:
            raise RuntimeError("dispatch loop is already running")
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._timer = asyncio.create_task(self._run(), name="teamdesk-dispatch-loop")
        if self.listen:
            self._listening = asyncio.create_task(self._listen(),
                                                  name="teamdesk-dispatch-listen")

    async def stop(self, timeout: float | None = None) -> None:
        """Stop triggering ticks and await the current one, at most `timeout` seconds
        (default: 2 × `redis_timeout_s` + 5 s, more than a tick's bounded Redis calls; a
        tick catching up starts no further round once stopping). A tick still running
        after that is cancelled: anything it left undone is redone by a later tick (D3,
        D5, D6)."""
        self._stopping.set()
        self._wake.set()
        if self._listening is not None:
            self._listening.cancel()
            await asyncio.wait({self._listening}, timeout=5.0)
            self._listening = None
        if timeout is None:
            timeout = 2 * self.settings.redis_timeout_s + 5.0
        tasks = {t for t in (self._timer, self._current) if t is not None and not t.done()}
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=timeout)
                log.warning("dispatch.stop tick_cancelled_after_s=%g", timeout)
        self._timer = None

    def trigger(self) -> bool:
        """Start a tick now unless one is running (D8). Returns whether one started."""
        if self._current is not None and not self._current.done():
            self.skipped += 1
            self._emit("tick.skipped", skipped=self.skipped)
            return False
        self._current = asyncio.create_task(self._tick(), name="teamdesk-dispatch-tick")
        return True

    async def tick_once(self) -> DispatchReport | None:
        """Trigger a tick and await it (or await the one already running): for the worker
        process and labs that want a tick now without overlapping the timer's."""
        self.trigger()
        assert self._current is not None
        return await asyncio.shield(self._current)

    def next_interval(self) -> float:
        """Seconds from one tick's start to the next: `dispatch_tick_s` ± `TICK_JITTER`."""
        return self.settings.dispatch_tick_s * (1.0 + self.rng.uniform(-TICK_JITTER,
                                                                        TICK_JITTER))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not self._stopping.is_set():
            self._wake.clear()
            self.trigger()
            due += self.next_interval()
            if due < loop.time():  # ticks overran several intervals: do not burst
                due = loop.time() + self.next_interval()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), due - loop.time())
            if self._wake.is_set() and not self._stopping.is_set():
                # A tick spent its budget on a backlog, or new rows were committed (D8):
                # the next tick starts now, after the running one.
                current = self._current
                if current is not None and not current.done():
                    await asyncio.wait({current})
                due = loop.time()

    async def _listen(self) -> None:
        """Wake the timer on each outbox notification (see the class docstring)."""
        while not self._stopping.is_set():
            try:
                conn = await psycopg.AsyncConnection.connect(self.settings.database_url or "",
                                                             autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {OUTBOX_CHANNEL}")
                    self._emit("listen.ready")
                    async for _ in conn.notifies():
                        self._wake.set()
            except Exception as err:  # e.g. PostgreSQL restarted: the timer still ticks
                message = (str(err).strip().splitlines() or [""])[0]
                log.warning("dispatch.listen_failed error=%s: %s", type(err).__name__,
                            message)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.dispatch_tick_s)

    async def _tick(self) -> DispatchReport | None:
        self.ticks += 1
        tick = self.ticks
        self._emit("tick.start", tick=tick)
        loop = asyncio.get_running_loop()
        started, clock = time.perf_counter(), loop.time()
        budget = min(self.settings.dispatch_budget_s, self.settings.redispatch_age_s)
        try:
            extra = {"ledger": self.ledger} if self.ledger is not None else {}
            report = DispatchReport(rounds=0)
            while True:
                # Rounds after the first are catch-up rounds: one process at a time.
                more = {"catch_up": True} if report.rounds else {}
                last = await self.dispatch(self.queue, self.settings, recover=False,
                                           **extra, **more)
                if last.yielded:
                    break  # another process is catching up on this backlog (D8, D5)
                report.add(last)
                report.rounds += 1
                self._emit("tick.round", tick=tick, round=report.rounds, report=last)
                if not self._backlog(last) or self._stopping.is_set():
                    break
                if loop.time() - clock >= budget:
                    # Budget spent with the backlog still there: the next tick follows
                    # at once (budget 0, the book's loop, waits the interval).
                    report.backlog = budget > 0
                    break
            report.add(await dispatch_tail(self.settings, ledger=self.ledger))
        except Exception as err:
            self.faults += 1
            self.last_error = err
            message = (str(err).strip().splitlines() or [""])[0]
            log.error("dispatch.fault error=%s: %s", type(err).__name__, message)
            self._emit("tick.fault", tick=tick, error=err)
            return None
        log.info("dispatch.tick %s ms=%d", report,
                 round((time.perf_counter() - started) * 1000))
        self.last_report = report
        self._emit("tick.done", tick=tick, report=report)
        if report.backlog and not self._stopping.is_set():
            self._wake.set()
        return report

    def _backlog(self, last: DispatchReport) -> bool:
        """D8: a scan that came back full means a backlog — unless the round changed no
        row (then the next scan would return the same rows)."""
        changed = last.added + last.refreshed + last.re_added + last.failed_from_queue
        return last.scanned >= self.settings.dispatch_batch_size and changed > 0

    def _emit(self, event: str, **info: Any) -> None:
        if self.listener is not None:
            self.listener(event, info)
