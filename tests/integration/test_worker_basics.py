"""The real worker end to end: export and reminder complete (X1, X3, P4, P5, P10, M1)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from teamdesk.db.models import (
    BackgroundTask,
    Notification,
    TaskStatus,
    Ticket,
)
from teamdesk.services import exports, tickets
from teamdesk.testing import enqueue, reminder_effects, task_row


async def test_export_completes_with_csv_summary_and_expiry(sessions, demo, queue, start_worker,
                                                            recorder):
    """X1, P4, P5: batches with ledger progress, COMPLETED 100, CSV of exactly the matching
    tickets, summary, expiry 24 h; the queue job completed with progress 100."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    await start_worker("W", export_batch_size=20)
    job = await enqueue(queue, task.id)
    await recorder.wait_for("completed", job_id=job.id)
    row = await task_row(sessions, task.id)
    assert (row["status"], row["progress"], row["execution_id"], row["attempts"]) == (
        TaskStatus.COMPLETED, 100, None, 1)
    assert abs(row["expires_at"] - datetime.now(UTC) - timedelta(hours=24)) < timedelta(minutes=1)
    async with sessions() as s:
        expected = (await s.scalars(select(Ticket.id).where(
            Ticket.team_id == "acme", Ticket.status == "OPEN").order_by(Ticket.id))).all()
        file = await exports.download_export(s, "acme", "ben", task.id)
    got = [int(r["id"]) for r in csv.DictReader(io.StringIO(file.csv))]
    assert got == list(expected) and len(got) > 20
    assert row["result_summary"].startswith(f"{len(got)} tickets exported")
    assert await job.getState() == "completed"
    assert (await queue.getJob(job.id)).progress == 100


