"""Access checks: membership, scope, demoted staff (R1, X2).

Customers see only what they created or own; staff (admin, agent) see the team's. An
object of another team is reported as not found, never as forbidden, so ids of other
teams reveal nothing.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.db.models import BackgroundTask, Member, Scope, Team, Ticket
from teamdesk.errors import NotFound, PermissionDenied


async def require_member(session: AsyncSession, team_id: str, user_id: str) -> Member:
    """The caller's membership, or `NotFound` (no such team) / `PermissionDenied`."""
    if await session.get(Team, team_id) is None:
        raise NotFound(f"team {team_id!r} not found")
    member = await session.scalar(
        select(Member).where(Member.team_id == team_id, Member.user_id == user_id)
    )
    if member is None:
        raise PermissionDenied(f"user {user_id!r} is not a member of team {team_id!r}")
    return member


def can_see_ticket(member: Member, ticket: Ticket) -> bool:
    return ticket.team_id == member.team_id and (
        member.role.is_staff or ticket.creator_id == member.user_id
    )


async def visible_ticket(
    session: AsyncSession, member: Member, ticket_id: int, *, for_update: bool = False
) -> Ticket:
    stmt = select(Ticket).where(Ticket.id == ticket_id, Ticket.deleted_at.is_(None))
    if for_update:
        stmt = stmt.with_for_update()
    ticket = await session.scalar(stmt)
    if ticket is None or not can_see_ticket(member, ticket):
        raise NotFound(f"ticket {ticket_id!r} not found in team {member.team_id!r}")
    return ticket


async def visible_task(
    session: AsyncSession, member: Member, task_id: str, *, for_update: bool = False
) -> BackgroundTask:
    """The task by team and the caller's accessible scope (R1), else `NotFound`."""
    stmt = select(BackgroundTask).where(
        BackgroundTask.id == task_id, BackgroundTask.team_id == member.team_id
    )
    if not member.role.is_staff:
        stmt = stmt.where(BackgroundTask.owner_id == member.user_id)
    if for_update:
        stmt = stmt.with_for_update()
    task = await session.scalar(stmt)
    if task is None:
        raise NotFound(f"task {task_id!r} not found in team {member.team_id!r}")
    return task


def require_scope(member: Member, scope: Scope) -> None:
    """A team-wide scope needs staff rights *now*: a demoted creator is refused (R1, X2)."""
    if scope is Scope.TEAM and not member.role.is_staff:
        raise PermissionDenied(
            f"user {member.user_id!r} is no longer staff of team {member.team_id!r}; "
            "a team-wide export needs staff rights"
        )
