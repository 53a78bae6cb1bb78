"""The executor registry (`teamdesk.tasks.processor.EXECUTORS`): a task's type names its
executor; a type with none is a permanent rejection (P7, P8). Real PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest
from bullmq.custom_errors import UnrecoverableError

from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.errors import RejectReason, TaskRejected
from teamdesk.tasks.exports import run_export
from teamdesk.tasks.processor import EXECUTORS, executor_for, process_task
from teamdesk.tasks.reminders import run_reminder
from teamdesk.testing import FakeJob


def test_every_task_type_of_the_schema_has_its_executor():
    """O2: EXPORT and REMINDER rows are run by their own executors, and the registry is
    read-only (a type gets an executor in the product, not by patching)."""
    assert dict(EXECUTORS) == {"EXPORT": run_export, "REMINDER": run_reminder}
    with pytest.raises(TypeError):
        EXECUTORS["SURVEY"] = run_export  # type: ignore[index]


def test_a_type_without_an_executor_is_rejected_with_the_fixed_text():
    """P8: fixed, readable, and says retrying will not help."""
    with pytest.raises(TaskRejected) as raised:
        executor_for("SURVEY")
    assert raised.value.reason is RejectReason.UNKNOWN_TYPE
    assert raised.value.last_error == ("Rejected: this kind of task has no executor in this "
                                       "worker. Retrying will not help.")


async def test_a_claimed_task_of_an_unknown_type_ends_failed_not_retried(settings, demo):
    """P7, P8: a row whose type this worker has no executor for (a newer version's type,
    added to this test's own database) is claimed, then rejected for good: FAILED with the
    fixed text, lease cleared, and the queue told `UnrecoverableError` — it was not run as
    a reminder, nor retried."""
    async with await psycopg.AsyncConnection.connect(settings.database_url,
                                                     autocommit=True) as conn:
        await conn.execute("ALTER TYPE task_type ADD VALUE 'SURVEY'")
        row = await (await conn.execute(
            "INSERT INTO background_tasks (type, status, owner_id, team_id) "
            "VALUES ('SURVEY', 'WAITING', 'ben', 'acme') RETURNING id")).fetchone()
        task_id = row[0]

        with pytest.raises(UnrecoverableError, match="no executor"):
            await process_task(FakeJob(task_id), None, TaskContext(settings=settings,
                                                                   actor="A"))
        status, attempts, execution_id, last_error = await (await conn.execute(
            "SELECT status::text, attempts, execution_id, last_error FROM background_tasks "
            "WHERE id = %s", (task_id,))).fetchone()
    assert (status, attempts, execution_id) == ("FAILED", 1, None)
    assert last_error == TaskRejected(RejectReason.UNKNOWN_TYPE).last_error


async def test_services_and_the_reminder_executor_take_the_same_team_lock(settings, sessions,
                                                                          demo):
    """ch. 26 §5, P10: a service holding the team lock (`lock_team`) holds up the reminder
    executor's `team_lock` statement for that team and no other team's: one key, computed
    in one place (`team_lock_key`)."""
    from teamdesk.db.locks import lock_team, team_lock_key
    from teamdesk.tasks.ledger import execute

    async with sessions() as holder, holder.begin():
        await lock_team(holder, demo.team_id)
        async with await psycopg.AsyncConnection.connect(settings.database_url,
                                                         autocommit=True) as conn:
            await conn.execute("SET lock_timeout = '200ms'")
            await execute(conn, "team_lock", {"key": team_lock_key("another-team")})
            with pytest.raises(psycopg.errors.LockNotAvailable):
                async with conn.transaction():
                    await execute(conn, "team_lock", {"key": team_lock_key(demo.team_id)})
