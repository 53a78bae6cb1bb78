"""`create_task_worker`: the one place that builds the BullMQ worker (W1, W2).

Tests, labs and the worker process all call it, so they run the same processor with the
same listeners. What a caller may vary is a parameter, never a patch: the ledger
(`ledger=`), the fence every fenced write goes through (`fence=`, P3), the reminder's
effect-writing step (`reminder_effects=`, P10), a listener of events
(`on_event=`) and of a crashed run loop (`on_run_error=`).

The listeners only log (W2): the `failed` event carries no execution id, and
`task_id + run` is not a lease, so a listener that wrote the ledger could fail a newer
execution (ch. 26 §7). Terminal states come from the processor's fenced error write and
the dispatcher's reconciliation (W3).

Measured quirks of the Python port handled here: a worker must be created inside a
running loop; sub-second backoff only works once the worker knows the Redis version, so
we ask before `run()`; `lockRenewTime: 0` turns renewal off (the "stuck" executor of the
takeover tests); `failed` fires on every attempt, so exhaustion is computed from
`attemptsMade` after the move; `worker.close()` can hang forever, so closing is bounded
and then forced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from bullmq import Worker
from bullmq.custom_errors import UnrecoverableError

from teamdesk.config import Settings
from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.lease import Fence, leased_update
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.processor import process_task
from teamdesk.tasks.queue import MAX_TASK_ATTEMPTS, redis_client
from teamdesk.tasks.reminder_effects import ReminderEffects, write_reminder_effects

log = logging.getLogger("teamdesk.worker")

#: `on_event(kind, fields)` receives every listener event (for lab histories and tests).
EventHook = Callable[[str, dict[str, Any]], None]
#: `on_run_error(worker, error)`: the worker's run loop (bullmq's fetch loop, not a job)
#: ended with `error`. Called when it happens; `worker.closing` says whether it was closing.
RunErrorHook = Callable[["TaskWorker", Exception], None]


def is_exhausted(job: Any, err: BaseException) -> bool:
    """W2: the attempt budget is used up, or the error ends the job (UnrecoverableError,
    which includes permanent rejection). Never guessed from the error's text."""
    attempts = (job.opts or {}).get("attempts", MAX_TASK_ATTEMPTS)
    return isinstance(err, UnrecoverableError) or job.attemptsMade >= attempts


def _task_fields(job: Any) -> dict[str, Any]:
    data = job.data if isinstance(job.data, dict) else {}
    return {"task_id": data.get("taskId"), "run": data.get("run"), "job_id": job.id}


