"""The EXPORT executor (ch. 25 inferred; X1, X3, P4, P5).

Reads the matching tickets in batches, writing progress per batch — ledger first, then the
queue (P4) — re-checks authorization before the final write, and stores the CSV for 24 h
with a one-line summary through one lease-conditioned UPDATE (P5).
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from teamdesk import probes
from teamdesk.db.models import BackgroundTask, Member, Scope, TaskStatus, Ticket
from teamdesk.errors import InvalidFilters
from teamdesk.services.exports import count_matching, export_query, validate_filters
from teamdesk.tasks.errors import RejectReason, TaskRejected
from teamdesk.tasks.lease import Lease, write_with_lease

if TYPE_CHECKING:
    from teamdesk.tasks.processor import TaskContext

CSV_COLUMNS = ("id", "title", "status", "priority", "creator_id", "assignee_id", "due_at",
               "created_at")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise(cell: str) -> str:
    """X3: a cell a spreadsheet would run as a formula gets a leading apostrophe."""
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def ticket_row(t: Ticket) -> list[str]:
    values: list[Any] = [t.id, t.title, t.status.value, t.priority.value, t.creator_id,
                         t.assignee_id or "", t.due_at.isoformat() if t.due_at else "",
                         t.created_at.isoformat()]
    return [neutralise(str(v)) for v in values]


def to_csv(tickets: list[Ticket]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(ticket_row(t) for t in tickets)
    return buf.getvalue()


async def check_authorization(ctx: TaskContext, task: BackgroundTask) -> dict[str, Any]:
    """Valid filters, owner still a member, staff if team-wide, within the limit; else
    `TaskRejected` (P8). Returns the validated filters."""
    try:
        filters = validate_filters(task.filters)
    except InvalidFilters as err:
        raise TaskRejected(RejectReason.INVALID_FILTERS, str(err)) from None
    async with ctx.sessions() as session:
        member = await session.scalar(select(Member).where(
            Member.team_id == task.team_id, Member.user_id == task.owner_id))
        if member is None or (task.scope is Scope.TEAM and not member.role.is_staff):
            raise TaskRejected(RejectReason.ACCESS_LOST, f"owner {task.owner_id}")
        n = await count_matching(session, task.team_id, task.owner_id, task.scope, filters)
    if n > ctx.settings.export_limit:
        raise TaskRejected(RejectReason.TOO_LARGE, f"{n} > {ctx.settings.export_limit}")
    return filters


async def run_export(ctx: TaskContext, job: Any, lease: Lease, task: BackgroundTask) -> str:
    filters = await check_authorization(ctx, task)
    base = export_query(task.team_id, task.owner_id, task.scope, filters)
    async with ctx.sessions() as session:
        total = await count_matching(session, task.team_id, task.owner_id, task.scope, filters)
    rows: list[Ticket] = []
    last_id = 0
    batch_no = 0
    while True:
        async with ctx.sessions() as session:
            batch = list((await session.scalars(
                base.where(Ticket.id > last_id).limit(ctx.settings.export_batch_size))).all())
        if not batch:
            break
        batch_no += 1
        rows.extend(batch)
        last_id = batch[-1].id
        ctx_args = dict(task_id=lease.task_id, run=lease.run, execution_id=lease.execution_id,
                        actor=ctx.actor, batch=batch_no, read=len(rows), total=total)
        await probes.announce("export.after_read", **ctx_args)
        progress = min(99, int(len(rows) * 100 / max(total, 1)))
        # P4: ledger first (also advances updated_at, D6), then the queue.
        await write_with_lease(ctx.sessions, lease, during="progress", progress=progress)
        await job.updateProgress(progress)
        await probes.announce("export.after_progress", **ctx_args)
        if len(batch) < ctx.settings.export_batch_size:
            break
    await check_authorization(ctx, task)  # X1: again, right before the result is saved
    await probes.announce("export.before_result", task_id=lease.task_id, run=lease.run,
                          execution_id=lease.execution_id, actor=ctx.actor)
    summary = f"{len(rows)} tickets exported" + (
        f" (filters: {', '.join(f'{k}={v}' for k, v in sorted(filters.items()))})"
        if filters else " (all tickets in scope)")
    await write_with_lease(
        ctx.sessions, lease, during="result",
        status=TaskStatus.COMPLETED, progress=100, result_csv=to_csv(rows),
        result_summary=summary,
        expires_at=datetime.now(UTC) + timedelta(seconds=ctx.settings.result_ttl_s),
        execution_id=None,
    )  # P5
    await probes.announce("export.after_result", task_id=lease.task_id, run=lease.run,
                          execution_id=lease.execution_id, actor=ctx.actor)
    await job.updateProgress(100)  # only after the result is committed (P5, P9)
    return summary
