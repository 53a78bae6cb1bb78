"""The product's test kit: what a test of the task path needs besides real servers.

Public and documented, as procrastinate ships `procrastinate.testing`, so the product's
tests and the lab harness (`labs`) use one kit instead of writing their own. No runtime
module imports it (an import-linter contract in `pyproject.toml`).

    job = FakeJob(task_id, attempts_made=2)          # process_task without a queue (ch. 26 §8)
    gate = Gate("export.after_read", actor="A")      # pause A at a probe point
    ctx = await gate.reached(); ...; gate.release()
    Fault("task.after_event", OSError("disk full"))  # fail the first crossing instead
    recorder = Recorder()                            # on_event= of create_task_worker
    await recorder.wait_for("completed", job_id=job.id)
    log = StatementLog(); Ledger(url, recorder=log)  # the named statements that ran
    await age(sessions, task_id, 121)                # compress the clock (D1, D6, D7)
    await enqueue(queue, task_id)                    # a delivery exactly as D2 adds it

Every wait is bounded, and the bound only reports a sync point that never came: it
orders nothing (races are staged with gates, never with sleeps).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Interval, func, select, text, update

from teamdesk import probes
from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, Notification, Ticket, TicketEvent
from teamdesk.tasks.ledger import StatementLog
from teamdesk.tasks.queue import JOB_NAME, MAX_TASK_ATTEMPTS, task_job_id

__all__ = ["DEFAULT_TIMEOUT_S", "FAST_WORKER", "EventTimeout", "FakeJob", "Fault", "Gate",
           "GateTimeout", "Observer", "Recorder", "StatementLog", "age", "enqueue",
           "reminder_effects", "task_row", "wait_until", "worker_env"]

DEFAULT_TIMEOUT_S = 8.0

#: Timings for a real `teamdesk worker` process under test (Q2): a 1 s lock and a 100 ms
#: stall check so a killed worker's job is taken over quickly, a quick tick and heartbeat,
#: a 50 ms backoff, export batches of 10. A child gets them as `FAST_WORKER.to_env()`.
FAST_WORKER = Settings(dispatch_tick_s=0.2, heartbeat_ttl_s=1.5, lock_duration_ms=1000,
                       stalled_interval_ms=100, backoff_delay_ms=50, export_batch_size=10)


# ---------------------------------------------------------------- a job without a queue

class FakeJob:
    """A stand-in for a BullMQ job, as the book's database race tests use (ch. 26 §8): they
    call `process_task` directly with `attemptsMade` chosen by the test. The processor only
    reads `id`, `data`, `attemptsMade`, `opts` and calls `updateProgress`; that call fails
    when `fail_at(value)` says so, as a lost queue connection would. `reported` keeps the
    values that got through."""

    def __init__(self, task_id: str, run: int = 0, attempts_made: int = 0,
                 fail_at: Callable[[int], bool] | None = None) -> None:
        self.id = task_job_id(task_id, run)
        self.data = {"taskId": task_id, "run": run}
        self.attemptsMade = attempts_made
        self.opts = {"attempts": MAX_TASK_ATTEMPTS}
        self.fail_at = fail_at
        self.reported: list[int] = []

    async def updateProgress(self, value: int) -> None:  # BullMQ spells it so
        if self.fail_at is not None and self.fail_at(value):
            raise ConnectionError(f"queue progress report failed at {value}")
        self.reported.append(value)


# ---------------------------------------------------------------- gates and faults

#: `observer(event, context)`: "paused" / "released" / "raised" (gates), "fired" (faults).
Observer = Callable[[str, dict[str, Any]], None]


class GateTimeout(AssertionError):
    """A gate was not reached (or not left) in time: the sync point never came."""


class EventTimeout(AssertionError):
    """A worker event did not come in time (`Recorder.wait_for`): the sync point never
    came. Its own type, so a judge can tell a wait that ran out from a failed assertion
    in any language."""


def _known_point(point: str) -> str:
    if point not in probes.POINTS:
        raise ValueError(f"unknown probe point {point!r}; known: {', '.join(probes.POINTS)}")
    return point


class Gate:
    """Pause the first crossing of probe `point` that matches (`actor`, and `when` on the
    probe context) until `release()`; every later crossing passes. Installed at once.

    `observer` is called in the executor's own task: "paused" when the gate catches a
    crossing, "released" (or "raised") when the executor leaves."""

    def __init__(self, point: str, *, actor: str | None = None,
                 when: Callable[[dict[str, Any]], bool] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, observer: Observer | None = None) -> None:
        self.point = _known_point(point)
        self.actor = actor
        self.when = when
        self.timeout = timeout
        self.observer = observer
        self.context: dict[str, Any] | None = None
        self._reached = asyncio.Event()
        self._released = asyncio.Event()
        self._passed = asyncio.Event()
        self._raising: BaseException | None = None
        self._uninstall = probes.install(self._handle)

    def __repr__(self) -> str:
        state = ("passed" if self._passed.is_set() else "paused" if self._reached.is_set()
                 else "waiting")
        who = f" actor={self.actor}" if self.actor else ""
        return f"<Gate {self.point}{who} {state}>"

    def _matches(self, point: str, ctx: dict[str, Any]) -> bool:
        if point != self.point or self._reached.is_set():
            return False
        if self.actor is not None and ctx.get("actor") != self.actor:
            return False
        return self.when is None or self.when(ctx)

    async def _handle(self, point: str, ctx: dict[str, Any]) -> None:
        if not self._matches(point, ctx):
            return
        self.context = dict(ctx)
        self._reached.set()
        self._notify("paused", ctx)
        try:
            await self._released.wait()
        finally:
            self._passed.set()
        if self._raising is not None:
            self._notify("raised", {**ctx, "error": self._raising})
            raise self._raising
        self._notify("released", ctx)

    def _notify(self, event: str, ctx: dict[str, Any]) -> None:
        if self.observer is not None:
            self.observer(event, ctx)

    def _timeout_message(self, event: str, bound: float) -> str:
        """The words of a `GateTimeout`; `event` is "reached" or "left". A harness that
        speaks another language overrides this (`labs.gates`)."""
        if event == "reached":
            return f"{self!r} was never reached within {bound:g} s"
        return f"{self!r} was not left within {bound:g} s"

    async def _bounded(self, event: asyncio.Event, name: str, timeout: float | None) -> None:
        bound = timeout or self.timeout
        try:
            await asyncio.wait_for(event.wait(), bound)
        except TimeoutError:
            raise GateTimeout(self._timeout_message(name, bound)) from None

    @property
    def is_released(self) -> bool:
        """True once `release()` or `close()` was called."""
        return self._released.is_set()

    @property
    def is_reached(self) -> bool:
        """True once an executor has been caught here (even if since released)."""
        return self._reached.is_set()

    async def reached(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait until an executor is paused here; returns the probe context."""
        await self._bounded(self._reached, "reached", timeout)
        return self.context or {}

    def release(self, raising: BaseException | None = None) -> None:
        """Let the paused executor continue, or make the probe raise `raising` there."""
        self._raising = raising
        self._released.set()

    async def passed(self, timeout: float | None = None) -> None:
        """Wait until the released executor has left the gate."""
        await self._bounded(self._passed, "left", timeout)

    def close(self) -> None:
        """Uninstall; a paused executor is released so nothing is left hanging."""
        self._uninstall()
        if not self._released.is_set():
            self._released.set()


