"""The team lock: serialises a team's ticket/member/reminder transactions (ch. 26 §5).

A transaction-scoped advisory lock, released at commit or rollback. It protects the
eligibility checks a reminder makes; it does *not* protect the lease, which is claimed
outside it and must be re-checked at commit (P11).

The lock's key is computed here and nowhere else (`team_lock_key`): the services take it
with `lock_team`, the reminder executor with the ledger's `team_lock` statement, and a lab
that names the holder looks for the same key in `pg_locks`.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_NAMESPACE = b"teamdesk.team:"


def team_lock_key(team_id: str) -> int:
    """The advisory-lock key of `team_id`'s lock: a signed 64-bit integer (what
    `pg_advisory_xact_lock(bigint)` takes) from a stable hash of the team id, the same on
    every machine and every Python. A namespace keeps it apart from other advisory locks
    of the database (the template clone's, the dispatcher's catch-up lock)."""
    digest = hashlib.blake2b(_NAMESPACE + team_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def team_lock_key_parts(team_id: str) -> tuple[int, int]:
    """The key as `pg_locks` shows it: (classid, objid), the high and low 32 bits."""
    unsigned = team_lock_key(team_id) & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


async def lock_team(session: AsyncSession, team_id: str) -> None:
    """Take the team's lock for the rest of the current transaction."""
    await session.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                          {"key": team_lock_key(team_id)})
