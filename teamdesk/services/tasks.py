"""Listing tasks and the manual retry (R1–R4)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.db.models import BackgroundTask, Member, Scope, TaskStatus
from teamdesk.errors import NotRetryable, OwnerAccessLost
from teamdesk.services._tx import transaction
from teamdesk.services.access import require_member, require_scope, visible_task


async def list_tasks(session: AsyncSession, team_id: str, user_id: str,
                     limit: int = 50) -> list[BackgroundTask]:
    """Newest first; staff see the team's tasks, customers their own."""
    async with transaction(session):
        member = await require_member(session, team_id, user_id)
        stmt = select(BackgroundTask).where(BackgroundTask.team_id == team_id)
        if not member.role.is_staff:
            stmt = stmt.where(BackgroundTask.owner_id == user_id)
        stmt = stmt.order_by(BackgroundTask.created_at.desc(), BackgroundTask.id).limit(limit)
        return list((await session.scalars(stmt)).all())


async def _require_owner_staff(session: AsyncSession, task: BackgroundTask) -> None:
    """R1: a team-wide task runs with its *owner's* rights, not the caller's. An admin
    retrying the export of a creator who was demoted (or left) would get "Retry accepted"
    and a new run the executor rejects again (P8), so it is refused here, whoever asks."""
    if task.scope is not Scope.TEAM:
        return
    owner = await session.scalar(select(Member).where(
        Member.team_id == task.team_id, Member.user_id == task.owner_id))
    if owner is None or not owner.role.is_staff:
        state = "is no longer a member" if owner is None else "is no longer staff"
        raise OwnerAccessLost(
            f"task {task.id} cannot be retried: its owner {task.owner_id!r} {state} of team "
            f"{task.team_id!r}, and a team-wide export runs with its owner's rights; "
            "request a new export instead (R4)")


async def retry_task(session: AsyncSession, team_id: str, user_id: str,
                     task_id: str) -> BackgroundTask:
    """Open a new run of a FAILED task (R1, R2).

    Membership first, then the task by team and the caller's scope; only FAILED can be
    retried; a team-wide export whose creator lost staff rights is refused. The new run
    keeps id, owner, filters and scope (R4: filters are never shrunk), and its job id
    `<id>-<run+1>` is not blocked by the old run's failed job (R3). "Retry accepted" is
    not "file ready".
    """
    async with transaction(session):
        member = await require_member(session, team_id, user_id)
        task = await visible_task(session, member, task_id, for_update=True)
        if task.status is not TaskStatus.FAILED:
            raise NotRetryable(f"task {task_id} is {task.status.value}; only FAILED tasks can "
                               "be retried")
        require_scope(member, task.scope)
        await _require_owner_staff(session, task)
        values = dict(run=task.run + 1, status=TaskStatus.WAITING, progress=0, attempts=0,
                      last_error=None, execution_id=None, dispatched_at=None, result_csv=None,
                      result_summary=None, expires_at=None, run_at=datetime.now(UTC),
                      stale_recoveries=0)  # D9 counts per run
        await session.execute(
            update(BackgroundTask)
            .where(BackgroundTask.id == task.id, BackgroundTask.run == task.run,
                   BackgroundTask.status == TaskStatus.FAILED)
            .values(**values)
            .execution_options(synchronize_session=False))
        for k, v in values.items():
            setattr(task, k, v)
        return task
