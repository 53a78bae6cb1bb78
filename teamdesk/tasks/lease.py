"""The execution lease: claim it, and fence every later write with it (P2, P3).

The lease is `{id, run, execution_id}`. Every write an executor makes after claiming is an
UPDATE … WHERE lease AND status = RUNNING, and it goes through `leased_update` here, so a
reader who knows the book finds every fenced write in one place. Zero rows matched means
a newer executor (or a recovery scan) took the task: `LeaseLost`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from teamdesk.db.models import BackgroundTask, TaskStatus


class LeaseLost(Exception):
    """This executor's lease no longer matches: another execution owns the task now, or
    recovery cleared it. Not a failure of the task (P6): the executor just stops."""

    def __init__(self, lease: Lease, during: str = "write") -> None:
        super().__init__(f"lease lost for {lease.task_id} run {lease.run} "
                         f"(execution {lease.execution_id[:8]}) during {during}")
        self.lease = lease
        self.during = during


@dataclass(frozen=True)
class Lease:
    """The right to commit for one execution of one run of one task (P3)."""

    task_id: str
    run: int
    execution_id: str

    def where(self) -> tuple:
        """The fencing condition: lease AND status = RUNNING."""
        return (
            BackgroundTask.id == self.task_id,
            BackgroundTask.run == self.run,
            BackgroundTask.execution_id == self.execution_id,
            BackgroundTask.status == TaskStatus.RUNNING,
        )


async def claim(
    sessions: async_sessionmaker[AsyncSession], task_id: str, run: int, attempts: int
) -> Lease | None:
    """Claim run `run` of the task with a fresh execution id (P2).

    The condition is `id, run, status IN (WAITING, RUNNING)`: it does not require an empty
    lease nor check its age, so a duplicate delivery or a recovery replaces an older
    execution id — and that older executor's next fenced write raises `LeaseLost`.
    `attempts` is the queue execution's attemptsMade + 1 (I3); progress restarts at 0 (P4).
    Returns None when nothing matched (COMPLETED, FAILED, or another run).
    """
    execution_id = str(uuid.uuid4())
    async with sessions() as session, session.begin():
        claimed = await session.scalar(
            update(BackgroundTask)
            .where(BackgroundTask.id == task_id, BackgroundTask.run == run,
                   BackgroundTask.status.in_([TaskStatus.WAITING, TaskStatus.RUNNING]))
            .values(status=TaskStatus.RUNNING, execution_id=execution_id, attempts=attempts,
                    progress=0)
            .returning(BackgroundTask.id)
            .execution_options(synchronize_session=False)
        )
    return Lease(task_id, run, execution_id) if claimed else None


async def leased_update(session: AsyncSession, lease: Lease, *, during: str = "write",
                        **values: Any) -> None:
    """UPDATE … WHERE lease AND RUNNING inside the caller's transaction; `LeaseLost` unless
    exactly one row matched (P3, P5, P10). Inside a transaction, raising is what rolls the
    other writes back: never signal a lost lease by returning (P10)."""
    result = await session.execute(
        update(BackgroundTask).where(*lease.where()).values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        raise LeaseLost(lease, during)


async def write_with_lease(sessions: async_sessionmaker[AsyncSession], lease: Lease, *,
                           during: str = "write", **values: Any) -> None:
    """`leased_update` in a transaction of its own (progress, export result, error report)."""
    async with sessions() as session, session.begin():
        await leased_update(session, lease, during=during, **values)
