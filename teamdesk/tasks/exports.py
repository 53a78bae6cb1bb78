"""The EXPORT executor (ch. 25 inferred; X1, X3, P4, P5).

Reads the matching tickets in batches, writing progress per batch — ledger first, then the
queue (P4) — re-checks authorization before the final write, and stores the CSV for 24 h
with a one-line summary through one lease-conditioned UPDATE (P5). Both fenced writes go
through `ctx.fence` (P3).
"""

from __future__ import annotations

import csv
import io
from typing import Any

import psycopg

from teamdesk import probes
from teamdesk.db.models import Role
from teamdesk.errors import InvalidFilters
from teamdesk.export_filters import filter_params, validate_filters
from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.errors import RejectReason, TaskRejected
from teamdesk.tasks.lease import Lease
from teamdesk.tasks.ledger import fetch_all, fetch_one

CSV_COLUMNS = ("id", "title", "status", "priority", "creator_id", "assignee_id", "due_at",
               "created_at")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_STAFF = frozenset(r.value for r in Role if r.is_staff)


def neutralise(cell: str) -> str:
    """X3: a cell a spreadsheet would run as a formula gets a leading apostrophe."""
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def ticket_row(t: Any) -> list[str]:
    """One CSV line from a ticket: an ORM `Ticket` or a row of `export_batch`."""
    values: list[Any] = [t.id, t.title, getattr(t.status, "value", t.status),
                         getattr(t.priority, "value", t.priority), t.creator_id,
                         t.assignee_id or "", t.due_at.isoformat() if t.due_at else "",
                         t.created_at.isoformat()]
    return [neutralise(str(v)) for v in values]


def to_csv(tickets: list[Any]) -> str:
    buf = io.StringIO()
    # CRLF (RFC 4180): the csv module quotes a cell holding any character of the line
    # terminator. With "\n" a CR inside a cell stayed bare, and readers started a new
    # record there — one that could begin with a live formula (X3).
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(ticket_row(t) for t in tickets)
    return buf.getvalue()


def _require_access(task: Any, role: str | None) -> None:
    """P8: the owner is still a member, and staff if the export is team-wide."""
    if role is None or (task.scope == "TEAM" and role not in _STAFF):
        raise TaskRejected(RejectReason.ACCESS_LOST, f"owner {task.owner_id}")


def _validated(task: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task's filters, validated, and the statement parameters; else `TaskRejected`."""
    try:
        filters = validate_filters(task.filters)
    except InvalidFilters as err:
        raise TaskRejected(RejectReason.INVALID_FILTERS, str(err)) from None
    return filters, filter_params(task.team_id, task.owner_id, task.scope, filters)


def _require_allowed(ctx: TaskContext, task: Any, role: str | None, matching: int) -> None:
    """P8: owner still a member (staff if team-wide), and within the export limit."""
    _require_access(task, role)
    if matching > ctx.settings.export_limit:
        raise TaskRejected(RejectReason.TOO_LARGE, f"{matching} > {ctx.settings.export_limit}")


async def authorize_and_start(ctx: TaskContext, conn: psycopg.AsyncConnection, task: Any,
                              ) -> tuple[dict[str, Any], dict[str, Any], int, list[Any]]:
    """Valid filters, owner still a member, staff if team-wide, within the limit; else
    `TaskRejected` (P8). The owner's role, the count and the first batch come back in one
    round trip (`export_start`), and the count is taken once per run; the batch
    is used only once the check passed. Returns (filters, statement parameters, matching
    tickets, first batch)."""
    filters, params = _validated(task)
    start = await fetch_all(conn, "export_start",
                            {**params, "batch_size": ctx.settings.export_batch_size})
    _require_allowed(ctx, task, start[0].role, start[0].matching)
    return filters, params, start[0].matching, [r for r in start if r.id is not None]


async def run_export(ctx: TaskContext, conn: psycopg.AsyncConnection, job: Any, lease: Lease,
                     task: Any) -> str:
    """X1, P4, P5 on the run's connection; `task` is the row the claim returned."""
    filters, params, total, batch = await authorize_and_start(ctx, conn, task)
    batch_size = ctx.settings.export_batch_size
    rows: list[Any] = []
    batch_no = 0
    while True:
        if batch_no:  # the first batch came with the authorization
            batch = await fetch_all(conn, "export_batch", {
                **params, "after_id": rows[-1].id, "batch_size": batch_size})
        if not batch:
            break
        batch_no += 1
        rows.extend(batch)
        ctx_args = dict(task_id=lease.task_id, run=lease.run, execution_id=lease.execution_id,
                        actor=ctx.actor, batch=batch_no, read=len(rows), total=total)
        await probes.announce("export.after_read", **ctx_args)
        progress = min(99, int(len(rows) * 100 / max(total, 1)))
        # P4: ledger first (also advances updated_at, D6), then the queue.
        await ctx.fence(conn, lease, "progress", during="progress", progress=progress)
        await job.updateProgress(progress)
        await probes.announce("export.after_progress", **ctx_args)
        if len(batch) < batch_size:
            break
    # X1: authorization again, right before the result is saved. The tickets read are
    # counted here, not by a second count query.
    recheck = await fetch_one(conn, "export_recheck", params)
    _require_access(task, recheck.role if recheck else None)
    if len(rows) > ctx.settings.export_limit:
        raise TaskRejected(RejectReason.TOO_LARGE, f"{len(rows)} > {ctx.settings.export_limit}")
    await probes.announce("export.before_result", task_id=lease.task_id, run=lease.run,
                          execution_id=lease.execution_id, actor=ctx.actor)
    summary = f"{len(rows)} tickets exported" + (
        f" (filters: {', '.join(f'{k}={v}' for k, v in sorted(filters.items()))})"
        if filters else " (all tickets in scope)")
    await ctx.fence(conn, lease, "export_result", during="result",
                    result_csv=to_csv(rows), result_summary=summary,
                    ttl_s=float(ctx.settings.result_ttl_s))  # P5
    await probes.announce("export.after_result", task_id=lease.task_id, run=lease.run,
                          execution_id=lease.execution_id, actor=ctx.actor)
    await job.updateProgress(100)  # only after the result is committed (P5, P9)
    return summary
