"""The transactional outbox: task rows written inside the caller's business transaction.

There is no separate outbox table: `background_tasks` is the outbox (O2). Nothing here
talks to Redis (O4); the dispatcher finds the rows later (D1). Every function takes the
caller's session and never commits: the caller's transaction decides (O1).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.db.models import BackgroundTask, Scope, TaskStatus, TaskType, Ticket


async def invalidate_reminders(session: AsyncSession, ticket: Ticket) -> int:
    """Bump the ticket's `reminder_revision`, turning earlier REMINDER tasks into no-ops
    when they run (O3, M1). Returns the new revision."""
    new_revision = await session.scalar(
        update(Ticket)
        .where(Ticket.id == ticket.id)
        .values(reminder_revision=Ticket.reminder_revision + 1)
        .returning(Ticket.reminder_revision)
    )
    ticket.reminder_revision = new_revision
    return new_revision


async def schedule_reminder(session: AsyncSession, ticket: Ticket) -> BackgroundTask | None:
    """Invalidate earlier reminders, then, if the ticket has a due date, add a REMINDER
    task for the new revision, to run at `due_at` (O3, inferred run_at). Sends nothing."""
    revision = await invalidate_reminders(session, ticket)
    if ticket.due_at is None:
        return None
    task = BackgroundTask(
        type=TaskType.REMINDER,
        status=TaskStatus.WAITING,
        run=0,
        owner_id=ticket.creator_id,
        team_id=ticket.team_id,
        ticket_id=ticket.id,
        reminder_revision=revision,
        scope=Scope.OWN,
        filters={},
        run_at=ticket.due_at,
    )
    session.add(task)
    await session.flush()
    return task


async def new_export_task(
    session: AsyncSession,
    *,
    team_id: str,
    owner_id: str,
    scope: Scope,
    filters: dict[str, Any],
    run_at: datetime | None = None,
) -> BackgroundTask:
    """An EXPORT task: WAITING, run 0, `dispatched_at` NULL (O1)."""
    task = BackgroundTask(
        type=TaskType.EXPORT,
        status=TaskStatus.WAITING,
        run=0,
        owner_id=owner_id,
        team_id=team_id,
        scope=scope,
        filters=filters,
        run_at=run_at if run_at is not None else datetime.now(UTC),
    )
    session.add(task)
    await session.flush()
    return task
