"""The book's fourth named database test on its own (ch. 26 §8, `-t '…|手动重试'`): a
manual retry opens a new run; a message of the old run is skipped and leaves the task
WAITING; the new run completes with run = 1. Notebook 27 runs it from a cell."""

from __future__ import annotations

import pytest

from teamdesk.db.models import TaskStatus
from teamdesk.services import exports, tasks
from teamdesk.tasks.processor import TaskContext, process_task
from teamdesk.testing import FakeJob, task_row
from tests.integration.conftest import direct_run, once_more_changes_nothing


async def test_manual_retry_skips_the_old_run(settings, sessions, demo):
    """R2, R3, P1: the last automatic attempt fails (FAILED); a manual retry opens run 1;
    the old run's message is skipped (task still WAITING); the new run completes."""
    ctx = TaskContext(settings=settings, actor="A")
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    with pytest.raises(ConnectionError):
        await process_task(FakeJob(task.id, attempts_made=2, fail_at=lambda v: True),
                           None, ctx)
    assert (await task_row(sessions, task.id))["status"] == TaskStatus.FAILED

    async with sessions() as s:
        await tasks.retry_task(s, "acme", "ben", task.id)
    assert await process_task(FakeJob(task.id, run=0), None, ctx) == \
        "skipped: ledger is run 1 WAITING"
    row = await task_row(sessions, task.id)
    assert (row["status"], row["run"], row["result_csv"]) == (TaskStatus.WAITING, 1, None)

    await process_task(FakeJob(task.id, run=1), None, ctx)
    row = await task_row(sessions, task.id)
    assert (row["status"], row["run"], row["progress"]) == (TaskStatus.COMPLETED, 1, 100)
    again = await once_more_changes_nothing(sessions, task.id, direct_run(ctx, task.id, 0))
    assert again == "skipped: ledger is run 1 COMPLETED"