class Fault:
    """Raise `error` at the first `times` matching crossings of `point` (no pause): an
    injected fault, e.g. a failing ledger write after the event INSERT. `observer` hears
    "fired"."""

    def __init__(self, point: str, error: BaseException, *, actor: str | None = None,
                 when: Callable[[dict[str, Any]], bool] | None = None, times: int = 1,
                 observer: Observer | None = None) -> None:
        self.point = _known_point(point)
        self.error, self.actor, self.when = error, actor, when
        self.observer = observer
        self.remaining = times
        self.fired = 0
        self._uninstall = probes.install(self._handle)

    async def _handle(self, point: str, ctx: dict[str, Any]) -> None:
        if point != self.point or self.remaining <= 0:
            return
        if self.actor is not None and ctx.get("actor") != self.actor:
            return
        if self.when is not None and not self.when(ctx):
            return
        self.remaining -= 1
        self.fired += 1
        if self.observer is not None:
            self.observer("fired", {**ctx, "error": self.error})
        raise self.error

    def __repr__(self) -> str:
        who = f" actor={self.actor}" if self.actor else ""
        return (f"<Fault {self.point}{who} {type(self.error).__name__} fired={self.fired} "
                f"remaining={self.remaining}>")

    def close(self) -> None:
        """Uninstall: later crossings pass untouched."""
        self._uninstall()


# ---------------------------------------------------------------- worker events

