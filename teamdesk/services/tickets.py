"""Tickets: create, change the due date, close — each with its reminder in the same
transaction (O1, O3)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.db.locks import lock_team
from teamdesk.db.models import BackgroundTask, Priority, Ticket, TicketEvent, TicketStatus
from teamdesk.errors import InvalidInput, PermissionDenied
from teamdesk.services._tx import transaction
from teamdesk.services.access import require_member, visible_ticket
from teamdesk.tasks.outbox import invalidate_reminders, schedule_reminder


def _check_due(due_at: datetime | None) -> None:
    if due_at is not None and (not isinstance(due_at, datetime) or due_at.tzinfo is None):
        raise InvalidInput("due_at must be a timezone-aware datetime (or None)")


async def create_ticket(
    session: AsyncSession,
    team_id: str,
    actor_id: str,
    title: str,
    *,
    priority: Priority | str = Priority.NORMAL,
    due_at: datetime | None = None,
    assignee_id: str | None = None,
) -> tuple[Ticket, BackgroundTask | None]:
    """Ticket + `created` event + REMINDER task (when due), committed together (O1).

    Returns the ticket and its reminder task (None without a due date). No Redis call
    happens here (O4): the answer means "accepted".
    """
    if not isinstance(title, str) or not title.strip() or len(title) > 200:
        raise InvalidInput("title must be 1-200 characters")
    try:
        priority = Priority(priority)
    except ValueError:
        raise InvalidInput(f"unknown priority {priority!r}") from None
    _check_due(due_at)
    async with transaction(session):
        member = await require_member(session, team_id, actor_id)
        if assignee_id is not None:
            assignee = await require_member(session, team_id, assignee_id)
            if not assignee.role.is_staff:
                raise InvalidInput(f"assignee {assignee_id!r} is not staff of team {team_id!r}")
        await lock_team(session, team_id)
        ticket = Ticket(team_id=team_id, title=title.strip(), priority=priority,
                        creator_id=member.user_id, assignee_id=assignee_id, due_at=due_at,
                        status=TicketStatus.OPEN, version=1, reminder_revision=0)
        session.add(ticket)
        await session.flush()
        session.add(TicketEvent(ticket_id=ticket.id, team_id=team_id, kind="created",
                                actor_id=actor_id, data={"title": ticket.title}))
        task = await schedule_reminder(session, ticket)
        return ticket, task


async def set_due_date(
    session: AsyncSession, team_id: str, actor_id: str, ticket_id: int, due_at: datetime | None
) -> tuple[Ticket, BackgroundTask | None]:
    """Change (or clear) the due date: earlier reminders become no-ops, a new one is
    scheduled for the new revision, all in one transaction (O1, O3)."""
    _check_due(due_at)
    async with transaction(session):
        member = await require_member(session, team_id, actor_id)
        await lock_team(session, team_id)
        ticket = await visible_ticket(session, member, ticket_id, for_update=True)
        if ticket.status is TicketStatus.CLOSED:
            raise InvalidInput(f"ticket {ticket_id} is closed")
        ticket.due_at = due_at
        ticket.version += 1
        ticket.updated_at = datetime.now(UTC)
        session.add(TicketEvent(ticket_id=ticket.id, team_id=team_id, kind="due_changed",
                                actor_id=actor_id,
                                data={"due_at": due_at.isoformat() if due_at else None}))
        await session.flush()
        task = await schedule_reminder(session, ticket)
        return ticket, task


async def close_ticket(
    session: AsyncSession, team_id: str, actor_id: str, ticket_id: int
) -> Ticket:
    """Close a ticket (staff only); its pending reminders become no-ops (M1)."""
    async with transaction(session):
        member = await require_member(session, team_id, actor_id)
        if not member.role.is_staff:
            raise PermissionDenied("only staff can close tickets")
        await lock_team(session, team_id)
        ticket = await visible_ticket(session, member, ticket_id, for_update=True)
        ticket.status = TicketStatus.CLOSED
        ticket.version += 1
        ticket.updated_at = datetime.now(UTC)
        session.add(TicketEvent(ticket_id=ticket.id, team_id=team_id, kind="closed",
                                actor_id=actor_id, data={}))
        await session.flush()
        await invalidate_reminders(session, ticket)
        return ticket
