"""The REMINDER executor (ch. 24 inferred, ch. 26 §5; P10–P12, M1).

Everything happens inside ONE PostgreSQL transaction under the team lock: check that the
reminder still matches the ticket's `reminder_revision`, then write the notification, bump
the ticket's version, add a system event, and finish with the lease-conditioned completion
UPDATE, through `ctx.fence` (P3). That UPDATE is the commit gate: if it matches no row,
`LeaseLost` is raised *inside* the transaction, which rolls all four writes back (P10).
Returning instead would commit them. The lease was claimed outside the lock (P11), which
is why it is re-checked here, at commit.
"""

from __future__ import annotations

import contextlib
from datetime import UTC
from typing import Any

import psycopg

from teamdesk import probes
from teamdesk.db.locks import team_lock_key
from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.lease import Lease
from teamdesk.tasks.ledger import execute


def stale_reason(task: Any, ticket: Any | None) -> str | None:
    """Why this reminder no longer applies (M1), or None if it is current. `task` and
    `ticket` may be ORM objects or rows (statuses compare equal as text)."""
    if ticket is None or ticket.deleted_at is not None:
        return "the ticket was deleted"
    if ticket.status == "CLOSED":
        return "the ticket is closed"
    if ticket.reminder_revision != task.reminder_revision:
        return (f"superseded: reminder revision {task.reminder_revision} is not the ticket's "
                f"current revision {ticket.reminder_revision}")
    return None


async def run_reminder(ctx: TaskContext, conn: psycopg.AsyncConnection, job: Any, lease: Lease,
                       task: Any) -> str:
    """P10 on the run's connection; `task` is the row the claim returned."""
    async with contextlib.AsyncExitStack() as transaction:
        # BEGIN, the team lock and the ticket read leave in one round trip (psycopg's
        # pipeline mode) and still run one after the other on the server: the
        # read's snapshot is taken after the lock is granted, so it sees the ticket as the
        # previous lock holder committed it. The transaction outlives the pipeline block:
        # a plain `AsyncTransaction` (`conn.transaction()` would keep the connection in
        # pipeline mode until COMMIT, where a fenced UPDATE's rowcount is not known yet);
        # the exit stack commits it at the end of this block, or rolls it back on error.
        async with conn.pipeline():
            await transaction.enter_async_context(psycopg.AsyncTransaction(conn))
            await execute(conn, "team_lock", {"key": team_lock_key(task.team_id)})
            read = await execute(conn, "reminder_ticket", {"ticket_id": task.ticket_id})
        ticket = await read.fetchone()
        reason = (ctx.stale_check or stale_reason)(task, ticket)  # M1
        await probes.announce("reminder.after_lease_check", task_id=lease.task_id, run=lease.run,
                              execution_id=lease.execution_id, actor=ctx.actor)
        if reason is not None:
            summary = f"No reminder sent: {reason}."
        else:
            recipient = ticket.assignee_id or ticket.creator_id
            # In UTC whatever the session's TimeZone: the message must not depend on the
            # server a team happens to run (its default follows the machine's TZ).
            due = ticket.due_at.astimezone(UTC).isoformat() if ticket.due_at else "-"
            # Notification, version bump and system event: `ctx.reminder_effects`, one
            # statement in the product (P10).
            await ctx.reminder_effects(
                conn, ticket_id=ticket.id, team_id=ticket.team_id,
                revision=task.reminder_revision, recipient_id=recipient,
                message=f"Ticket #{ticket.id} '{ticket.title}' is due ({due}).")
            await probes.announce("reminder.after_event", task_id=lease.task_id, run=lease.run,
                                  execution_id=lease.execution_id, actor=ctx.actor)
            summary = f"Reminder sent to {recipient} (revision {task.reminder_revision})."
        # The commit gate (P10): LeaseLost raised here rolls back everything above.
        await ctx.fence(conn, lease, "reminder_completion", during="reminder completion",
                        result_summary=summary)
        # Still inside the transaction: the completion holds the row lock until commit, so
        # a competing claim waits here and then matches nothing (P12).
        await probes.announce("reminder.after_completion", task_id=lease.task_id,
                              run=lease.run, execution_id=lease.execution_id, actor=ctx.actor)
    await job.updateProgress(100)
    return summary
