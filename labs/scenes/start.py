"""Scene helpers of `00-start-here.ipynb`: what the first tour needs but a newcomer need not
read. The cells keep the story — the request, the scan, the gate that
pauses the worker — and call these in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from teamdesk.db.models import Ticket, TicketStatus

if TYPE_CHECKING:
    from labs.lab import Lab


@dataclass(frozen=True)
class FirstBatch:
    """What the ledger said while the worker was paused after its first batch."""

    #: The ledger's `progress` (percent) at that moment: written before the queue's (P4).
    progress: int
    #: How many tickets the export reads in all (the probe context's `total`).
    total: int


async def look_at_first_batch(lab: Lab, gate: Any, task_id: str, timeout: float) -> FirstBatch:
    """Wait (bounded) until `gate` — a gate at `export.after_progress` installed before the
    worker started — holds the worker after its first batch, read the task's ledger
    progress while it is paused, then let it go on. Pausing only makes the intermediate
    progress visible; the worker's path is unchanged (P4: ledger first, then the queue)."""
    ctx = await gate.reached(timeout)
    try:
        progress = (await lab.task(task_id)).progress
    finally:
        gate.release()  # never leave the worker paused, even if the read failed
    return FirstBatch(progress=progress, total=ctx["total"])


async def count_tickets(lab: Lab, status: str) -> int:
    """How many of the lab team's live (undeleted) tickets have `status`: the truth an
    export filtered on that status must match row for row (X1, X2), counted straight from
    the tickets table rather than from the export."""
    async with lab.sessions() as s:
        return await s.scalar(select(func.count()).select_from(Ticket).where(
            Ticket.team_id == lab.team, Ticket.status == TicketStatus(status),
            Ticket.deleted_at.is_(None)))