class Recorder:
    """Every worker event, in order, with a monotonic time: an `on_event` hook for
    `create_task_worker`, so a background failure never vanishes. A test waits (bounded)
    for the event it needs; other observers `subscribe` to each event as it arrives."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def __call__(self, kind: str, fields: dict[str, Any]) -> None:
        event = {"kind": kind, "t": time.monotonic(), **fields}
        self.events.append(event)
        self._changed.set()
        for listener in tuple(self._listeners):
            listener(event)

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call `listener(event)` for every later event (the dict stored in `events`);
        returns the function that unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def of(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        """Events of `kind` whose fields equal `match`."""
        return [e for e in self.events
                if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())]

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Worker `error` events: something in the background went wrong."""
        return self.of("error")

    def _missing_message(self, kind: str, match: Mapping[str, Any], timeout: float,
                         seen: list[tuple[str, Any]]) -> str:
        """The words of a `wait_for` that ran out; a harness in another language overrides
        this (`labs.recorder`)."""
        return f"no {kind!r} event matching {dict(match)} within {timeout:g} s; saw {seen}"

    async def wait_for(self, kind: str, timeout: float = DEFAULT_TIMEOUT_S,
                       where: Callable[[dict[str, Any]], bool] | None = None,
                       **match: Any) -> dict[str, Any]:
        """The first event of `kind` matching `match` (and `where`), waiting at most
        `timeout` seconds; the timeout reports an event that never came."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for e in self.of(kind, **match):
                if where is None or where(e):
                    return e
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                seen = [(e["kind"], e.get("actor")) for e in self.events]
                raise EventTimeout(self._missing_message(kind, match, timeout, seen))
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass


# ---------------------------------------------------------------- the ledger and the queue

async def age(sessions: Any, task_ids: str | Iterable[str], seconds: float, *,
              columns: Iterable[str] = ("updated_at",)) -> datetime:
    """Move `columns` of the tasks `seconds` into the past, as if that much time had passed
    since each was stamped: D1's re-check (`dispatched_at`), D6's stale age (`updated_at`),
    D7's expiry (`expires_at`), compressed instead of waited for. The dispatcher compares in
    the database's clock, so the rows move, not the clock. An UPDATE that sets `updated_at`
    itself keeps that value (the migration's trigger); one that does not, stamps it now.
    Returns the database's clock after the change. `sessions`: an async sessionmaker."""
    try:
        secs = float(seconds)
    except (TypeError, ValueError):
        raise TypeError(f"seconds must be a number, not {seconds!r}") from None
    if not math.isfinite(secs):
        raise ValueError(f"seconds must be finite, not {seconds!r}")
    ids = [task_ids] if isinstance(task_ids, str) else list(task_ids)
    t = BackgroundTask
    # A bound parameter, never text in the SQL: `make_interval(secs => $1)`.
    shift = func.make_interval(text("secs => :shift_s").bindparams(shift_s=secs),
                               type_=Interval)
    values = {name: getattr(t, name) - shift for name in columns}
    async with sessions() as session, session.begin():
        await session.execute(update(t).where(t.id.in_(ids)).values(values))
        return await session.scalar(select(func.now()))


async def task_row(sessions: Any, task_id: str) -> dict[str, Any]:
    """The whole ledger row of one task, column name → value: compare two of them to prove
    that *nothing at all* changed (P3)."""
    async with sessions() as session:
        t = await session.get(BackgroundTask, task_id)
    if t is None:
        raise KeyError(f"no task {task_id!r}")
    return {c.name: getattr(t, c.key) for c in BackgroundTask.__table__.columns}


async def reminder_effects(sessions: Any, ticket_id: int) -> tuple[int, int, int]:
    """A reminder's three effects on one ticket: (notifications, `reminder_sent` events,
    the ticket's version). P10 promises all three move together, exactly once."""
    async with sessions() as s:
        n = await s.scalar(select(func.count()).select_from(Notification).where(
            Notification.ticket_id == ticket_id))
        e = await s.scalar(select(func.count()).select_from(TicketEvent).where(
            TicketEvent.ticket_id == ticket_id, TicketEvent.kind == "reminder_sent"))
        v = await s.scalar(select(Ticket.version).where(Ticket.id == ticket_id))
    return n, e, v


async def enqueue(queue: Any, task_id: str, run: int = 0, *, job_id: str | None = None,
                  **opts: Any) -> Any:
    """Add a delivery of `task_id`/`run` exactly as the dispatcher does (D2), with option
    overrides; `job_id` gives it another id (a duplicate delivery). Returns the job."""
    return await queue.add(JOB_NAME, {"taskId": task_id, "run": run},
                           {"jobId": job_id or task_job_id(task_id, run), **opts})


# ---------------------------------------------------------------- worker processes

def worker_env(settings: Settings, timings: Mapping[str, str], *,
               redis_url: str | None = None) -> dict[str, str]:
    """The environment of a `teamdesk worker` process for these settings: their URLs and
    queue prefix, and the given `TEAMDESK_*` timings (Q2, e.g. `FAST_WORKER.to_env()`).
    Timing overrides inherited from this process's environment are dropped, so only the
    stated ones apply."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TEAMDESK_") or k == "TEAMDESK_DATA_DIR"}
    env.update(timings)
    env.update({"DATABASE_URL": settings.database_url or "",
                "REDIS_URL": redis_url or settings.redis_url or "",
                "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix})
    return env


async def wait_until(cond: Callable[[], Awaitable[Any]], timeout: float, what: str,
                     *, interval: float = 0.05, on_timeout: Callable[[], str] | None = None,
                     ) -> Any:
    """Poll another process's observable state until `cond()` is truthy and return it; the
    bound only reports that it never came (with `on_timeout()` appended, e.g. a worker's
    log tail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await cond()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = ("\n" + on_timeout()) if on_timeout else ""
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        await asyncio.sleep(interval)
