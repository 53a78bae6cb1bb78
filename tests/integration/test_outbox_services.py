"""Outbox atomicity and reminder invalidation against real PostgreSQL (O1–O4, M1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from teamdesk.db.models import BackgroundTask, TaskStatus, TaskType, Ticket, TicketEvent
from teamdesk.errors import InvalidInput, NotFound, PermissionDenied
from teamdesk.services import teams, tickets

DUE = datetime(2030, 1, 2, 9, 0, tzinfo=UTC)


async def _count(session, model, *where) -> int:
    return await session.scalar(select(func.count()).select_from(model).where(*where))


async def test_ticket_history_and_reminder_commit_together(sessions, demo):
    """O1, O3: ticket + `created` event + REMINDER task in one commit, carrying the
    ticket's team, creator (owner), revision and run_at = due_at; nothing dispatched (O4)."""
    async with sessions() as s:
        ticket, task = await tickets.create_ticket(s, "acme", "dan", "VPN drops", due_at=DUE)
    async with sessions() as s:
        row = await s.get(BackgroundTask, task.id)
        assert (row.type, row.status, row.run, row.dispatched_at) == (
            TaskType.REMINDER, TaskStatus.WAITING, 0, None)
        assert (row.ticket_id, row.team_id, row.owner_id) == (ticket.id, "acme", "dan")
        assert row.reminder_revision == ticket.reminder_revision == 1
        assert row.run_at == DUE
        assert await _count(s, TicketEvent, TicketEvent.ticket_id == ticket.id) == 1


async def test_ticket_without_due_date_has_no_reminder(sessions, demo):
    """O3: with no due_at, schedule_reminder only invalidates and returns."""
    async with sessions() as s:
        ticket, task = await tickets.create_ticket(s, "acme", "dan", "No rush")
    assert task is None
    async with sessions() as s:
        assert await _count(s, BackgroundTask, BackgroundTask.ticket_id == ticket.id) == 0


async def test_failed_business_transaction_leaves_no_task(sessions, demo):
    """O1: the unit of work writes a ticket with a reminder, then a later write in the same
    transaction violates a constraint: neither ticket, event nor task survives."""
    async with sessions() as s:
        before = await _count(s, BackgroundTask)
        tickets_before = await _count(s, Ticket)
    with pytest.raises(IntegrityError):
        async with sessions() as s, s.begin():
            _, task = await tickets.create_ticket(s, "acme", "dan", "Doomed", due_at=DUE)
            assert task is not None  # the reminder row was written in this transaction…
            s.add(Ticket(team_id="no-such-team", title="x", creator_id="dan"))
            await s.flush()  # …and this FK violation rolls it back with the ticket
    async with sessions() as s:
        assert await _count(s, BackgroundTask) == before
        assert await _count(s, Ticket) == tickets_before


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"team_id": "nope", "actor_id": "dan"}, NotFound),
        ({"team_id": "acme", "actor_id": "mallory"}, PermissionDenied),
        ({"team_id": "acme", "actor_id": "dan", "title": ""}, InvalidInput),
        ({"team_id": "acme", "actor_id": "dan", "title": "x" * 201}, InvalidInput),
        ({"team_id": "acme", "actor_id": "dan", "due_at": datetime(2030, 1, 1)}, InvalidInput),
        ({"team_id": "acme", "actor_id": "dan", "priority": "SOON"}, InvalidInput),
        ({"team_id": "acme", "actor_id": "dan", "assignee_id": "eve"}, InvalidInput),
    ],
)
async def test_bad_ticket_input_writes_nothing(sessions, demo, kwargs, error):
    """Bad input gets a specific error and writes no ticket, event or task."""
    args = {"title": "Fine title", "due_at": DUE, **kwargs}
    async with sessions() as s:
        counts = [await _count(s, m) for m in (Ticket, TicketEvent, BackgroundTask)]
    async with sessions() as s:
        with pytest.raises(error) as info:
            await tickets.create_ticket(s, args.pop("team_id"), args.pop("actor_id"),
                                        args.pop("title"), **args)
    assert str(info.value)
    async with sessions() as s:
        assert [await _count(s, m) for m in (Ticket, TicketEvent, BackgroundTask)] == counts


async def test_due_date_changes_invalidate_by_revision(sessions, demo):
    """O3, M1: each change bumps reminder_revision and schedules a reminder for the new
    revision only; clearing the due date and closing leave no current reminder."""
    async with sessions() as s:
        ticket, first = await tickets.create_ticket(s, "acme", "eve", "Renewal", due_at=DUE)
    async with sessions() as s:
        ticket, second = await tickets.set_due_date(s, "acme", "ben", ticket.id,
                                                    DUE + timedelta(days=1))
    assert (first.reminder_revision, second.reminder_revision) == (1, 2)
    assert second.run_at == DUE + timedelta(days=1)
    assert second.owner_id == "eve"  # owner is the ticket's creator, not the editor (O3)
    async with sessions() as s:
        ticket, none = await tickets.set_due_date(s, "acme", "ben", ticket.id, None)
    assert none is None
    async with sessions() as s:
        closed = await tickets.close_ticket(s, "acme", "ben", ticket.id)
    async with sessions() as s:
        row = await s.get(Ticket, ticket.id)
        assert row.reminder_revision == 4 == closed.reminder_revision
        assert row.version == 4  # created, due changed twice, closed
        revisions = (await s.scalars(select(BackgroundTask.reminder_revision).where(
            BackgroundTask.ticket_id == ticket.id).order_by(BackgroundTask.reminder_revision)
        )).all()
        assert revisions == [1, 2]  # neither matches the current revision 4 any more


async def test_customer_cannot_change_anothers_ticket(sessions, demo):
    """Access: a customer sees only their own tickets; another team's id is not found."""
    async with sessions() as s:
        ticket, _ = await tickets.create_ticket(s, "acme", "eve", "Mine", due_at=DUE)
    async with sessions() as s:
        with pytest.raises(NotFound):
            await tickets.set_due_date(s, "acme", "fay", ticket.id, None)
    async with sessions() as s:
        await teams.create_team(s, "other", "Other")
        await teams.add_member(s, "other", "oz", "Oz", "admin")
    async with sessions() as s:
        with pytest.raises(NotFound):
            await tickets.set_due_date(s, "other", "oz", ticket.id, None)
        with pytest.raises(PermissionDenied):
            await tickets.close_ticket(s, "acme", "eve", ticket.id)
