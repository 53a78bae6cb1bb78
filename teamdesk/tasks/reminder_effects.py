"""The reminder's business effects: one step of its transaction (P10).

`write_reminder_effects` inserts the notification, bumps the ticket's version and inserts
the `reminder_sent` system event — one statement (`reminder_effects` in `queries.sql`),
on the reminder's connection, inside its transaction; the fenced completion UPDATE still
follows it (the commit gate). Executors reach it as `ctx.reminder_effects`
(`teamdesk.tasks.context`), which is this function unless whoever built the context
passed another `ReminderEffects` — a lab showing the book's old code, whose three writes
were separate statements (`labs.fences`, ch. 26 §5). The product never does.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from teamdesk.tasks.ledger import execute


class ReminderEffects(Protocol):
    """The shape of `write_reminder_effects`: what `TaskContext.reminder_effects` holds."""

    def __call__(self, conn: Any, *, ticket_id: int, team_id: str, revision: int,
                 recipient_id: str, message: str) -> Awaitable[None]: ...


async def write_reminder_effects(conn: Any, *, ticket_id: int, team_id: str, revision: int,
                                 recipient_id: str, message: str) -> None:
    """P10: the three effects in one statement. A second notification for the same
    ticket, revision and recipient raises the unique violation, and with it the whole
    statement fails — the version and the event cannot go up without the notification."""
    await execute(conn, "reminder_effects", {
        "ticket_id": ticket_id, "team_id": team_id, "revision": revision,
        "recipient_id": recipient_id, "message": message})
