"""The dispatcher's mark, `dispatched_at`, against real PostgreSQL and real Redis (D3, D8).

Proves that the mark is written only after a successful add: at the add the row is still
unmarked; a job that completed the task before the mark leaves the row COMPLETED (the
mark's `status = WAITING` condition matches nothing, never turning it back); a fault right
before the add leaves no job and no mark, so the next tick picks the row first (D1, D8).
Both staged at the probe point `dispatch.before_add`, with no sleep.
"""

from __future__ import annotations

from typing import Any

import pytest

from teamdesk import probes
from teamdesk.db.models import TaskStatus
from teamdesk.tasks.dispatcher import dispatch_tasks
from teamdesk.testing import task_row
from tests.integration.dispatch_helpers import insert_task, job_state, set_columns


async def test_dispatched_at_only_after_add_and_never_reverts_completed(
        settings, sessions, demo, queue):
    """D3: at the moment of the add `dispatched_at` is still NULL (never written before
    the add). The job completes the task right then (the probe marks it COMPLETED, as a
    fast worker would): the mark matches zero rows and the row stays COMPLETED."""
    task_id = await insert_task(sessions)
    seen: dict[str, Any] = {}

    async def fast_worker(point: str, ctx: dict[str, Any]) -> None:
        if point == "dispatch.before_add" and ctx["task_id"] == task_id:
            seen.update(await task_row(sessions, task_id))
            await set_columns(sessions, task_id, status=TaskStatus.COMPLETED, progress=100)

    with probes.installed(fast_worker):
        report = await dispatch_tasks(queue, settings)
    assert seen["dispatched_at"] is None and seen["status"] is TaskStatus.WAITING
    assert report.added == 1 and await job_state(queue, task_id) == "waiting"  # the add happened
    row = await task_row(sessions, task_id)
    assert (row["status"], row["dispatched_at"]) == (TaskStatus.COMPLETED, None)


async def test_failed_add_writes_no_dispatched_at(settings, sessions, demo, queue, gates):
    """D3: a fault injected right before the add ends the tick; nothing was added and
    `dispatched_at` stays NULL, so the next tick picks the row first."""
    task_id = await insert_task(sessions)
    # Fires at the first crossing only: the second tick below adds normally.
    gates.fault("dispatch.before_add", RuntimeError("injected before add"))

    with pytest.raises(RuntimeError, match="injected before add"):
        await dispatch_tasks(queue, settings)
    assert await job_state(queue, task_id) is None
    assert (await task_row(sessions, task_id))["dispatched_at"] is None
    report = await dispatch_tasks(queue, settings)
    assert report.added == 1 and (await task_row(sessions, task_id))["dispatched_at"] is not None
