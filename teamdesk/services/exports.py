"""Exports: filter validation, the ticket query, request and download (O1, X1, X2, R4).

`validate_filters` and `export_query` are shared with the executor (`tasks.exports`), so a
request and its later execution agree on what the filters mean; filters that became
invalid by execution time are a permanent rejection there (P8).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.config import Settings
from teamdesk.db.models import (
    BackgroundTask,
    Member,
    Priority,
    Scope,
    TaskStatus,
    TaskType,
    Ticket,
    TicketStatus,
)
from teamdesk.errors import (
    ExportExpired,
    ExportNotReady,
    ExportTooLarge,
    InvalidFilters,
    NotFound,
)
from teamdesk.services._tx import transaction
from teamdesk.services.access import require_member, require_scope, visible_task
from teamdesk.tasks.outbox import new_export_task

MAX_TEXT = 100
_KEYS = {"status", "priority", "created_from", "created_to", "text", "assignee_id"}


def validate_filters(raw: Any) -> dict[str, Any]:
    """Check and normalise export filters; `InvalidFilters` says exactly what is wrong.

    Keys: `status` and `priority` (lists of names), `created_from` / `created_to`
    (ISO dates, inclusive), `text` (title substring, at most 100 characters),
    `assignee_id`.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidFilters(f"filters must be an object, not {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise InvalidFilters(f"unknown filter keys: {', '.join(map(str, unknown))}; "
                             f"allowed: {', '.join(sorted(_KEYS))}")
    out: dict[str, Any] = {}
    for key, enum_ in (("status", TicketStatus), ("priority", Priority)):
        if key in raw:
            values = raw[key]
            if not isinstance(values, list) or not values:
                raise InvalidFilters(f"{key} must be a non-empty list of names")
            names = []
            for v in values:
                try:
                    names.append(enum_(v).value)
                except ValueError:
                    raise InvalidFilters(
                        f"{key} {v!r} is not one of {', '.join(m.value for m in enum_)}"
                    ) from None
            out[key] = sorted(set(names))
    for key in ("created_from", "created_to"):
        if key in raw:
            v = raw[key]
            if not isinstance(v, str):
                raise InvalidFilters(f"{key} must be an ISO date string like '2026-01-31'")
            try:
                out[key] = date.fromisoformat(v).isoformat()
            except ValueError:
                raise InvalidFilters(f"{key} {v!r} is not an ISO date like '2026-01-31'") from None
    if "created_from" in out and "created_to" in out and out["created_from"] > out["created_to"]:
        raise InvalidFilters(
            f"created_from {out['created_from']} is after created_to {out['created_to']}")
    if "text" in raw:
        v = raw["text"]
        if not isinstance(v, str):
            raise InvalidFilters("text must be a string")
        if len(v) > MAX_TEXT:
            raise InvalidFilters(f"text is {len(v)} characters; at most {MAX_TEXT}")
        if v.strip():
            out["text"] = v.strip()
    if "assignee_id" in raw:
        v = raw["assignee_id"]
        if not isinstance(v, str) or not v or len(v) > 40:
            raise InvalidFilters("assignee_id must be a user id string")
        out["assignee_id"] = v
    return out


def export_query(team_id: str, owner_id: str, scope: Scope, filters: dict[str, Any]) -> Select:
    """The tickets an export covers, in a stable order (id). `filters` must be validated."""
    stmt = select(Ticket).where(Ticket.team_id == team_id, Ticket.deleted_at.is_(None))
    if scope is Scope.OWN:
        stmt = stmt.where(Ticket.creator_id == owner_id)
    if "status" in filters:
        stmt = stmt.where(Ticket.status.in_([TicketStatus(s) for s in filters["status"]]))
    if "priority" in filters:
        stmt = stmt.where(Ticket.priority.in_([Priority(p) for p in filters["priority"]]))
    if "created_from" in filters:
        start = datetime.combine(date.fromisoformat(filters["created_from"]), datetime.min.time(),
                                 UTC)
        stmt = stmt.where(Ticket.created_at >= start)
    if "created_to" in filters:
        end = datetime.combine(date.fromisoformat(filters["created_to"]), datetime.min.time(),
                               UTC) + timedelta(days=1)
        stmt = stmt.where(Ticket.created_at < end)
    if "text" in filters:
        pattern = "%" + filters["text"].replace("\\", "\\\\").replace("%", "\\%").replace(
            "_", "\\_") + "%"
        stmt = stmt.where(Ticket.title.ilike(pattern, escape="\\"))
    if "assignee_id" in filters:
        stmt = stmt.where(Ticket.assignee_id == filters["assignee_id"])
    return stmt.order_by(Ticket.id)


async def count_matching(session: AsyncSession, team_id: str, owner_id: str, scope: Scope,
                         filters: dict[str, Any]) -> int:
    sub = export_query(team_id, owner_id, scope, filters).subquery()
    return await session.scalar(select(func.count()).select_from(sub))


def _default_scope(member: Member) -> Scope:
    return Scope.TEAM if member.role.is_staff else Scope.OWN


async def request_export(
    session: AsyncSession,
    team_id: str,
    user_id: str,
    filters: Any = None,
    *,
    scope: Scope | str | None = None,
    settings: Settings | None = None,
) -> BackgroundTask:
    """Write an EXPORT task (WAITING, run 0, not dispatched) and nothing else (O1, O4).

    Staff default to the team's tickets, customers to their own; a customer asking for
    the team's is refused. Over the export limit → `ExportTooLarge` (X1).

    Without `settings` the *configured* limit applies (`Settings.from_env()`), the one the
    worker enforces: the built-in default would accept what the executor then rejects.
    """
    settings = settings or Settings.from_env()
    clean = validate_filters(filters)
    async with transaction(session):
        member = await require_member(session, team_id, user_id)
        try:
            scope = Scope(scope) if scope is not None else _default_scope(member)
        except ValueError:
            raise InvalidFilters(f"unknown scope {scope!r}; expected TEAM or OWN") from None
        require_scope(member, scope)
        n = await count_matching(session, team_id, user_id, scope, clean)
        if n > settings.export_limit:
            raise ExportTooLarge(
                f"these filters match {n} tickets; the export limit is {settings.export_limit}. "
                "Narrow the filters.")
        return await new_export_task(session, team_id=team_id, owner_id=user_id, scope=scope,
                                     filters=clean)


@dataclass(frozen=True)
class ExportFile:
    task_id: str
    filename: str
    csv: str
    summary: str | None
    expires_at: datetime


async def download_export(
    session: AsyncSession, team_id: str, user_id: str, task_id: str, *, now: datetime | None = None
) -> ExportFile:
    """The CSV, if the caller may see it and it has not expired (X2).

    Expiry is checked here, not left to the purge (D7): a late clean-up never serves an
    expired file.
    """
    now = now or datetime.now(UTC)
    async with transaction(session):
        member = await require_member(session, team_id, user_id)
        task = await visible_task(session, member, task_id)
        if task.type is not TaskType.EXPORT:
            raise NotFound(f"task {task_id!r} is not an export")
        require_scope(member, task.scope)
        if task.status is not TaskStatus.COMPLETED:
            raise ExportNotReady(f"export {task_id} is {task.status.value}, not ready "
                                 f"(round {task.run + 1})")
        if task.expires_at is None or task.expires_at <= now or task.result_csv is None:
            raise ExportExpired(f"export {task_id} expired; request a new export")
        return ExportFile(task_id=task.id, filename=f"tickets-{task.id}.csv", csv=task.result_csv,
                          summary=task.result_summary, expires_at=task.expires_at)
