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

`Lab` is a facade: the world itself (database + prefix + their clean-up) is a
`devkit.world.World`; the error book is `labs.errors`; the workers, gates, faults and
fences are `labs.workers.Crew`; probe, log and loop-exception routing, and the one
registry of open labs, are `labs.routing`; the thin calls into the product are
`labs.calls`. Notebooks, scenes and tests only ever need `Lab` and its attributes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from devkit import services
from devkit.world import World
from labs import cases, counterexamples, leftovers
from labs import stage as _stage
from labs.calls import ProductCalls
from labs.errors import ErrorBook, LabError, LabErrors
from labs.gates import DEFAULT_TIMEOUT_S, Fault, Gate
from labs.history import History
from labs.i18n import say
from labs.private_redis import PrivateRedis
from labs.recorder import Recorder
from labs.routing import REGISTRY, Routes
from labs.workers import Crew
from teamdesk.config import Settings
from teamdesk.seed import DEMO_TEAM, SeedSummary, seed_demo
from teamdesk.tasks.queue import create_task_queue, redis_client
from teamdesk.tasks.worker import TaskWorker

__all__ = ["STUCK", "WATCHFUL", "Lab", "LabError", "LabErrors"]

#: Worker options of the takeover race: the stuck executor A — lock renewal off, a 1 s
#: lock, and no stall check of its own (ch. 26 §7): its check runs once an hour, so a
#: presenter may pause between cells as long as they like and B still sees the stall.
#: `await lab.start_worker("A", **STUCK)`.
STUCK: dict[str, Any] = {"renew_lock": False, "lock_duration_ms": 1000,
                         "stalled_interval_ms": 3_600_000}
#: The watchful executor B: checks for stalled jobs every 100 ms.
WATCHFUL: dict[str, Any] = {"stalled_interval_ms": 100}


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


