"""A lab's in-process workers, and what it varies about them: gates, faults, old fences.

Every worker is built by the product's `create_task_worker`, exactly as the worker process
builds its own (W1), and run in this process inside the lab's routing scope
(`labs.routing.Routes.context`), so its probe crossings, log lines and events are
attributed to this lab. What a lab varies goes through the factory's seams, never a
patch of a product module: each worker gets the lab's fence (`fence=`, the
counterexamples' switches, P3) and reminder-effects step (`reminder_effects=`, the book's
old separate writes, P10), its event sink (`on_event=`, the lab's recorder) and its
run hook (`on_run_error=`, into the error book). Gates and faults catch only this lab's
executors (`Routes.mine`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from labs import counterexamples
from labs.errors import ErrorBook
from labs.gates import Fault, Gate
from labs.history import History
from labs.recorder import Recorder
from labs.routing import Routes
from teamdesk.config import Settings
from teamdesk.tasks.worker import TaskWorker, create_task_worker

#: Settings a worker may not override: they are what isolates the lab.
FIXED = frozenset({"database_url", "redis_url", "queue_prefix", "queue_name"})


class Crew:
    """The workers of one lab (`workers`: name → running `TaskWorker`), its gates and
    faults, and its counterexample switches (`fences`). `Lab` delegates to it."""

    def __init__(self, settings: Settings, *, recorder: Recorder, history: History,
                 book: ErrorBook, routes: Routes, close_timeout: float) -> None:
        self.settings = settings
        self.recorder = recorder
        self.history = history
        self.book = book
        self.routes = routes
        self.close_timeout = close_timeout
        self.workers: dict[str, TaskWorker] = {}
        #: The lab's counterexample switches; each worker's fence reads them (per write).
        self.fences = counterexamples.LabFences()
        self.gates: list[Gate | Fault] = []
        #: Names of workers being stopped now: their errors arrive acknowledged.
        self.stopping: set[str] = set()

    # ------------------------------------------------------------ workers

    async def start(self, name: str, *, renew_lock: bool, options: dict[str, Any] | None,
                    redis_url: str | None, timings: dict[str, Any]) -> TaskWorker:
        """Start worker `name` (a running one of that name is closed first)."""
        bad = set(timings) & FIXED
        if bad:
            raise ValueError(f"{', '.join(sorted(bad))} cannot change per worker: they "
                             "isolate the lab (use redis_url= for a proxy)")
        await self.stop(name)
        settings = self.settings.replace(**timings)
        if redis_url:
            settings = settings.replace(redis_url=redis_url)
        ctx = self.routes.context(name)
        # Created and started inside the lab's context: every task the worker spawns
        # (its run loop, each job) inherits it, so probes know whose crossing it is.
        worker = await asyncio.create_task(create_task_worker(
            settings, actor=name, renew_lock=renew_lock, options=options,
            on_event=self.recorder, start=False, fence=self.fences.fence_for(name),
            reminder_effects=self.fences.effects_for(name),
            on_run_error=self.on_run_error), context=ctx)
        worker.worker.on("active", self._active_listener(name))
        ctx.run(worker.start)
        self.workers[name] = worker
        return worker

    def on_run_error(self, worker: TaskWorker, err: Exception) -> None:
        """The `on_run_error` hook of this lab's workers: a crash of a worker's run loop goes
        into the error book when it happens, not when the finished task is
        garbage-collected ("Task exception was never retrieved"), at a random later moment
        and in whatever lab is open then."""
        self.book.on_run_error(worker.name, err, worker.closing)

    def _active_listener(self, name: str) -> Callable[..., None]:
        def on_active(job: Any, *args: Any) -> None:
            data = job.data if isinstance(job.data, dict) else {}
            self.recorder("active", {"actor": name, "task_id": data.get("taskId"),
                                     "run": data.get("run"), "job_id": job.id})
        return on_active

    def on_worker_event(self, event: dict[str, Any]) -> None:
        """Every recorder event: into the history; failures into the error book."""
        self.history.on_worker_event(event)
        self.book.on_worker_event(event, stopping=event.get("actor") in self.stopping)

    async def stop(self, name: str, timeout: float | None = None) -> bool | None:
        """Close worker `name` (bounded, then forced): True graceful, False forced, None
        if there was none."""
        worker = self.workers.pop(name, None)
        if worker is None:
            return None
        self.stopping.add(name)
        try:
            return await worker.close(timeout=self.close_timeout if timeout is None else timeout)
        finally:
            self.stopping.discard(name)

    async def stop_all(self) -> None:
        """Close every worker (concurrently, each bounded)."""
        await asyncio.gather(*(self.stop(n) for n in list(self.workers)))

    # ------------------------------------------------------------ gates, faults, fences

    def gate(self, point: str, *, actor: str | None,
             when: Callable[[dict[str, Any]], bool] | None, timeout: float) -> Gate:
        """A gate on this lab's executors; an unreleased one at the same point for the same
        actor is replaced."""
        # A re-run cell (or a step tried again) must not leave its first gate installed:
        # an unreleased gate at the same point for the same actor would catch the
        # crossing meant for the new one. It is replaced (closed: uninstalled, and an
        # executor it holds is let go).
        for old in [x for x in self.gates if isinstance(x, Gate) and x.point == point
                    and x.actor == actor and not x.is_released]:
            old.close()
            self.gates.remove(old)
        g = Gate(point, actor=actor, timeout=timeout,
                 when=lambda ctx: self.routes.mine(ctx) and (when is None or when(ctx)),
                 observer=lambda event, ctx: self.history.on_gate("gate", point, event, ctx))
        self.gates.append(g)
        return g

    def fault(self, point: str, error: BaseException, *, actor: str | None,
              when: Callable[[dict[str, Any]], bool] | None, times: int) -> Fault:
        """A fault on this lab's executors, recorded in the history."""
        f = Fault(point, error, actor=actor, times=times,
                  when=lambda ctx: self.routes.mine(ctx) and (when is None or when(ctx)),
                  observer=lambda event, ctx: self.history.on_gate("fault", point, event, ctx))
        self.gates.append(f)
        return f

    def counterexample(self, bug: str, actor: str | None) -> counterexamples.Switch:
        """Switch an old fence on for this lab's executors (replacing the same switch)."""
        for old in [s for s in self.fences.switches if s.bug == bug and s.actor == actor]:
            old.off()
        return self.fences.switch_on(bug, actor)

    def use_fence(self, fence: counterexamples.Fence, actor: str | None) -> counterexamples.Switch:
        """A fence of one's own for this lab's executors (or `actor`'s), replacing the
        same actor's earlier one."""
        for old in [s for s in self.fences.switches
                    if s.bug == counterexamples.OWN_FENCE and s.actor == actor]:
            old.off()
        return self.fences.use(fence, actor)

    # ------------------------------------------------------------ closing

    async def close(self) -> None:
        """Release every gate and fault, switch every fence off, close every worker (each
        bounded, then forced); a worker that fails to close goes into the error book."""
        for g in self.gates:
            g.close()
        self.gates.clear()
        for switch in list(self.fences.switches):
            switch.off()
        workers = list(self.workers.items())
        self.workers.clear()
        if not workers:
            return
        results = await asyncio.gather(
            *(w.close(timeout=self.close_timeout) for _, w in workers),
            return_exceptions=True)
        for (name, _), result in zip(workers, results, strict=True):
            if isinstance(result, BaseException):
                self.book.close_problem(f"closing worker {name}", result)
