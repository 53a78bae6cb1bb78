"""Deterministic demo data: one team, its members, a few hundred tickets.

Same seed → same rows (titles, creators, statuses, creation times), so notebooks and tests
see the same data. Tickets are inserted as historical data without due dates, so seeding
schedules no reminders; reminders come from the ticket service (O1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.db.models import Priority, Role, Ticket, TicketEvent, TicketStatus
from teamdesk.services._tx import transaction
from teamdesk.services.teams import add_member, create_team

DEMO_TEAM = "acme"
MEMBERS: tuple[tuple[str, str, Role], ...] = (
    ("ada", "Ada (admin)", Role.ADMIN),
    ("ben", "Ben (agent)", Role.AGENT),
    ("cai", "Cai (agent)", Role.AGENT),
    ("dan", "Dan (customer)", Role.CUSTOMER),
    ("eve", "Eve (customer)", Role.CUSTOMER),
    ("fay", "Fay (customer)", Role.CUSTOMER),
)
#: Seeded tickets are created on these days, from this instant, a few hours apart.
EPOCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

_SUBJECTS = ("Login", "Invoice", "Export", "Password reset", "Dashboard", "Mobile app",
             "Webhook", "Billing address", "Two-factor code", "Report", "Attachment", "Search")
_PROBLEMS = ("fails with error 500", "is very slow", "shows the wrong total", "times out",
             "cannot be opened", "sends duplicate e-mails", "is missing data",
             "looks broken on Safari", "rejects valid input", "needs a new field")


@dataclass(frozen=True)
class SeedSummary:
    team_id: str
    members: int
    tickets: int


async def seed_demo(session: AsyncSession, *, team_id: str = DEMO_TEAM, tickets: int = 300,
                    seed: int = 23) -> SeedSummary:
    """Create the demo team, its six members and `tickets` tickets, in one transaction."""
    rng = random.Random(seed)
    async with transaction(session):
        await create_team(session, team_id, f"{team_id.capitalize()} Support")
        for user_id, name, role in MEMBERS:
            await add_member(session, team_id, user_id, name, role)
        customers = [m[0] for m in MEMBERS if m[2] is Role.CUSTOMER]
        agents = [m[0] for m in MEMBERS if m[2] is Role.AGENT]
        statuses = list(TicketStatus)
        priorities = list(Priority)
        rows = []
        for i in range(tickets):
            created = EPOCH + timedelta(minutes=173 * i)
            rows.append(Ticket(
                team_id=team_id,
                title=f"{rng.choice(_SUBJECTS)} {rng.choice(_PROBLEMS)} (#{i + 1})",
                status=rng.choices(statuses, weights=(5, 2, 3))[0],
                priority=rng.choices(priorities, weights=(2, 5, 2, 1))[0],
                creator_id=rng.choice(customers),
                assignee_id=rng.choice([*agents, None]),
                version=1, reminder_revision=0, created_at=created, updated_at=created,
            ))
        session.add_all(rows)
        await session.flush()
        session.add_all(TicketEvent(ticket_id=t.id, team_id=team_id, kind="created",
                                    actor_id=t.creator_id, data={"title": t.title},
                                    created_at=t.created_at) for t in rows)
        await session.flush()
    return SeedSummary(team_id=team_id, members=len(MEMBERS), tickets=tickets)
