"""The dispatcher's tail: stale recovery and the expired-CSV purge (D6, D7; X2).

Proves that a RUNNING row whose `updated_at` has not moved for 120 s goes back to WAITING
in the same run with its lease and `dispatched_at` cleared, while a row that moved 60 s ago
is untouched, and that the next tick enqueues the recovered row (D6); and that an expired
export's CSV is cleared by the tick while its row stays, a download being refused past
`expires_at` even before that purge (D7, X2).

D6's clock is compressed, not waited for: `updated_at` is written back with an explicit
UPDATE (the table's trigger keeps explicit values), and the dispatcher compares in the
database's clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from teamdesk.db.models import Scope, TaskStatus
from teamdesk.errors import ExportExpired
from teamdesk.services import exports
from teamdesk.tasks.dispatcher import dispatch_tasks
from teamdesk.testing import task_row
from tests.integration.dispatch_helpers import insert_task, job_state, set_columns


async def test_stale_running_goes_back_to_waiting_same_run(settings, sessions, demo, queue):
    """D6: RUNNING with `updated_at` older than 120 s → WAITING, lease and dispatched_at
    cleared, same run (no run+1); a RUNNING row that moved 60 s ago stays. `updated_at` is
    aged with an explicit UPDATE (the trigger keeps explicit values): this compresses the
    recovery clock rather than waiting two minutes. Recovery runs after the dispatch loop,
    so the recovered row is enqueued by the next tick."""
    now = datetime.now(UTC)
    stale = await insert_task(sessions, status=TaskStatus.RUNNING, run=2,
                              execution_id="old-exec", attempts=2, progress=40,
                              dispatched_at=now - timedelta(minutes=10))
    alive = await insert_task(sessions, status=TaskStatus.RUNNING, execution_id="live-exec",
                              dispatched_at=now - timedelta(minutes=10))
    await set_columns(sessions, stale, updated_at=now - timedelta(seconds=121))
    await set_columns(sessions, alive, updated_at=now - timedelta(seconds=60))
    alive_before = await task_row(sessions, alive)

    report = await dispatch_tasks(queue, settings)
    assert (report.scanned, report.recovered_stale) == (0, 1)
    row = await task_row(sessions, stale)
    assert (row["status"], row["run"], row["execution_id"], row["dispatched_at"]) == (
        TaskStatus.WAITING, 2, None, None)
    assert row["updated_at"] > now - timedelta(seconds=5)  # the trigger advanced it
    assert await task_row(sessions, alive) == alive_before
    assert await job_state(queue, stale, run=2) is None

    report = await dispatch_tasks(queue, settings)
    assert report.added == 1 and await job_state(queue, stale, run=2) == "waiting"


async def test_expired_export_csv_is_purged_and_download_refused_before(settings, sessions,
                                                                        demo, queue):
    """D7, X2: past `expires_at` the download is refused even while the CSV is still stored
    (the purge has not run); the tick then clears `result_csv` and keeps the row; an export
    that has not expired keeps its file."""
    now = datetime.now(UTC)
    done = {"status": TaskStatus.COMPLETED, "progress": 100, "result_csv": "id,title\r\n1,x\r\n",
            "result_summary": "1 ticket"}
    expired = await insert_task(sessions, owner_id="dan", scope=Scope.OWN,
                                expires_at=now - timedelta(minutes=1), **done)
    fresh = await insert_task(sessions, owner_id="dan", scope=Scope.OWN,
                              expires_at=now + timedelta(hours=1), **done)
    async with sessions() as s:
        with pytest.raises(ExportExpired):
            await exports.download_export(s, "acme", "dan", expired)
    assert (await task_row(sessions, expired))["result_csv"] is not None  # not purged yet

    report = await dispatch_tasks(queue, settings)
    assert report.purged == 1
    row = await task_row(sessions, expired)
    assert (row["status"], row["result_csv"], row["result_summary"]) == (
        TaskStatus.COMPLETED, None, "1 ticket")
    async with sessions() as s:
        with pytest.raises(ExportExpired):
            await exports.download_export(s, "acme", "dan", expired)
        assert (await exports.download_export(s, "acme", "dan", fresh)).csv == done["result_csv"]
