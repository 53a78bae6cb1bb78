"""`Lab`: one isolated TeamDesk world per notebook or test.

    lab = await Lab.open("race")                 # in a notebook (top-level await)
    a = await lab.start_worker("A", **STUCK)     # renewal off, 1 s lock
    task = await lab.request_export({"status": ["OPEN"]})
    await lab.dispatch()                         # one dispatcher scan
    ...
    await lab.close()                            # stops everything, checks lab.errors

    async with Lab.open("race") as lab:          # in a test or a script
        ...

A lab owns:

- **its own database**, cloned from the migrated template (`CREATE DATABASE … TEMPLATE`,
  milliseconds), seeded with the demo team `acme` (`teamdesk.seed.seed_demo`);
- **its own BullMQ prefix** (`lab<10 hex>`), so its queue, jobs and locks live under keys
  no other lab or test touches;
- **its workers** (`start_worker`), built by the product's `create_task_worker` and run in
  this process; their probe crossings, log lines and events are attributed to this lab
  (a context variable follows each worker's tasks), so two labs open at once never see
  each other's tasks, jobs, gates or history rows;
- **its error list** (`lab.errors`): every worker `failed`/`error` event and every
  exception the asyncio loop reports (those cannot be attributed to one lab on Python
  3.11, so every open lab on that loop gets them) — background failures never vanish;
- **its history** (`lab.history`, see `labs.history`), **its recorder**
  (`lab.recorder`, see `labs.recorder`) to wait on worker events, and **its log**
  (`lab.logs`): the product's log lines from its workers and scans, which a notebook
  would otherwise print under the wrong cell or drop.

Closing (`close()`) releases the lab's gates, closes its workers (bounded wait, then
forced), runs the clean-ups registered with `add_cleanup` (a proxy started for the lab
stops), deletes every Redis key under its prefix, drops its database and restores the
loop's exception handler. It is idempotent. Then it **raises `LabErrors`** if any error
in `lab.errors` was not acknowledged — so a notebook's last cell, or a test, fails loudly
when something went wrong in the background. Expected failures (a retry scenario, the late
executor of a takeover race) are acknowledged first with `lab.acknowledge(...)`;
`close(check=False)` only returns them. Errors that arrive while the lab or that worker
is closing (an executor released by the close itself, a connection closed under a
worker) are recorded but acknowledged automatically.

The lab holds no product logic: it calls `teamdesk` services, the queue, the dispatcher
and the worker factory exactly as the product does, and observes through probes. What it
varies goes through the factory's seams, never a patch: each worker gets the lab's fence
(`fence=`, the counterexamples' switches, P3) and its run hook (`on_run_error=`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from devkit import services
from labs import _scope, counterexamples, leftovers
from labs import stage as _stage
from labs.gates import DEFAULT_TIMEOUT_S, Fault, Gate
from labs.history import History
from labs.private_redis import PrivateRedis
from labs.recorder import Recorder
from teamdesk.config import Settings
from teamdesk.db.engine import create_engine, session_factory
from teamdesk.db.models import BackgroundTask, Priority, Scope, Ticket
from teamdesk.db.templates import clone_database, drop_database
from teamdesk.seed import DEMO_TEAM, SeedSummary, seed_demo
from teamdesk.services import exports as export_services
from teamdesk.services import tasks as task_services
from teamdesk.services import tickets as ticket_services
from teamdesk.tasks.queue import JOB_NAME, create_task_queue, redis_client, task_job_id
from teamdesk.tasks.worker import TaskWorker, create_task_worker

#: Worker options of the takeover race: the stuck executor A — lock renewal off, a 1 s
#: lock, and no stall check of its own (ch. 26 §7): its check runs once an hour, so a
#: presenter may pause between cells as long as they like and B still sees the stall.
#: `await lab.start_worker("A", **STUCK)`.
STUCK: dict[str, Any] = {"renew_lock": False, "lock_duration_ms": 1000,
                         "stalled_interval_ms": 3_600_000}
#: The watchful executor B: checks for stalled jobs every 100 ms.
WATCHFUL: dict[str, Any] = {"stalled_interval_ms": 100}

#: How many product log lines a lab keeps (`lab.logs`), newest last.
_MAX_LOG_LINES = 5000

#: Settings a worker may not override: they are what isolates the lab.
_FIXED = frozenset({"database_url", "redis_url", "queue_prefix", "queue_name"})


@dataclass
class LabError:
    """One background failure: a worker `failed`/`error` event, a loop exception, or a
    clean-up step of `close()` that did not work."""

    #: Seconds since the lab opened.
    time: float
    #: "worker failed", "worker error", "worker run", "loop" or "close".
    source: str
    actor: str | None
    job_id: str | None
    message: str
    #: Acknowledged errors are expected ones: `close()` does not raise for them.
    acknowledged: bool = False

    def __str__(self) -> str:
        who = f" {self.actor}" if self.actor else ""
        job = f" job {self.job_id}" if self.job_id else ""
        ack = " (acknowledged)" if self.acknowledged else ""
        return f"[{self.time:7.3f}s] {self.source}{who}{job}: {self.message}{ack}"


def _error_matches(e: LabError, source: str | None = None, actor: str | None = None,
                   job_id: str | None = None, contains: str | None = None) -> bool:
    return ((source is None or e.source == source) and (actor is None or e.actor == actor)
            and (job_id is None or e.job_id == job_id)
            and (contains is None or contains in e.message))


class LabErrors(AssertionError):
    """Raised by `Lab.close()` / `Lab.check()`: background errors nobody acknowledged."""

    def __init__(self, name: str, errors: list[LabError]) -> None:
        self.errors = errors
        lines = "\n".join(f"  {e}" for e in errors)
        super().__init__(
            f"lab {name!r} saw {len(errors)} unacknowledged background error(s):\n{lines}\n"
            "If they were expected, call lab.acknowledge(...) before closing.")


# ---------------------------------------------------------------- loop exception handler

_LOOP_LABS: dict[asyncio.AbstractEventLoop, list[Lab]] = {}
#: Open labs of this process by name: opening a lab closes an earlier one of the same
#: name (a notebook's first cell, run again, starts from a clean world).
_OPEN_BY_NAME: dict[str, Lab] = {}
_LOOP_PREVIOUS: dict[asyncio.AbstractEventLoop, Any] = {}


def _loop_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    for lab in tuple(_LOOP_LABS.get(loop, ())):
        lab._on_loop_exception(context)
    previous = _LOOP_PREVIOUS.get(loop)
    if previous is not None:
        previous(loop, context)
    else:
        loop.default_exception_handler(context)


def _watch_loop(loop: asyncio.AbstractEventLoop, lab: Lab) -> None:
    if loop not in _LOOP_LABS:
        _LOOP_PREVIOUS[loop] = loop.get_exception_handler()
        loop.set_exception_handler(_loop_handler)
        _LOOP_LABS[loop] = []
    _LOOP_LABS[loop].append(lab)


def _unwatch_loop(loop: asyncio.AbstractEventLoop, lab: Lab) -> None:
    labs = _LOOP_LABS.get(loop)
    if labs is None or lab not in labs:
        return
    labs.remove(lab)
    if labs:
        return
    del _LOOP_LABS[loop]
    previous = _LOOP_PREVIOUS.pop(loop, None)
    if loop.get_exception_handler() is _loop_handler:  # never clobber someone else's
        loop.set_exception_handler(previous)


# ---------------------------------------------------------------- opening


class _Opening:
    """What `Lab.open()` returns: `await` it for a lab, or use it in `async with`."""

    def __init__(self, factory: Callable[[], Awaitable[Lab]]) -> None:
        self._factory = factory
        self._lab: Lab | None = None

    def __await__(self):
        return self._factory().__await__()

    def __repr__(self) -> str:
        return ("<Lab.open(...) not opened yet: use `lab = await Lab.open(...)` or "
                "`async with Lab.open(...) as lab:`>")

    async def __aenter__(self) -> Lab:
        self._lab = await self._factory()
        return self._lab

    async def __aexit__(self, *exc: Any) -> None:
        if self._lab is not None:
            await self._lab.__aexit__(*exc)


class Lab:
    """One isolated world: its own database, BullMQ prefix, workers, errors and history.

    Create it with `Lab.open(...)` (see there), never directly. Attributes a cell can use:

    - `settings` — the lab's `Settings` (its database URL and queue prefix included);
    - `sessions` — an `async_sessionmaker` on the lab's database;
    - `queue` — the lab's bullmq `Queue` (the dispatcher's queue);
    - `redis` — a plain fail-fast Redis client (same server);
    - `team` — the seeded demo team id (`"acme"`: ada admin, ben/cai agents,
      dan/eve/fay customers); `seeded` — what was seeded;
    - `workers` — name → running `TaskWorker`;
    - `recorder`, `history`, `errors` — see the module docstring.
    """

    def __init__(self, name: str, settings: Settings, close_timeout: float) -> None:
        self.name = name
        self.settings = settings
        self.close_timeout = close_timeout
        self.team = DEMO_TEAM
        self.seeded: SeedSummary | None = None
        self.started = time.monotonic()
        self.recorder = Recorder()
        self.history = History(start=self.started)
        self.workers: dict[str, TaskWorker] = {}
        self._errors: list[LabError] = []
        #: The product's log lines (INFO and up) from this lab's workers and scans.
        self.logs: collections.deque[str] = collections.deque(maxlen=_MAX_LOG_LINES)
        self._cleanups: list[Callable[[], Any]] = []
        self._gates: list[Gate | Fault] = []
        #: The lab's counterexample switches; each worker's fence reads them (per write).
        self._fences = counterexamples.LabFences()
        self._closing = False
        self._closed = False
        self._teardown_task: asyncio.Future[None] | None = None
        self._stopping: set[str] = set()
        self._engine: Any = None
        self.sessions: Any = None
        self.queue: Any = None
        self.redis: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._routed = False
        #: Monotonic time the current notebook step began (`labs.stage`): `wait_for`
        #: matches only worker events from then on, so a re-run never sees stale ones.
        self.step_began = 0.0
        #: This lab's own Redis server (`Lab.open(..., private_redis=True)`), else None.
        self.private_redis: PrivateRedis | None = None
        self.stage = _stage.Stage(self)
        self._open_args: dict[str, Any] = {}
        self._record: Any = None
        self._expecting: list[dict[str, Any]] = []

    # ------------------------------------------------------------ life cycle

    @classmethod
    def open(cls, name: str = "lab", *, settings: Settings | None = None, seed: bool = True,
             tickets: int = 300, close_timeout: float = 5.0, private_redis: bool = False,
             replace: bool | None = None, **timings: Any) -> _Opening:
        """Open a new lab world: `lab = await Lab.open()` or `async with Lab.open() as lab`.

        - `name` — a label for messages and `repr` (the prefix and database get random
          suffixes anyway, so two labs may share a name);
        - `settings` — where PostgreSQL and Redis are; default: `DATABASE_URL` /
          `REDIS_URL`, or the embedded servers started on demand (`devkit.services`);
        - `seed` / `tickets` — seed the demo team with that many tickets (same data every
          time);
        - `close_timeout` — seconds a worker may take to finish its job when closed before
          it is forced;
        - `private_redis` — run the lab on a Redis server of its own (`labs.private_redis`),
          so `private_redis.outage(lab)` stops it for real without hurting anyone else;
        - `**timings` — `Settings` fields for the whole lab, e.g. `backoff_delay_ms=30`,
          `redispatch_age_s=1` (per-worker timings go to `start_worker`).

        Re-running a notebook's first cell is safe: with `replace` (the default in a
        Jupyter kernel; elsewhere two labs may share a name) an open lab of the same
        `name` in this process is closed first (its errors are dropped: that world is
        being thrown away). Whatever labs of killed kernels left behind is removed
        (`labs.leftovers`).
        In a Jupyter kernel the lab also gets its `stage` (`labs.stage`: `# step:` cells).
        """
        bad = set(timings) & {"database_url", "queue_prefix"}
        if bad:
            raise ValueError(f"a lab chooses its own {', '.join(sorted(bad))}")

        if replace is None:
            replace = _stage.in_kernel()

        async def create() -> Lab:
            earlier = _OPEN_BY_NAME.pop(name, None) if replace else None
            if earlier is not None and not earlier.closed:
                await earlier.close(check=False)
            base = await asyncio.to_thread(services.resolve_settings, settings)
            await asyncio.to_thread(leftovers.clean, base.database_url, base.redis_url)
            if timings:
                base = base.replace(**timings)
            server = None
            if private_redis:
                server = await asyncio.to_thread(PrivateRedis().start)
                base = base.replace(redis_url=server.url)
            try:
                url = await asyncio.to_thread(clone_database, base.database_url,
                                              "teamdesk_lab")
            except BaseException:
                if server is not None:  # never leave a private server behind
                    await asyncio.to_thread(server.remove)
                raise
            lab = cls(name, base.replace(database_url=url,
                                         queue_prefix=f"lab{uuid.uuid4().hex[:10]}"),
                      close_timeout)
            lab.private_redis = server
            lab._open_args = dict(settings=settings, seed=seed, tickets=tickets,
                                  close_timeout=close_timeout, private_redis=private_redis,
                                  replace=replace, **timings)
            try:
                lab._record = await asyncio.to_thread(leftovers.record, lab)
                await lab._start(seed=seed, tickets=tickets)
            except BaseException:
                await lab.close(check=False)
                raise
            if replace:
                _OPEN_BY_NAME[name] = lab
            lab.stage = _stage.attach(lab)
            return lab

        return _Opening(create)

    async def _start(self, *, seed: bool, tickets: int) -> None:
        self._engine = create_engine(self.settings.database_url)
        self.sessions = session_factory(self._engine)
        self.queue = create_task_queue(self.settings)
        self.redis = redis_client(self.settings)
        self._unsubscribe = self.recorder.subscribe(self._on_worker_event)
        _scope.ROUTER.acquire()
        self._routed = True
        self._loop = asyncio.get_running_loop()
        _watch_loop(self._loop, self)
        if seed:
            async with self.sessions() as session:
                self.seeded = await seed_demo(session, tickets=tickets)

    async def __aenter__(self) -> Lab:
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            await self.close()
            return
        # Do not hide the body's own error; attach the background ones to it.
        pending = await self.close(check=False)
        if pending and isinstance(exc, Exception):
            exc.add_note(str(LabErrors(self.name, pending)))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        db = (self.settings.database_url or "").rsplit("/", 1)[-1]
        return (f"<Lab {self.name!r} {state} db={db} prefix={self.settings.queue_prefix} "
                f"workers={sorted(self.workers)} errors={len(self.unacknowledged)}>")

    @property
    def closed(self) -> bool:
        """True once `close()` has run."""
        return self._closed

    async def close(self, *, check: bool = True) -> list[LabError]:
        """Stop everything this lab started and delete what it created; idempotent.

        In order: release its gates and faults, close its workers (each: a bounded
        graceful close, then forced), run the `add_cleanup` callbacks (proxies), close its
        queue, delete every Redis key under its prefix, drop its database, restore the
        loop's exception handler. A step that fails is recorded in `lab.errors` (source
        "close") and the others still run. Two overlapping calls share one teardown.

        Returns the unacknowledged errors. With `check=True` (the default) it raises
        `LabErrors` listing them instead — every time it is called, so the failure is
        never lost. `check=False` just returns them.
        """
        if self._teardown_task is None:
            self._closing = True
            self._teardown_task = asyncio.ensure_future(self._teardown())
        await asyncio.shield(self._teardown_task)
        pending = self.unacknowledged
        if check and pending:
            raise LabErrors(self.name, pending)
        return pending

    async def _teardown(self) -> None:
        try:
            await self._release_everything()
        finally:
            self._closed = True

    async def _release_everything(self) -> None:
        for g in self._gates:
            g.close()
        self._gates.clear()
        for switch in list(self._fences.switches):
            switch.off()
        workers = list(self.workers.items())
        self.workers.clear()
        if workers:
            results = await asyncio.gather(
                *(w.close(timeout=self.close_timeout) for _, w in workers),
                return_exceptions=True)
            for (name, _), result in zip(workers, results, strict=True):
                if isinstance(result, BaseException):
                    self._close_problem(f"closing worker {name}", result)
        for cleanup in reversed(self._cleanups):
            try:
                result = cleanup()
                if inspect.isawaitable(result):
                    await asyncio.wait_for(result, self.close_timeout)
            except Exception as err:
                self._close_problem(f"cleanup {getattr(cleanup, '__qualname__', cleanup)}",
                                    err)
        self._cleanups.clear()
        timeout = max(self.settings.redis_timeout_s, 1.0) * 2
        if self.queue is not None:
            try:
                await asyncio.wait_for(self.queue.close(), timeout)
            except Exception as err:
                self._close_problem("closing the queue", err)
        if self.redis is not None:
            try:
                await asyncio.wait_for(self._delete_keys(), timeout * 3)
            except Exception as err:
                self._close_problem(
                    f"deleting the Redis keys under prefix {self.settings.queue_prefix!r} "
                    "(is Redis running?)", err)
            with contextlib.suppress(Exception):
                await self.redis.aclose()
        if self._engine is not None:
            with contextlib.suppress(Exception):
                await self._engine.dispose()
        try:
            await asyncio.to_thread(drop_database, self.settings.database_url)
        except Exception as err:
            self._close_problem("dropping the lab database", err)
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._routed:
            _scope.ROUTER.release()
            self._routed = False
        if self._loop is not None:
            _unwatch_loop(self._loop, self)
        if self.private_redis is not None:
            await asyncio.to_thread(self.private_redis.remove)
        leftovers.forget(self._record)
        _stage.detach(self.stage)
        if _OPEN_BY_NAME.get(self.name) is self:
            del _OPEN_BY_NAME[self.name]

    def add_cleanup(self, cleanup: Callable[[], Any]) -> None:
        """Have `close()` call `cleanup()` (sync or async, bounded by `close_timeout`)
        after the workers are closed and before the Redis keys and the database go; the
        last added runs first. `labs.faults.RedisProxy.start(lab)` uses it."""
        self._cleanups.append(cleanup)

    async def _delete_keys(self) -> int:
        keys = [k async for k in self.redis.scan_iter(match=f"{self.settings.queue_prefix}:*",
                                                      count=500)]
        for i in range(0, len(keys), 500):
            await self.redis.delete(*keys[i:i + 500])
        return len(keys)

    def _close_problem(self, what: str, err: BaseException) -> None:
        self._errors.append(LabError(self._now(), "close", None, None,
                                     f"{what} failed: {type(err).__name__}: {err}"))

    def _require_open(self) -> None:
        if self._closed or self._closing:
            raise RuntimeError(f"lab {self.name!r} is closed; open a new one with Lab.open()")

    # ------------------------------------------------------------ errors

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    @property
    def errors(self) -> list[LabError]:
        """Every background error seen so far (acknowledged ones included), in order."""
        return list(self._errors)

    @property
    def unacknowledged(self) -> list[LabError]:
        """The errors `close()` and `check()` would raise for."""
        return [e for e in self._errors if not e.acknowledged]

    def acknowledge(self, *, source: str | None = None, actor: str | None = None,
                    job_id: str | None = None, contains: str | None = None) -> int:
        """Mark matching errors as expected; returns how many were newly acknowledged.

        All filters given must match: `source` ("worker failed", "worker error",
        "worker run", "loop", "close"), `actor` (worker name), `job_id`, `contains` (a
        substring of the message). With no filter at all, every current error is acknowledged."""
        n = 0
        for e in self._errors:
            if e.acknowledged:
                continue
            if _error_matches(e, source, actor, job_id, contains):
                e.acknowledged = True
                n += 1
        return n

    def errors_of(self, *, source: str | None = None, actor: str | None = None,
                  job_id: str | None = None, contains: str | None = None) -> list[LabError]:
        """The errors matching every filter given (acknowledged or not): what a check cell
        asserts on — it does not change when the cell runs again."""
        return [e for e in self._errors if _error_matches(e, source, actor, job_id, contains)]

    @contextlib.contextmanager
    def expect_errors(self, *, source: str | None = None, actor: str | None = None,
                      job_id: str | None = None, contains: str | None = None
                      ) -> Any:
        """Around an action that is *meant* to cause background errors (a retry scenario,
        the late executor of a takeover race): matching errors that arrive while the block
        runs are acknowledged — expected, so `close()` does not raise for them.

            with lab.expect_errors(source="worker error", actor="A"):
                gate_a.release()
                await lab.wait_for("error", actor="A", timeout=T)
        """
        expectation = {"source": source, "actor": actor, "job_id": job_id,
                       "contains": contains}
        start = len(self._errors)
        self._expecting.append(expectation)
        try:
            yield self
        finally:
            self._expecting.remove(expectation)
            for e in self._errors[start:]:
                if _error_matches(e, source, actor, job_id, contains):
                    e.acknowledged = True

    async def start_over(self) -> Lab:
        """Close this lab and open a fresh one with the same name and options: a race
        begins again from its first step (the notebook's "start the race over" cell:
        `lab = await lab.start_over()`). Errors of the old world are dropped, not raised —
        it is being thrown away. The new stage keeps the board function. Before any step
        has run there is nothing to start over: it returns this lab as it is."""
        if not self.stage.steps:
            print("nothing to start over: no step has run yet")
            return self
        board = self.stage.board
        await self.close(check=False)
        fresh = await Lab.open(self.name, **self._open_args)
        fresh.stage.board = board
        return fresh

    def check(self) -> None:
        """Raise `LabErrors` now if there are unacknowledged background errors (for an
        assertion cell in the middle of a notebook)."""
        if self.unacknowledged:
            raise LabErrors(self.name, self.unacknowledged)

    def _on_worker_event(self, event: dict[str, Any]) -> None:
        self.history.on_worker_event(event)
        if event.get("kind") in ("failed", "error"):
            error = LabError(
                round(event["t"] - self.started, 3), f"worker {event['kind']}",
                event.get("actor"), event.get("job_id"), str(event.get("error")),
                acknowledged=self._closing or event.get("actor") in self._stopping)
            if any(_error_matches(error, **x) for x in self._expecting):
                error.acknowledged = True
            self._errors.append(error)

    def _on_loop_exception(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message") or "")
        if exc is not None:
            message = f"{message}: {type(exc).__name__}: {exc}" if message else (
                f"{type(exc).__name__}: {exc}")
        self._errors.append(LabError(self._now(), "loop", None, None, message,
                                     acknowledged=self._closing))
        self.history.add(actor="loop", type="info", op="loop exception", detail=message)

    # ------------------------------------------------------------ routing (labs._scope)

    def _on_probe(self, point: str, ctx: dict[str, Any], actor: str | None) -> None:
        self.history.on_probe(point, ctx, actor)

    def _on_log(self, record: Any, actor: str | None) -> None:
        self.logs.append(f"{self._now():8.3f} {record.levelname:<7} {actor or '-':<10} "
                         f"{record.getMessage()}")
        self.history.on_log(record, actor)

    def _mine(self, ctx: dict[str, Any]) -> bool:
        scope = _scope.current()
        return scope is not None and scope.sink is self

    # ------------------------------------------------------------ workers

    async def start_worker(self, name: str = "W", *, renew_lock: bool = True,
                           options: dict[str, Any] | None = None,
                           redis_url: str | None = None, **timings: Any) -> TaskWorker:
        """Start an in-process task worker named `name` (its actor label in gates, logs
        and the history), built by the product's `create_task_worker`.

        A worker of the same name is closed first, so a re-run notebook cell never
        leaves two running. Options:

        - `renew_lock=False` — never renew the job lock (the stuck executor);
        - `**timings` — Settings fields for this worker only, e.g.
          `lock_duration_ms=1000`, `stalled_interval_ms=100`, `backoff_delay_ms=30`,
          `export_limit=5`; presets: `**STUCK` (A) and `**WATCHFUL` (B);
        - `options` — raw BullMQ worker options (camelCase), applied last;
        - `redis_url` — connect through another address of the same Redis, e.g. a
          `labs.faults.RedisProxy`'s `url`, to cut this worker alone.

        Returns the `TaskWorker`; `lab.stop_worker(name)` closes it."""
        self._require_open()
        bad = set(timings) & _FIXED
        if bad:
            raise ValueError(f"{', '.join(sorted(bad))} cannot change per worker: they "
                             "isolate the lab (use redis_url= for a proxy)")
        await self.stop_worker(name)
        settings = self.settings.replace(**timings)
        if redis_url:
            settings = settings.replace(redis_url=redis_url)
        scope = _scope.Scope(self, name)
        ctx = contextvars.copy_context()
        ctx.run(_scope.SCOPE.set, scope)
        # Created and started inside the lab's context: every task the worker spawns
        # (its run loop, each job) inherits it, so probes know whose crossing it is.
        worker = await asyncio.create_task(create_task_worker(
            settings, actor=name, renew_lock=renew_lock, options=options,
            on_event=self.recorder, start=False, fence=self._fences.fence_for(name),
            on_run_error=self._on_run_error), context=ctx)
        worker.worker.on("active", self._active_listener(name))
        ctx.run(worker.start)
        self.workers[name] = worker
        return worker

    def _on_run_error(self, worker: TaskWorker, err: Exception) -> None:
        """The `on_run_error` hook of this lab's workers: a crash of a worker's run loop goes
        into `lab.errors` when it happens, not when the finished task is garbage-collected
        ("Task exception was never retrieved"), at a random later moment and in whatever
        lab is open then. A crash while the worker or the lab is closing (bullmq's run loop
        can trip over its own connection being closed during start-up) is recorded as
        acknowledged."""
        closing = worker.closing or self._closing
        self._errors.append(LabError(
            self._now(), "worker run", worker.name, None,
            f"the worker's run loop ended with {type(err).__name__}: {err}"
            + (" (while closing)" if closing else ""), acknowledged=closing))
        self.history.add(actor=worker.name, type="info", op="worker error",
                         detail=f"run loop ended: {type(err).__name__}: {err}")

    def _active_listener(self, name: str) -> Callable[..., None]:
        def on_active(job: Any, *args: Any) -> None:
            data = job.data if isinstance(job.data, dict) else {}
            self.recorder("active", {"actor": name, "task_id": data.get("taskId"),
                                     "run": data.get("run"), "job_id": job.id})
        return on_active

    async def stop_worker(self, name: str, timeout: float | None = None) -> bool | None:
        """Close the worker `name`: it stops taking jobs, its running job gets `timeout`
        seconds (default `close_timeout`) to finish, then it is forced. Returns True if it
        closed gracefully, False if forced, None if there was no such worker. A job held
        at a gate only finishes once the gate is released."""
        worker = self.workers.pop(name, None)
        if worker is None:
            return None
        self._stopping.add(name)
        try:
            return await worker.close(timeout=self.close_timeout if timeout is None else timeout)
        finally:
            self._stopping.discard(name)

    async def stop_workers(self) -> None:
        """Close every worker of this lab (concurrently, each bounded)."""
        names = list(self.workers)
        await asyncio.gather(*(self.stop_worker(n) for n in names))

    # ------------------------------------------------------------ gates, faults, events

    def gate(self, point: str, *, actor: str | None = None,
             when: Callable[[dict[str, Any]], bool] | None = None,
             timeout: float = DEFAULT_TIMEOUT_S) -> Gate:
        """A `labs.gates.Gate` that only catches this lab's executors (and `actor`, if
        given); its pause and release appear in the history; `close()` releases it."""
        self._require_open()
        # A re-run cell (or a step tried again) must not leave its first gate installed:
        # an unreleased gate at the same point for the same actor would catch the
        # crossing meant for the new one. It is replaced (closed: uninstalled, and an
        # executor it holds is let go).
        for old in [x for x in self._gates if isinstance(x, Gate) and x.point == point
                    and x.actor == actor and not x.is_released]:
            old.close()
            self._gates.remove(old)
        g = Gate(point, actor=actor, timeout=timeout,
                 when=lambda ctx: self._mine(ctx) and (when is None or when(ctx)),
                 observer=lambda event, ctx: self.history.on_gate("gate", point, event, ctx))
        self._gates.append(g)
        return g

    def fault(self, point: str, error: BaseException, *, actor: str | None = None,
              when: Callable[[dict[str, Any]], bool] | None = None, times: int = 1) -> Fault:
        """A `labs.gates.Fault`: raise `error` at the next `times` crossings of `point` by
        this lab's executors (and `actor`, if given). Recorded in the history."""
        self._require_open()
        f = Fault(point, error, actor=actor, times=times,
                  when=lambda ctx: self._mine(ctx) and (when is None or when(ctx)),
                  observer=lambda event, ctx: self.history.on_gate("fault", point, event, ctx))
        self._gates.append(f)
        return f

    def counterexample(self, bug: str, *, actor: str | None = None) -> counterexamples.Switch:
        """Switch on an old fence (`labs.counterexamples.BUGS`: "forgot-row-count",
        "status-only-guard") for this lab's executors only, and only `actor`'s if given:
        learners watch the bug happen without editing the product. It reaches the lab's
        workers through the fence each was started with (`create_task_worker(fence=...)`),
        running or started later. `switch.off()` or `close()` turns it off; switching the
        same bug on again replaces the first."""
        self._require_open()
        for old in [s for s in self._fences.switches if s.bug == bug and s.actor == actor]:
            old.off()
        return self._fences.switch_on(bug, actor)

    async def wait_for(self, kind: str, timeout: float = DEFAULT_TIMEOUT_S,
                       where: Callable[[dict[str, Any]], bool] | None = None,
                       since: float | None = None, **match: Any) -> dict[str, Any]:
        """Wait (bounded) for a worker event of this lab: `kind` is "active",
        "completed", "failed", "stalled" or "error"; `match` compares fields such as
        `actor="B"`, `job_id="T7KQ2M-0"`, `task_id=...`. Returns the event.

        Only events at or after `since` (a `time.monotonic()` value) match; by default
        the moment the current notebook step began (`step_began`, 0 outside a
        `# step:` cell), so a step tried again never returns the first try's event."""
        after = self.step_began if since is None else since
        return await self.recorder.wait_for(
            kind, timeout=timeout,
            where=lambda e: e["t"] >= after and (where is None or where(e)), **match)

    # ------------------------------------------------------------ the dispatcher

    async def dispatch(self, *, queue: Any = None) -> Any:
        """Run one dispatcher scan (`teamdesk.tasks.dispatcher.dispatch_tasks`) on this
        lab and return its `DispatchReport` (scanned, added, refreshed, re_added,
        failed_from_queue, recovered_stale, purged, failed_stalled).

        The dispatcher compares times in the database's clock (D6 made precise), so its
        clock cannot be moved from here: age a task instead (`await lab.age(task_id, 121)`
        makes a RUNNING row look stale, D6). `queue` replaces the lab's queue (e.g. one
        built on a proxy's settings). A failing scan raises here, in your cell, and is
        recorded in the history."""
        from teamdesk.tasks.dispatcher import dispatch_tasks

        self._require_open()
        token = _scope.SCOPE.set(_scope.Scope(self, "dispatcher"))
        self.history.add(actor="dispatcher", type="invoke", op="dispatch", detail="")
        try:
            report = await dispatch_tasks(queue or self.queue, self.settings)
        except Exception as err:
            self.history.add(actor="dispatcher", type="fail", op="dispatch",
                             detail=f"{type(err).__name__}: {err}")
            raise
        finally:
            _scope.SCOPE.reset(token)
        self.history.add(actor="dispatcher", type="ok", op="dispatch", detail=str(report))
        return report

    async def age(self, task_id: str, seconds: float) -> None:
        """Compress the clock for one task: move its `updated_at`, `dispatched_at` and
        `expires_at` `seconds` into the past, as if that much time had passed since each
        was stamped (D1's 30 s re-check, D6's 120 s stale age, D7's expiry). An UPDATE that
        sets `updated_at` itself keeps its value (the migration's trigger)."""
        from sqlalchemy import text, update

        self._require_open()
        shift = text(f"interval '{float(seconds)} seconds'")
        t = BackgroundTask
        async with self.sessions() as session, session.begin():
            await session.execute(update(t).where(t.id == task_id).values(
                updated_at=t.updated_at - shift, dispatched_at=t.dispatched_at - shift,
                expires_at=t.expires_at - shift))

    # ------------------------------------------------------------ services (thin wrappers)

    async def create_ticket(self, title: str = "Call the customer back", *,
                            actor: str = "eve", due_at: datetime | None = None,
                            assignee_id: str | None = None,
                            priority: Priority | str = Priority.NORMAL,
                            ) -> tuple[Ticket, BackgroundTask | None]:
        """`teamdesk.services.tickets.create_ticket` in the demo team: the ticket, its
        `created` event and (with `due_at`) its REMINDER task, in one transaction (O1).
        Returns (ticket, reminder task or None)."""
        async with self.sessions() as session:
            return await ticket_services.create_ticket(
                session, self.team, actor, title, priority=priority, due_at=due_at,
                assignee_id=assignee_id)

    async def set_due_date(self, ticket_id: int, due_at: datetime | None, *,
                           actor: str = "ben") -> tuple[Ticket, BackgroundTask | None]:
        """`teamdesk.services.tickets.set_due_date`: earlier reminders become no-ops, a
        new REMINDER task is written for the new revision (O3)."""
        async with self.sessions() as session:
            return await ticket_services.set_due_date(session, self.team, actor, ticket_id,
                                                      due_at)

    async def request_export(self, filters: dict[str, Any] | None = None, *,
                             user: str = "ben", scope: Scope | str | None = None
                             ) -> BackgroundTask:
        """`teamdesk.services.exports.request_export` in the demo team: writes an EXPORT
        task (WAITING, run 0, not dispatched) and nothing else (O1, O4). `user` "ben" is
        an agent (team scope); "dan" a customer (own tickets)."""
        async with self.sessions() as session:
            return await export_services.request_export(
                session, self.team, user, filters, scope=scope, settings=self.settings)

    async def retry(self, task_id: str, *, user: str = "ben") -> BackgroundTask:
        """`teamdesk.services.tasks.retry_task`: a FAILED task opens run+1 (R1, R2)."""
        async with self.sessions() as session:
            return await task_services.retry_task(session, self.team, user, task_id)

    async def task(self, task_id: str) -> BackgroundTask:
        """The ledger row of `task_id`, read now (`KeyError` if this lab has no such task)."""
        async with self.sessions() as session:
            task = await session.scalar(select(BackgroundTask).where(
                BackgroundTask.id == task_id))
        if task is None:
            raise KeyError(f"no task {task_id!r} in lab {self.name!r}")
        return task

    async def enqueue(self, task_id: str, run: int | None = None, **opts: Any) -> Any:
        """Add the task's job exactly as the dispatcher does (D2: name "execute", data
        `{taskId, run}`, job id `<task>-<run>`), without touching the ledger. `run`
        defaults to the ledger's current run; `opts` are extra BullMQ job options.
        A shortcut for cells that are not about dispatching."""
        if run is None:
            run = (await self.task(task_id)).run
        return await self.queue.add(JOB_NAME, {"taskId": task_id, "run": run},
                                    {"jobId": task_job_id(task_id, run), **opts})

    async def job(self, task_id: str, run: int | None = None) -> Any:
        """The queue's job for that task run (default: the ledger's current run), or None."""
        if run is None:
            run = (await self.task(task_id)).run
        return await self.queue.getJob(task_job_id(task_id, run))