class Lab(ProductCalls):
    """One isolated world: its own database, BullMQ prefix, workers, errors and history.

    Create it with `Lab.open(...)` (see there), never directly. Attributes a cell can use:

    - `settings` — the lab's `Settings` (its database URL and queue prefix included);
    - `sessions` — an `async_sessionmaker` on the lab's database;
    - `queue` — the lab's bullmq `Queue` (the dispatcher's queue);
    - `redis` — a plain fail-fast Redis client (same server);
    - `team` — the seeded demo team id (`"acme"`: ada admin, ben/cai agents,
      dan/eve/fay customers); `seeded` — what was seeded;
    - `workers` — name → running `TaskWorker`;
    - `recorder`, `history`, `errors`, `logs` — see the module docstring.
    """

    def __init__(self, name: str, world: World, close_timeout: float) -> None:
        self.name = name
        self.world = world
        self.settings = world.settings
        self.sessions: Any = world.sessions
        self.close_timeout = close_timeout
        self.team = DEMO_TEAM
        self.seeded: SeedSummary | None = None
        self.started = time.monotonic()
        self.recorder = Recorder()
        self.history = History(start=self.started)
        self.routes = Routes(self.history, self.started)
        self.book = ErrorBook(name, self.started, self.history, lambda: self._closing)
        self.crew = Crew(self.settings, recorder=self.recorder, history=self.history,
                         book=self.book, routes=self.routes, close_timeout=close_timeout)
        #: name → running `TaskWorker` (the crew's own dict).
        self.workers: dict[str, TaskWorker] = self.crew.workers
        self._cleanups: list[Callable[[], Any]] = []
        self._closing = False
        self._closed = False
        self._teardown_task: asyncio.Future[None] | None = None
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

    @property
    def logs(self) -> collections.deque[str]:
        """The product's log lines (INFO and up) from this lab's workers and scans."""
        return self.routes.logs

    @property
    def gates(self) -> list[Gate | Fault]:
        """The gates and faults of this lab not closed yet (a copy): `labs.locks` names
        the executor a gate holds inside the team lock."""
        return list(self.crew.gates)

    @property
    def _fences(self) -> counterexamples.LabFences:
        """The lab's counterexample switches (`counterexample`); tests inspect them."""
        return self.crew.fences

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
        open_args = dict(settings=settings, seed=seed, tickets=tickets,
                         close_timeout=close_timeout, private_redis=private_redis,
                         replace=replace, **timings)

        async def create() -> Lab:
            earlier = REGISTRY.take(name) if replace else None
            if earlier is not None and not earlier.closed:
                await earlier.close(check=False)
            world, server = await cls._new_world(settings, private_redis, timings)
            lab = cls(name, world, close_timeout)
            lab.private_redis = server
            lab._open_args = open_args
            try:
                lab._record = await asyncio.to_thread(leftovers.record, lab)
                await lab._start(seed=seed, tickets=tickets)
            except BaseException:
                await lab.close(check=False)
                raise
            if replace:
                REGISTRY.name(name, lab)
            lab.stage = _stage.attach(lab)
            return lab

        return _Opening(create)

    @staticmethod
    async def _new_world(settings: Settings | None, private_redis: bool,
                         timings: dict[str, Any]) -> tuple[World, PrivateRedis | None]:
        """Resolve the servers, clean killed kernels' leftovers, start a private Redis if
        asked, and open the lab's world (`devkit.world.World`, label "lab")."""
        base = await asyncio.to_thread(services.resolve_settings, settings)
        await leftovers.clean(base.database_url, base.redis_url)
        if timings:
            base = base.replace(**timings)
        server = None
        if private_redis:
            server = await asyncio.to_thread(PrivateRedis().start)
            base = base.replace(redis_url=server.url)
        try:
            return await World.open_async(base, "lab"), server
        except BaseException:
            if server is not None:  # never leave a private server behind
                await asyncio.to_thread(server.remove)
            raise

    async def _start(self, *, seed: bool, tickets: int) -> None:
        self.queue = create_task_queue(self.settings)
        self.redis = redis_client(self.settings)
        self._unsubscribe = self.recorder.subscribe(self.crew.on_worker_event)
        REGISTRY.acquire()
        self._routed = True
        self._loop = asyncio.get_running_loop()
        REGISTRY.watch_loop(self._loop, self.book)
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
            await self.crew.close()
            await self._run_cleanups()
            await self._close_clients()
            await self.world.close(on_problem=self.book.close_problem,
                                   timeout=max(self.settings.redis_timeout_s, 1.0) * 6)
            self._leave()
            if self.private_redis is not None:
                await asyncio.to_thread(self.private_redis.remove)
        finally:
            self._closed = True

    async def _run_cleanups(self) -> None:
        for cleanup in reversed(self._cleanups):
            try:
                result = cleanup()
                if inspect.isawaitable(result):
                    await asyncio.wait_for(result, self.close_timeout)
            except Exception as err:
                self.book.close_problem(
                    f"cleanup {getattr(cleanup, '__qualname__', cleanup)}", err)
        self._cleanups.clear()

    async def _close_clients(self) -> None:
        if self.queue is not None:
            try:
                await asyncio.wait_for(self.queue.close(),
                                       max(self.settings.redis_timeout_s, 1.0) * 2)
            except Exception as err:
                self.book.close_problem("closing the queue", err)
        if self.redis is not None:
            with contextlib.suppress(Exception):
                await self.redis.aclose()

    def _leave(self) -> None:
        """Leave the registry (routing, the loop's handler, the name), the leftovers
        record and the stage."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._routed:
            REGISTRY.release()
            self._routed = False
        if self._loop is not None:
            REGISTRY.unwatch_loop(self._loop, self.book)
        leftovers.forget(self._record)
        _stage.detach(self.stage)
        REGISTRY.unname(self.name, self)

    def add_cleanup(self, cleanup: Callable[[], Any]) -> None:
        """Have `close()` call `cleanup()` (sync or async, bounded by `close_timeout`)
        after the workers are closed and before the Redis keys and the database go; the
        last added runs first. `labs.faults.RedisProxy.start(lab)` uses it."""
        self._cleanups.append(cleanup)

    def _require_open(self) -> None:
        if self._closed or self._closing:
            raise RuntimeError(f"lab {self.name!r} is closed; open a new one with Lab.open()")

    async def start_over(self) -> Lab:
        """Close this lab and open a fresh one with the same name and options: a race
        begins again from its first step (the notebook's "start the race over" cell:
        `lab = await lab.start_over()`). Errors of the old world are dropped, not raised —
        it is being thrown away. The new stage keeps the board function. Before any step
        has run there is nothing to start over: it returns this lab as it is."""
        if not self.stage.steps:
            print(say("lab.start-over.nothing", "nothing to start over: no step has run yet"))
            return self
        board = self.stage.board
        await self.close(check=False)
        fresh = await Lab.open(self.name, **self._open_args)
        fresh.stage.board = board
        return fresh

    # ------------------------------------------------------------ errors (labs.errors)

    @property
    def errors(self) -> list[LabError]:
        """Every background error seen so far (acknowledged ones included), in order."""
        return self.book.all

    @property
    def unacknowledged(self) -> list[LabError]:
        """The errors `close()` and `check()` would raise for."""
        return self.book.unacknowledged

    def acknowledge(self, *, source: str | None = None, actor: str | None = None,
                    job_id: str | None = None, contains: str | None = None) -> int:
        """Mark matching errors as expected; returns how many were newly acknowledged.

        All filters given must match: `source` ("worker failed", "worker error",
        "worker run", "loop", "close"), `actor` (worker name), `job_id`, `contains` (a
        substring of the message). With no filter at all, every current error is acknowledged."""
        return self.book.acknowledge(source=source, actor=actor, job_id=job_id,
                                     contains=contains)

    def errors_of(self, *, source: str | None = None, actor: str | None = None,
                  job_id: str | None = None, contains: str | None = None) -> list[LabError]:
        """The errors matching every filter given (acknowledged or not): what a check cell
        asserts on — it does not change when the cell runs again."""
        return self.book.matching(source=source, actor=actor, job_id=job_id,
                                  contains=contains)

    @contextlib.contextmanager
    def expect_errors(self, *, source: str | None = None, actor: str | None = None,
                      job_id: str | None = None, contains: str | None = None
                      ) -> Iterator[Lab]:
        """Around an action that is *meant* to cause background errors (a retry scenario,
        the late executor of a takeover race): matching errors that arrive while the block
        runs are acknowledged — expected, so `close()` does not raise for them.

            with lab.expect_errors(source="worker error", actor="A"):
                gate_a.release()
                await lab.wait_for("error", actor="A", timeout=T)
        """
        with self.book.expect(source=source, actor=actor, job_id=job_id, contains=contains):
            yield self

    def check(self) -> None:
        """Raise `LabErrors` now if there are unacknowledged background errors (for an
        assertion cell in the middle of a notebook)."""
        self.book.check()

    # ------------------------------------------------------------ workers (labs.workers)

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
        return await self.crew.start(name, renew_lock=renew_lock, options=options,
                                     redis_url=redis_url, timings=timings)

    async def stop_worker(self, name: str, timeout: float | None = None) -> bool | None:
        """Close the worker `name`: it stops taking jobs, its running job gets `timeout`
        seconds (default `close_timeout`) to finish, then it is forced. Returns True if it
        closed gracefully, False if forced, None if there was no such worker. A job held
        at a gate only finishes once the gate is released."""
        return await self.crew.stop(name, timeout)

    async def stop_workers(self) -> None:
        """Close every worker of this lab (concurrently, each bounded)."""
        await self.crew.stop_all()

    def gate(self, point: str, *, actor: str | None = None,
             when: Callable[[dict[str, Any]], bool] | None = None,
             timeout: float = DEFAULT_TIMEOUT_S) -> Gate:
        """A `labs.gates.Gate` that only catches this lab's executors (and `actor`, if
        given); its pause and release appear in the history; `close()` releases it. A
        re-run cell's unreleased gate at the same point for the same actor is replaced."""
        self._require_open()
        return self.crew.gate(point, actor=actor, when=when, timeout=timeout)

    def fault(self, point: str, error: BaseException, *, actor: str | None = None,
              when: Callable[[dict[str, Any]], bool] | None = None, times: int = 1) -> Fault:
        """A `labs.gates.Fault`: raise `error` at the next `times` crossings of `point` by
        this lab's executors (and `actor`, if given). Recorded in the history."""
        self._require_open()
        return self.crew.fault(point, error, actor=actor, when=when, times=times)

    def counterexample(self, bug: str, *, actor: str | None = None) -> counterexamples.Switch:
        """Switch on an old fence (a name of `labs.fences.COUNTEREXAMPLES`:
        "forgot-row-count", "status-only-guard", "separate-effects", "lease-less-export")
        for this lab's executors only, and only `actor`'s if given:
        learners watch the bug happen without editing the product. It reaches the lab's
        workers through the fence each was started with (`create_task_worker(fence=...)`),
        running or started later. `switch.off()` or `close()` turns it off; switching the
        same bug on again replaces the first."""
        self._require_open()
        return self.crew.counterexample(bug, actor)

    def use_fence(self, fence: Any, *, actor: str | None = None) -> counterexamples.Switch:
        """Run `fence` — a `teamdesk.tasks.lease.Fence`, e.g. one a learner wrote
        (`labs.fences.where_fence`) — for this lab's executors, or only `actor`'s,
        instead of the product's `leased_update`; through the same seam as the
        counterexamples (`create_task_worker(fence=...)`). `switch.off()` or `close()`
        restores the product's."""
        self._require_open()
        return self.crew.use_fence(fence, actor)

    async def case(self, name: str) -> cases.Case:
        """Stage the diagnosis case `name` (`labs.cases`) in this lab with the real system
        and return it: `case.show()` the evidence, `case.judge(cause=, rule=)` the
        learner's diagnosis."""
        self._require_open()
        return await cases.open_case(self, name)

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

    async def done_with(self, job_id: str, timeout: float = DEFAULT_TIMEOUT_S,
                        since: float | None = None) -> dict[str, Any]:
        """Wait (bounded) until the queue is done with job `job_id`, whichever way: its
        `completed` event, or the `failed` event after which no attempt follows
        (`exhausted`); only events at or after `since`, as `wait_for`. Returns that event.
        For a step whose outcome the learner has just predicted, so the cell names no
        outcome before it runs; the job's errors are expected either way (acknowledged,
        also those that came before the wait)."""
        with self.expect_errors(job_id=job_id):
            waits = [asyncio.ensure_future(self.wait_for("completed", timeout, since=since,
                                                         job_id=job_id)),
                     asyncio.ensure_future(self.wait_for(
                         "failed", timeout, where=lambda e: bool(e.get("exhausted")),
                         since=since, job_id=job_id))]
            try:
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
            event = next(iter(done)).result()
        self.acknowledge(job_id=job_id)
        return event

