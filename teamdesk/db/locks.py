"""The team lock: serialises a team's ticket/member/reminder transactions (ch. 26 §5).

A transaction-scoped advisory lock, released at commit or rollback. It protects the
eligibility checks a reminder makes; it does *not* protect the lease, which is claimed
outside it and must be re-checked at commit (P11).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession


async def lock_team(session: AsyncSession, team_id: str) -> None:
    """Take the team's lock for the rest of the current transaction."""
    await session.execute(
        text("SELECT pg_advisory_xact_lock(hashtext('teamdesk.team:' || :team_id))"),
        {"team_id": team_id},
    )
