"""`labs.scenes.ch26a`: the stand-in job of notebook 26a §3 drives the real processor (P7,
I3). Real PostgreSQL. (§3's exercise, a job with another budget, is judged by the registry
test: `exercise_reasons.py` says why each answer is refused.)"""

from __future__ import annotations

from labs.scenes import ch26a
from teamdesk.tasks.processor import TaskContext, process_task
from teamdesk.testing import FakeJob


async def test_stand_in_executions_classify_like_the_book(lab):
    """attemptsMade 0 and 1 with a lost queue connection leave WAITING and re-raise the
    ConnectionError; attemptsMade 2 is the last of the budget: FAILED (P7, Q1). The
    progress of the batch read before the failing report stays in the ledger (P4)."""
    ctx = TaskContext(settings=lab.settings, actor="A")
    task = await lab.request_export({"status": ["OPEN"]}, user="ben")
    rows = []
    for made in range(3):
        job = FakeJob(task.id, attempts_made=made, fail_at=ch26a.every_report)
        raised = await ch26a.raised_by(process_task(job, None, ctx))
        rows.append(await ch26a.after_execution(lab, task.id, made, raised))
    assert [r["status"] for r in rows] == ["WAITING", "WAITING", "FAILED"]
    assert [r["attempts"] for r in rows] == [1, 2, 3]
    assert [r["final"] for r in rows] == [False, False, True]
    assert [r["raised"] for r in rows] == ["ConnectionError"] * 3
    assert all(r["lease"] is None and r["result_csv"] is None for r in rows)


async def test_raised_by_names_the_exception_or_none():
    """The table names what reached the queue: an exception's class, "-" for a return."""
    async def ok() -> str:
        return "done"

    async def broken() -> None:
        raise ConnectionError("gone")

    assert await ch26a.raised_by(ok()) == "-"
    assert await ch26a.raised_by(broken()) == "ConnectionError"