class TaskWorker:
    """A running BullMQ worker for the task queue, with bounded shutdown.

    `on_run_error` (see `RunErrorHook`) hears of a run loop that ended with an error at the
    moment it ends; without it the error stays in the run task, where asyncio reports it
    only when the task is garbage-collected ("Task exception was never retrieved")."""

    def __init__(self, worker: Worker, ctx: TaskContext, *,
                 owns_ledger: bool = False, on_run_error: RunErrorHook | None = None) -> None:
        self.worker = worker
        self.ctx = ctx
        self.on_run_error = on_run_error
        self._owns_ledger = owns_ledger
        self._closing = False
        self._run_task: asyncio.Task | None = None

    @property
    def name(self) -> str | None:
        return self.ctx.actor

    @property
    def closing(self) -> bool:
        """True once `close()` was called (or bullmq's worker is closing on its own)."""
        return self._closing or bool(getattr(self.worker, "closing", False))

    def start(self) -> None:
        """Run the worker's fetch loop in a task of the current context."""
        self._run_task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            await self.worker.run()
        except Exception as err:
            if self.on_run_error is None:
                raise
            self.on_run_error(self, err)

    async def close(self, timeout: float = 5.0) -> bool:
        """Stop taking jobs and let the running one finish within `timeout`; then force.

        Returns True if the graceful close finished in time. `worker.close()` swallows
        cancellation, so it runs as its own task and we stop waiting instead of cancelling.
        """
        self._closing = True
        graceful = asyncio.ensure_future(self.worker.close())
        done, _ = await asyncio.wait({graceful}, timeout=timeout)
        if not done:
            log.warning("worker.close_timeout actor=%s timeout=%ss: forcing", self.name, timeout)
            forced = asyncio.ensure_future(self.worker.close(force=True))
            await asyncio.wait({forced, graceful}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        if self._run_task is not None:
            await asyncio.wait({self._run_task}, timeout=timeout)
            if not self._run_task.done():
                self._run_task.cancel()
        with contextlib.suppress(Exception):
            await self.worker.redisConnection.close()
        if self._owns_ledger and self.ctx.ledger is not None:
            # The pool create_task_worker made; a ledger passed in belongs to the caller.
            with contextlib.suppress(Exception):
                await self.ctx.ledger.close()
        return bool(done)


def _attach_listeners(worker: Worker, actor: str | None, on_event: EventHook | None) -> None:
    def emit(kind: str, fields: dict[str, Any]) -> None:
        if on_event is not None:
            on_event(kind, {"actor": actor, **fields})

    def on_failed(job: Any, err: BaseException) -> None:
        f = _task_fields(job)
        exhausted = is_exhausted(job, err)
        log.warning("task.failed task_id=%s run=%s job_id=%s attempts_made=%s exhausted=%s "
                    "error=%s", f["task_id"], f["run"], f["job_id"], job.attemptsMade,
                    str(exhausted).lower(), type(err).__name__)
        emit("failed", {**f, "attempts_made": job.attemptsMade, "exhausted": exhausted,
                        "error": f"{type(err).__name__}: {err}"})

    def on_stalled(job_id: str, *args: Any) -> None:
        log.warning("task.stalled job_id=%s actor=%s", job_id, actor)
        emit("stalled", {"job_id": job_id})

    def on_completed(job: Any, result: Any) -> None:
        f = _task_fields(job)
        log.info("task.completed task_id=%s run=%s job_id=%s result=%s", f["task_id"], f["run"],
                 f["job_id"], result)
        emit("completed", {**f, "result": result})

    def on_error(err: BaseException, job: Any = None, *args: Any) -> None:
        f = _task_fields(job) if job is not None else {}
        log.warning("worker.error actor=%s job_id=%s error=%s: %s", actor, f.get("job_id"),
                    type(err).__name__, err)
        emit("error", {**f, "error": f"{type(err).__name__}: {err}"})

    worker.on("failed", on_failed)
    worker.on("stalled", on_stalled)
    worker.on("completed", on_completed)
    worker.on("error", on_error)


async def create_task_worker(
    settings: Settings,
    *,
    actor: str | None = None,
    renew_lock: bool = True,
    options: dict[str, Any] | None = None,
    on_event: EventHook | None = None,
    start: bool = True,
    ledger: Ledger | None = None,
    fence: Fence = leased_update,
    on_run_error: RunErrorHook | None = None,
    reminder_effects: ReminderEffects = write_reminder_effects,
) -> TaskWorker:
    """Build (and by default start) the task worker: `process_task` + the W2 listeners.

    Timings come from `settings` (Q2); `renew_lock=False` makes the stuck executor of the
    takeover tests; `options` overrides raw BullMQ worker options (camelCase). The task
    path runs on `ledger`; without one, a pool of `worker_concurrency` connections to
    `settings.database_url` is opened here and closed by `close()`. `fence` is the function
    every fenced write of this worker goes through (`TaskContext.fence`, P3): the product's
    `leased_update` unless a lab shows an old fence (`labs.fences`); a lab that
    switches fences while the worker runs passes a callable of its own that decides per call.
    `on_run_error` hears of a crash of the worker's run loop when it happens (`TaskWorker`).
    `reminder_effects` is the reminder's effect-writing step (`TaskContext.reminder_effects`,
    P10): the product's one statement unless a lab shows the book's old separate writes.
    """
    owns_ledger = ledger is None
    if ledger is None:
        ledger = await Ledger.pooled(settings.database_url or "",
                                     size=max(1, settings.worker_concurrency))
    ctx = TaskContext(settings=settings, actor=actor, ledger=ledger, fence=fence,
                      reminder_effects=reminder_effects)

    async def processor(job: Any, token: str) -> str:
        return await process_task(job, token, ctx)

    opts: dict[str, Any] = {
        "connection": redis_client(settings, blocking=True),
        "prefix": settings.queue_prefix,
        "autorun": False,
        "concurrency": settings.worker_concurrency,
        "lockDuration": settings.lock_duration_ms,
        "stalledInterval": settings.stalled_interval_ms,
        "maxStalledCount": settings.max_stalled_count,
        "drainDelay": 1,
        "runRetryDelay": settings.fetch_retry_delay_ms,
    }
    if actor:
        opts["name"] = actor
    if settings.lock_renew_ms is not None:
        opts["lockRenewTime"] = settings.lock_renew_ms
    if not renew_lock:
        opts["lockRenewTime"] = 0
    opts.update(options or {})
    try:
        worker = Worker(settings.queue_name, processor, opts)
        _attach_listeners(worker, actor, on_event)
        # Learn the Redis version before run(): without it the port rounds sub-second
        # backoff up.
        await worker.blockingRedisConnection.getRedisVersion()
        await worker.redisConnection.getRedisVersion()
    except BaseException:
        if owns_ledger:
            await ledger.close()
        raise
    task_worker = TaskWorker(worker, ctx, owns_ledger=owns_ledger, on_run_error=on_run_error)
    if start:
        task_worker.start()
    return task_worker
