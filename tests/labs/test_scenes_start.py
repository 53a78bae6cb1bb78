"""`labs.scenes.start` (notebook 00): the first-batch peek sees the ledger mid-export and
always lets the worker go on; the ticket count is the truth an export must match. Real
PostgreSQL, Redis and an in-process worker."""

from __future__ import annotations

from labs.scenes import start
from teamdesk.services import exports

T = 8


async def test_first_batch_peek_sees_partial_progress_then_the_export_completes(lab):
    """P4: the ledger's progress after the first batch is partial (written before the
    queue's); the peek releases the gate, so the export still completes (P5), and its row
    count is `count_tickets` of the filtered status (X1, X2)."""
    task = await lab.request_export({"status": ["OPEN"]}, user="ben")
    await lab.dispatch()
    gate = lab.gate("export.after_progress")
    await lab.start_worker("W", export_batch_size=10)
    first = await start.look_at_first_batch(lab, gate, task.id, T)
    await lab.wait_for("completed", task_id=task.id, timeout=T)

    open_tickets = await start.count_tickets(lab, "OPEN")
    assert first.total == open_tickets > 10  # more than one batch, so the peek is mid-way
    assert 0 < first.progress < 100
    async with lab.sessions() as s:
        file = await exports.download_export(s, lab.team, "ben", task.id)
    assert len(file.csv.splitlines()) - 1 == open_tickets
