"""The reminder's effect-writing step is a parameter of its context
(`TaskContext.reminder_effects`, P10): the product's one statement by default; a caller
that passes another step (a lab showing the book's old separate writes) has it called
inside the reminder's transaction, with the ticket, revision, recipient and message.
Real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from teamdesk.services import tickets
from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.processor import process_task
from teamdesk.tasks.reminder_effects import write_reminder_effects
from teamdesk.testing import FakeJob


async def test_the_executor_writes_its_effects_through_the_contexts_step(settings, sessions,
                                                                         demo):
    """P10: the step is called once, with the reminder's own values, and the reminder
    completes."""
    calls: list[dict[str, Any]] = []

    async def recording(conn: Any, **values: Any) -> None:
        calls.append(values)
        await write_reminder_effects(conn, **values)

    async with sessions() as s:
        ticket, reminder = await tickets.create_ticket(s, "acme", "eve", "Call back",
                                                       due_at=datetime.now(UTC),
                                                       assignee_id="cai")
    ctx = TaskContext(settings=settings, actor="A", reminder_effects=recording)
    result = await process_task(FakeJob(reminder.id), None, ctx)
    assert result.startswith("Reminder sent to cai")
    assert calls == [{"ticket_id": ticket.id, "team_id": "acme",
                      "revision": reminder.reminder_revision, "recipient_id": "cai",
                      "message": calls[0]["message"]}]
    assert calls[0]["message"].startswith(f"Ticket #{ticket.id} 'Call back' is due")
    assert TaskContext(settings=settings).reminder_effects is write_reminder_effects


async def test_the_message_gives_the_due_time_in_utc_whatever_the_servers_time_zone(
        settings, sessions, demo):
    """The reminder's text names the due time in UTC: a team whose PostgreSQL runs with
    another TimeZone (its default follows the machine's TZ) gets the same message."""
    import psycopg

    due = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    calls: list[dict[str, Any]] = []

    async def recording(conn: Any, **values: Any) -> None:
        calls.append(values)
        await write_reminder_effects(conn, **values)

    async with sessions() as s:
        _, reminder = await tickets.create_ticket(s, "acme", "eve", "Call back", due_at=due)
    url = settings.database_url
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        db = (await (await conn.execute("SELECT current_database()")).fetchone())[0]
        await conn.execute(f'ALTER DATABASE "{db}" SET timezone = \'America/St_Johns\'')
    ctx = TaskContext(settings=settings, actor="A", reminder_effects=recording)
    await process_task(FakeJob(reminder.id), None, ctx)
    assert calls[0]["message"].endswith("is due (2026-03-01T09:30:00+00:00).")
