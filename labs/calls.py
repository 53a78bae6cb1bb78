"""The lab's thin calls into the product: one dispatcher scan, the compressed clock, the
services a web request would call, and the queue the way the dispatcher uses it.

Nothing here decides anything: each method calls the `teamdesk` function named in its
docstring on the lab's world (its sessions, settings, queue, demo team) and returns what
that function returns. `Lab` inherits them, so a cell reads `await lab.dispatch()`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from sqlalchemy import select

from labs.history import History
from labs.routing import Routes
from teamdesk import testing
from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, Priority, Scope, Ticket
from teamdesk.services import exports as export_services
from teamdesk.services import tasks as task_services
from teamdesk.services import tickets as ticket_services
from teamdesk.tasks.queue import JOB_NAME, task_job_id


class ProductCalls:
    """Mixed into `Lab`; it provides the attributes declared here."""

    name: str
    settings: Settings
    sessions: Any
    queue: Any
    team: str
    history: History
    routes: Routes

    def _require_open(self) -> None:  # pragma: no cover - provided by Lab
        raise NotImplementedError

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
        return await self.recorded_dispatch(
            lambda: dispatch_tasks(queue or self.queue, self.settings))

    async def recorded_dispatch(self, tick: Callable[[], Awaitable[Any]],
                                detail: str = "") -> Any:
        """Run `tick` (one dispatcher tick, returning its report) as the dispatcher's actor,
        recorded in the history as `dispatch`: invoked, then ok (the report) or fail (the
        error, raised again). `dispatch` and any other tick a scene stages go through here,
        so the history reads the same whichever dispatcher ran."""
        self.history.add(actor="dispatcher", type="invoke", op="dispatch", detail=detail)
        try:
            with self.routes.acting_as("dispatcher"):
                report = await tick()
        except Exception as err:
            self.history.add(actor="dispatcher", type="fail", op="dispatch",
                             detail=f"{type(err).__name__}: {err}")
            raise
        self.history.add(actor="dispatcher", type="ok", op="dispatch", detail=str(report))
        return report

    async def age(self, task_id: str, seconds: float) -> None:
        """Compress the clock for one task (`teamdesk.testing.age`): move its `updated_at`,
        `dispatched_at` and `expires_at` `seconds` into the past, as if that much time had
        passed since each was stamped (D1's 30 s re-check, D6's 120 s stale age, D7's
        expiry)."""
        self._require_open()
        await testing.age(self.sessions, task_id, seconds,
                          columns=("updated_at", "dispatched_at", "expires_at"))

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

    # ------------------------------------------------------------ the queue

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
