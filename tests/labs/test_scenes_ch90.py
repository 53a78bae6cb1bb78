"""`labs.scenes.ch90` (notebook 90): the exercise's truth is the ledger's FAILED rows with a
raw text, not the fixed ones; `worker_children` sees a live worker process of ours and
forgets it once it exited. Real PostgreSQL, Redis and a real `teamdesk worker` process."""

from __future__ import annotations

from sqlalchemy import update

from labs.chaos import REJECT_TEXTS
from labs.procs import WorkerProc
from labs.scenes import ch90
from teamdesk.db.models import BackgroundTask, TaskStatus


async def test_raw_failures_names_only_rows_with_a_raw_text(lab):
    """P8: a FAILED row with a fixed rejection text is fine; one with the raw error text of
    a lease-less `failed` listener (W2) is what the exercise collects."""
    fixed, raw, _waiting = [await lab.request_export({"status": [status]}, user="ben")
                            for status in ("OPEN", "CLOSED", "PENDING")]
    async with lab.sessions() as s, s.begin():
        for task, text in ((fixed, sorted(REJECT_TEXTS)[0]),
                           (raw, "UnrecoverableError: Rejected at processor.py:42")):
            await s.execute(update(BackgroundTask).where(BackgroundTask.id == task.id)
                            .values(status=TaskStatus.FAILED, last_error=text))
    assert await ch90.raw_failures(lab) == {raw.id}  # not `fixed`, not the WAITING one


async def test_worker_children_sees_a_live_worker_only(lab, tmp_path):
    """A chaos run must leave no worker process behind: a running `teamdesk worker` of this
    process is listed, and no longer once it has stopped."""
    w = WorkerProc(lab.settings, "wx", tmp_path, {})
    w.start()
    try:
        assert w.pid in {p.pid for p in ch90.worker_children()}
    finally:
        await w.stop(30)
    assert w.pid not in {p.pid for p in ch90.worker_children()}