async def _dan_exports(sessions, queue, start_worker, recorder, text: str) -> list[dict]:
    """Dan exports the tickets whose text matches `text`; the real worker runs it and the
    downloaded CSV is parsed back as a spreadsheet import would (`newline=""`: a CR inside
    a quoted cell stays in the cell)."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "dan", {"text": text})
    await start_worker("W")
    job = await enqueue(queue, task.id)
    await recorder.wait_for("completed", job_id=job.id)
    async with sessions() as s:
        file = await exports.download_export(s, "acme", "dan", task.id)
    return list(csv.DictReader(io.StringIO(file.csv, newline="")))


async def test_csv_neutralises_formula_cells(sessions, demo, queue, start_worker, recorder):
    """X3: a title starting with '=' is exported with a leading apostrophe."""
    async with sessions() as s:
        ticket, _ = await tickets.create_ticket(s, "acme", "dan", "=HYPERLINK(\"x\")")
    rows = await _dan_exports(sessions, queue, start_worker, recorder, "HYPERLINK")
    assert [r["title"] for r in rows] == ["'=HYPERLINK(\"x\")"]
    assert ticket.id == int(rows[0]["id"])


@pytest.mark.parametrize("starts", [
    ("=", "+", "-", "@", "\t"),
    ("\r",),
], ids=["eq-plus-minus-at-tab", "cr"])
async def test_every_formula_start_is_neutralised_end_to_end(sessions, demo, queue,
                                                             start_worker, recorder, starts):
    """X3, X1, X2: tickets whose titles begin with each formula start, exported by the real
    worker and downloaded, parse back (csv module, as a spreadsheet import would) to exactly
    those tickets, one record each, every title with one leading apostrophe. The titles are
    written with SQL: `create_ticket` strips surrounding whitespace, so a leading tab or CR
    can only come from another path (an import, an older row) — the export must still be
    safe. The CR case once let a formula through: with a bare CR in a cell a reader started a
    new record there; `to_csv` now ends records with CRLF, so such a cell is quoted."""
    titles = {}
    async with sessions() as s:
        for i, start in enumerate(starts):
            ticket, _ = await tickets.create_ticket(s, "acme", "dan", f"x3 case {i}")
            titles[ticket.id] = f"{start}cmd|' /C calc'!A0 x3 case {i}"
    async with sessions() as s, s.begin():
        for ticket_id, title in titles.items():
            await s.execute(update(Ticket).where(Ticket.id == ticket_id).values(title=title))
    rows = await _dan_exports(sessions, queue, start_worker, recorder, "x3 case")
    assert {int(r["id"]): r["title"] for r in rows} == {
        ticket_id: "'" + title for ticket_id, title in titles.items()}
    assert len(rows) == len(titles) and all(r["creator_id"] == "dan" for r in rows)




async def test_reminder_sends_once_and_stale_one_is_a_noop(sessions, demo, queue, start_worker,
                                                           recorder):
    """P10: notification + version+1 + event + COMPLETED in one commit; M1: a superseded
    reminder completes as a no-op saying why."""
    due = datetime.now(UTC) - timedelta(minutes=1)
    async with sessions() as s:
        ticket, first = await tickets.create_ticket(s, "acme", "eve", "Call back", due_at=due,
                                                    assignee_id="ben")
    async with sessions() as s:
        ticket, second = await tickets.set_due_date(s, "acme", "ben", ticket.id, due)
    before = await reminder_effects(sessions, ticket.id)
    await start_worker("W")
    for t in (first, second):
        job = await enqueue(queue, t.id)
        await recorder.wait_for("completed", job_id=job.id)
    n, e, v = await reminder_effects(sessions, ticket.id)
    assert (n, e, v) == (1, 1, before[2] + 1)
    stale, current = await task_row(sessions, first.id), await task_row(sessions, second.id)
    assert stale["status"] == current["status"] == TaskStatus.COMPLETED
    assert stale["result_summary"].startswith("No reminder sent: superseded")
    assert current["result_summary"] == "Reminder sent to ben (revision 2)."
    async with sessions() as s:
        note = await s.scalar(select(Notification).where(Notification.ticket_id == ticket.id))
    assert (note.recipient_id, note.reminder_revision) == ("ben", 2)


async def test_malformed_or_missing_task_job_ends_without_retry(sessions, demo, queue,
                                                               start_worker, recorder):
    """Bad input: a malformed payload or a missing task is logged and ends with
    UnrecoverableError (exhausted, attempts 1), with no ledger write."""
    async with sessions() as s:
        before = await s.scalar(select(func.max(BackgroundTask.updated_at)))
    await start_worker("W", backoff_delay_ms=30)
    bad = await queue.add("execute", {"taskId": 42}, {"jobId": "bad-0"})
    missing = await enqueue(queue, "TZZZZZ")
    for job in (bad, missing):
        ev = await recorder.wait_for("failed", job_id=job.id)
        assert ev["exhausted"] is True and ev["attempts_made"] == 1
        assert "UnrecoverableError" in ev["error"]
    async with sessions() as s:
        assert await s.scalar(select(func.max(BackgroundTask.updated_at))) == before


async def test_completed_task_is_skipped(sessions, demo, queue, start_worker, recorder):
    """P1: a delivery for a COMPLETED task, or for an older run, touches nothing."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"priority": ["URGENT"]})
    await start_worker("W")
    job = await enqueue(queue, task.id)
    await recorder.wait_for("completed", job_id=job.id)
    snapshot = await task_row(sessions, task.id)
    again = await queue.add("execute", {"taskId": task.id, "run": 0}, {"jobId": "again"})
    ev = await recorder.wait_for("completed", job_id=again.id)
    assert ev["result"].startswith("skipped")
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == task.id)
                        .values(run=1, status=TaskStatus.WAITING))
    old = await queue.add("execute", {"taskId": task.id, "run": 0}, {"jobId": "old-run"})
    ev = await recorder.wait_for("completed", job_id=old.id)
    assert ev["result"] == "skipped: ledger is run 1 WAITING"
    assert (await task_row(sessions, task.id))["result_csv"] == snapshot["result_csv"]
