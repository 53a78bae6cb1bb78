"""The run's workload, created through the product's services (O1): both teams seeded, the
tasks of the plan made one spec per transaction, and what was asked recorded (`Expected`)
so the checker can hold the ledger against it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from labs.chaos.plan import (
    DEMOTED,
    EXPORT_TEAM,
    REMINDER_TEAM,
    SEED_TICKETS,
    ExportSpec,
    Spec,
)
from teamdesk.db.models import Role, Ticket
from teamdesk.seed import seed_demo
from teamdesk.services import exports as export_services
from teamdesk.services import teams as team_services
from teamdesk.services import tickets as ticket_services


@dataclass
class Expected:
    """What the run asked for, to check the ledger against."""

    #: task id -> ("export", rejected?) or ("reminder", ticket id)
    tasks: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: reminder ticket id -> (final revision, closed?, due set?)
    tickets: dict[int, tuple[int, bool, bool]] = field(default_factory=dict)
    export_fingerprint: str = ""


async def fingerprint(sessions: async_sessionmaker[AsyncSession]) -> str:
    """A hash of every column an export reads from the exported team's tickets."""
    async with sessions() as s:
        rows = (await s.execute(
            select(Ticket.id, Ticket.title, Ticket.status, Ticket.priority, Ticket.creator_id,
                   Ticket.assignee_id, Ticket.due_at, Ticket.created_at, Ticket.deleted_at)
            .where(Ticket.team_id == EXPORT_TEAM).order_by(Ticket.id))).all()
    return hashlib.sha256(repr([tuple(r) for r in rows]).encode()).hexdigest()[:16]


async def create(sessions: async_sessionmaker[AsyncSession], spec: Spec,
                 expected: Expected) -> int:
    """One spec through the services, in one transaction; returns tasks created. The
    expectations are recorded only once that transaction has committed."""
    now = datetime.now(UTC)
    async with sessions() as s, s.begin():
        if isinstance(spec, ExportSpec):
            task = await export_services.request_export(s, EXPORT_TEAM, spec.user,
                                                        spec.filters, scope=spec.scope)
            created = [task]
        else:
            due0 = now + timedelta(seconds=spec.dues[0] or 0.0)
            ticket, task = await ticket_services.create_ticket(
                s, REMINDER_TEAM, spec.creator, f"Chaos ticket by {spec.creator}",
                due_at=due0, assignee_id=spec.assignee)
            created = [task]
            for due in spec.dues[1:]:
                when = None if due is None else now + timedelta(seconds=due)
                ticket, task = await ticket_services.set_due_date(s, REMINDER_TEAM, "ben",
                                                                  ticket.id, when)
                created.append(task)
            if spec.close:
                ticket = await ticket_services.close_ticket(s, REMINDER_TEAM, "ben",
                                                            ticket.id)
    tasks = [t for t in created if t is not None]
    if isinstance(spec, ExportSpec):
        expected.tasks[tasks[0].id] = ("export", spec.rejected)
    else:
        for t in tasks:
            expected.tasks[t.id] = ("reminder", ticket.id)
        expected.tickets[ticket.id] = (ticket.reminder_revision, spec.close,
                                       ticket.due_at is not None)
    return len(tasks)


def later_specs(plan: list[Spec], upfront: int) -> list[Spec]:
    """The specs created in waves during the fault window: the rest of the plan, but for
    the demoted agent's exports, which `prepare` made before the demotion."""
    return [s for s in plan[upfront:] if not (isinstance(s, ExportSpec) and s.rejected)]


async def prepare(sessions: async_sessionmaker[AsyncSession], plan: list[Spec],
                  upfront: int, expected: Expected, tickets: int = SEED_TICKETS) -> None:
    """Seed both teams, create the up-front tasks (every demoted-agent export among them),
    then demote the agent."""
    async with sessions() as s:
        await seed_demo(s, team_id=EXPORT_TEAM, tickets=tickets)
    async with sessions() as s:
        await seed_demo(s, team_id=REMINDER_TEAM, tickets=0)
    for spec in plan[:upfront]:
        await create(sessions, spec, expected)
    for spec in plan[upfront:]:
        if isinstance(spec, ExportSpec) and spec.rejected:
            await create(sessions, spec, expected)
    async with sessions() as s:
        await team_services.change_role(s, EXPORT_TEAM, DEMOTED, Role.CUSTOMER)
    expected.export_fingerprint = await fingerprint(sessions)
