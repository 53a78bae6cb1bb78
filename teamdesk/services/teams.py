"""Teams and members."""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.db.models import Member, Role, Team
from teamdesk.errors import InvalidInput, NotFound
from teamdesk.services._tx import transaction

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")


def _check_id(kind: str, value: str) -> None:
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidInput(f"{kind} must be 1-40 characters of a-z, 0-9, '_', '.', '-': {value!r}")


def _role(role: Role | str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise InvalidInput(
            f"unknown role {role!r}; expected one of {', '.join(r.value for r in Role)}"
        ) from None


async def create_team(session: AsyncSession, team_id: str, name: str) -> Team:
    _check_id("team id", team_id)
    if not name or len(name) > 200:
        raise InvalidInput("team name must be 1-200 characters")
    async with transaction(session):
        if await session.get(Team, team_id) is not None:
            raise InvalidInput(f"team {team_id!r} already exists")
        team = Team(id=team_id, name=name)
        session.add(team)
        await session.flush()
        return team


async def add_member(
    session: AsyncSession, team_id: str, user_id: str, name: str, role: Role | str
) -> Member:
    _check_id("user id", user_id)
    role = _role(role)
    async with transaction(session):
        if await session.get(Team, team_id) is None:
            raise NotFound(f"team {team_id!r} not found")
        existing = await session.scalar(
            select(Member).where(Member.team_id == team_id, Member.user_id == user_id))
        if existing is not None:
            raise InvalidInput(f"user {user_id!r} is already a member of team {team_id!r}")
        member = Member(team_id=team_id, user_id=user_id, name=name or user_id, role=role)
        session.add(member)
        await session.flush()
        return member


async def change_role(
    session: AsyncSession, team_id: str, user_id: str, role: Role | str
) -> Member:
    """E.g. demote an agent to customer; their team-wide exports stop being theirs (R1)."""
    role = _role(role)
    async with transaction(session):
        member = await session.scalar(
            select(Member).where(Member.team_id == team_id, Member.user_id == user_id)
            .with_for_update())
        if member is None:
            raise NotFound(f"user {user_id!r} is not a member of team {team_id!r}")
        member.role = role
        await session.flush()
        return member
