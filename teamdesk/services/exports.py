"""Exports: request and download (O1, X1, X2, R4).

What a filter means lives in `export_filters` (validation and the query's parameters) and
in `queries.sql` (`_export_tickets`): the request counts with the executor's query, so a
request and its later execution agree on what the filters match (P8).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.config import Settings
from teamdesk.db.models import (
    BackgroundTask,
    Member,
    Scope,
    TaskStatus,
    TaskType,
)
from teamdesk.errors import (
    ExportExpired,
    ExportNotReady,
    ExportTooLarge,
    InvalidFilters,
    NotFound,
)
from teamdesk.export_filters import filter_params, validate_filters
from teamdesk.services._tx import transaction
from teamdesk.services.access import require_member, require_scope, visible_task
from teamdesk.tasks.ledger import QUERIES
from teamdesk.tasks.outbox import new_export_task


async def _driver_rows(session: AsyncSession, name: str, params: dict[str, Any]) -> list[Any]:
    """Run statement `name` of `queries.sql` on the session's connection, in its
    transaction: the request reads through the executor's SQL (one meaning of a filter)."""
    conn = await session.connection()
    return list((await conn.exec_driver_sql(QUERIES[name], params)).all())


async def count_matching(session: AsyncSession, team_id: str, owner_id: str, scope: Scope,
                         filters: dict[str, Any]) -> int:
    """How many tickets validated `filters` match now (X1, R4: the request's limit check):
    the executor's ticket query (`export_count`, built on `_export_tickets`)."""
    rows = await _driver_rows(session, "export_count",
                              filter_params(team_id, owner_id, scope, filters))
    return int(rows[0].matching)


async def matching_tickets(session: AsyncSession, team_id: str, owner_id: str, scope: Scope,
                           filters: dict[str, Any], *, batch_size: int = 500) -> list[Any]:
    """The tickets an export of validated `filters` would read now, in id order, read the
    way the executor reads them (`export_batch`, page by page); `tasks.exports.to_csv`
    takes these rows. For a preview, or a lab recomputing an export's CSV."""
    params = filter_params(team_id, owner_id, scope, filters)
    out: list[Any] = []
    while True:
        page = await _driver_rows(session, "export_batch", {
            **params, "after_id": out[-1].id if out else 0, "batch_size": batch_size})
        out.extend(page)
        if len(page) < batch_size:
            return out


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
