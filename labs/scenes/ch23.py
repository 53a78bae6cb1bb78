"""Scene helpers of `23-outbox.ipynb` (chapter 23, the transactional outbox).

What the notebook needs to *look at* a scene — which rows a scan would pick, the outbox
rows of a request as a table, what is left of a request that failed, which tickets an
export should contain, whether a WAITING row is stuck — but a learner need not read to
follow the chapter. The scenes themselves (the two wrong orders, the gates, the outage)
stay in the cells.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
from sqlalchemy import func, select

from labs import tables
from labs.names import Names
from teamdesk.db.models import BackgroundTask, Priority, Ticket, TicketEvent, TicketStatus
from teamdesk.tasks.dispatcher import scan_query
from teamdesk.tasks.queue import job_states, task_job_id

#: Job states in which a queued job will still run (D4's "refresh only" branch).
QUEUED = ("waiting", "delayed", "active", "prioritized", "waiting-children")


async def scan_preview(lab: Any, names: Names, *, limit: int | None = None,
                       later: float = 0) -> list[str]:
    """Which rows the dispatcher's scan (D1) would pick now, or `later` seconds from now,
    by name, without enqueueing anything: the product's own scan statement
    (`scan_query`), with `limit` in place of the batch size (100)."""
    settings = lab.settings if limit is None else lab.settings.replace(
        dispatch_batch_size=limit)
    now = datetime.now(UTC) + timedelta(seconds=later)
    async with lab.sessions() as s:
        return [names.of(r.id) for r in await s.execute(scan_query(settings, now))]


async def outbox_rows(lab: Any, names: Names, ticket: Ticket,
                      tasks: list[BackgroundTask]) -> pd.DataFrame:
    """The outbox rows a request wrote (O2, O3): one row per task with the fields the
    chapter names — type, status, run, dispatched_at, ticket, owner, revision, run_at
    (compared with the ticket's due date) and scope."""
    rows = []
    for task in tasks:
        t = await lab.task(task.id)
        rows.append({
            "task": names.of(t.id), "type": t.type.value, "status": t.status.value,
            "run": t.run, "dispatched_at": t.dispatched_at, "ticket_id": t.ticket_id,
            "owner_id": t.owner_id, "revision": t.reminder_revision,
            "run_at": "= due_at" if t.run_at == ticket.due_at else "now",
            "scope": t.scope.value})
    df = pd.DataFrame(rows).astype({"ticket_id": "Int64", "revision": "Int64"})
    return tables.show(df)


async def event_kinds(lab: Any, ticket_id: int) -> list[str]:
    """The kinds of a ticket's history events, oldest first."""
    async with lab.sessions() as s:
        return list((await s.scalars(select(TicketEvent.kind).where(
            TicketEvent.ticket_id == ticket_id).order_by(TicketEvent.id))).all())


async def rows_left(lab: Any, ticket_id: int, task_id: str) -> int:
    """How many rows of one request exist: its ticket, the ticket's events and its
    reminder task. 0 after a rolled-back request (O1: the intent shares the business
    transaction's fate)."""
    async with lab.sessions() as s:
        left = await s.scalar(select(func.count()).select_from(BackgroundTask).where(
            BackgroundTask.id == task_id))
        left += await s.scalar(select(func.count()).select_from(Ticket).where(
            Ticket.id == ticket_id))
        left += await s.scalar(select(func.count()).select_from(TicketEvent).where(
            TicketEvent.ticket_id == ticket_id))
    return left


async def matching_ticket_ids(lab: Any, status: TicketStatus,
                              priority: Priority) -> list[int]:
    """The ids of the team's live tickets with this status and priority, in id order: what
    an export with these filters must contain (X1), counted independently of the
    exporter's own query."""
    async with lab.sessions() as s:
        return list((await s.scalars(select(Ticket.id).where(
            Ticket.team_id == lab.team, Ticket.status == status, Ticket.priority == priority,
            Ticket.deleted_at.is_(None)).order_by(Ticket.id))).all())


async def diagnose(lab: Any, task: Any) -> str:
    """Exercise C: is a WAITING row with `dispatched_at` set stuck? Asks the queue, not
    `dispatched_at` alone (D1: it is the last enqueue *check*, not "sent"; D4)."""
    row = await lab.task(task.id)
    [state] = await job_states(lab.queue, [task_job_id(row.id, row.run)])
    if row.status != "WAITING" or row.dispatched_at is None:
        return f"{row.status}, dispatched_at {row.dispatched_at and 'set'}: not this question"
    if state in QUEUED:
        return f"not stuck: its job is {state}"
    return "queue behind, its job is gone"


def r1_repaired(report: Any, diagnosis: str) -> bool | str:
    """Exercise C's judge: the learner's tick (`report`, a DispatchReport) enqueued
    something, and `diagnosis` (from `diagnose`, after that tick) says r1 is not stuck.
    A string says what is missing (D1: only a check older than 30 s is re-checked)."""
    if getattr(report, "added", 0) + getattr(report, "refreshed", 0) < 1:
        return "that tick enqueued nothing: was r1's dispatched_at more than 30 s old?"
    return diagnosis.startswith("not stuck") or f"r1 says: {diagnosis}"
