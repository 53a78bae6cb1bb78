"""The execution lease: claim it, and fence every later write with it (P2, P3).

The lease is `{id, run, execution_id}`. Every write an executor makes after claiming is an
UPDATE … WHERE lease AND status = RUNNING (the fenced statements of `queries.sql`), and it
goes through `leased_update` here, so a reader who knows the book finds every fenced write
in one place. Zero rows matched means a newer executor (or a recovery scan) took the task:
`LeaseLost`.

Executors and the processor reach it as `ctx.fence` (`teamdesk.tasks.context`), which is
`leased_update` unless whoever built the context passed another `Fence` — a lab's old
fence (`labs.fences`), shown beside the right one. The product never does.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from teamdesk.tasks.ledger import execute, fetch_one

#: The statements that are fenced by the lease; `leased_update` refuses any other, so an
#: unfenced UPDATE cannot slip in through it.
FENCED = frozenset({"progress", "export_result", "reminder_completion", "report_retryable",
                    "report_final"})


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
        """The fencing condition as SQLAlchemy expressions (lease AND status = RUNNING), for
        notebooks and labs that write through a session; the task path itself uses the
        fenced statements of `queries.sql`."""
        from teamdesk.db.models import BackgroundTask, TaskStatus

        return (
            BackgroundTask.id == self.task_id,
            BackgroundTask.run == self.run,
            BackgroundTask.execution_id == self.execution_id,
            BackgroundTask.status == TaskStatus.RUNNING,
        )

    def params(self) -> dict[str, Any]:
        """The fencing parameters: `id, run, execution_id` (the statement adds RUNNING)."""
        return {"task_id": self.task_id, "run": self.run, "execution_id": self.execution_id}


class Fence(Protocol):
    """The shape of `leased_update`: what `TaskContext.fence` holds (P3)."""

    def __call__(self, conn: Any, lease: Lease, statement: str | None = None, *,
                 during: str = "write", **values: Any) -> Awaitable[None]: ...


async def claim(conn: psycopg.AsyncConnection, task_id: str, run: int,
                attempts: int) -> tuple[Lease, Any] | None:
    """Claim run `run` of the task with a fresh execution id (P2), in one round trip.

    The condition is `id, run, status IN (WAITING, RUNNING)`: it does not require an empty
    lease nor check its age, so a duplicate delivery or a recovery replaces an older
    execution id — and that older executor's next fenced write raises `LeaseLost`.
    `attempts` is the queue execution's attemptsMade + 1 (I3); progress restarts at 0 (P4).
    Returns the lease and the claimed row (`UPDATE … RETURNING`, no separate load), or
    None when nothing matched (COMPLETED, FAILED, another run, or no such task).
    """
    execution_id = str(uuid.uuid4())
    row = await fetch_one(conn, "claim", {"task_id": task_id, "run": run,
                                          "execution_id": execution_id, "attempts": attempts})
    return (Lease(task_id, run, execution_id), row) if row is not None else None


async def leased_update(conn: Any, lease: Lease, statement: str | None = None, *,
                        during: str = "write", **values: Any) -> None:
    """Run fenced statement `statement` with the lease filled in; `LeaseLost` unless
    exactly one row matched (P3, P5, P7, P10).

    It runs on the caller's connection, hence inside the caller's transaction when there
    is one (the reminder, P10): there, raising is what rolls the other writes back —
    never signal a lost lease by returning. `conn` is the task path's psycopg connection;
    an SQLAlchemy `AsyncSession` is accepted too (notebooks show the gate inside a session
    transaction): then `values` are the columns to set, under the same fence."""
    if isinstance(conn, psycopg.AsyncConnection):
        if statement not in FENCED:
            raise ValueError(f"{statement!r} is not a lease-fenced statement")
        rowcount = (await execute(conn, statement, {**values, **lease.params()})).rowcount
    else:
        from sqlalchemy import update

        from teamdesk.db.models import BackgroundTask

        if statement is not None:
            raise ValueError("a session writes columns (values), not a named statement")
        rowcount = (await conn.execute(
            update(BackgroundTask).where(*lease.where()).values(**values)
            .execution_options(synchronize_session=False))).rowcount
    if rowcount != 1:
        raise LeaseLost(lease, during)
