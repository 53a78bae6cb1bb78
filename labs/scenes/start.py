"""Scene helpers of `00-start-here.ipynb`: what the first tour needs but a newcomer need not
read. The cells keep the story — the request, the scan, the gate that
pauses the worker — and call these in one line.

§7's exercise (`00.rows`, `labs.exercises`): the learner writes Ben's export of the closed
tickets end to end as a function, `judge_rows` runs it in a lab world of its own with a
worker and compares its count with the tickets table and the export it really made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from labs.exercises import Verdict, exercise, failed, passed, run_answer, whole_number
from labs.i18n import say
from labs.worlds import fresh_world
from teamdesk.db.models import BackgroundTask, TaskType, Ticket, TicketStatus
from teamdesk.services import exports

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings


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


# ------------------------------------------------------------ §7's exercise: an export of one's own

#: Seconds the learner's export may take, end to end, in the judge's world.
ROWS_BOUND = 30.0
#: Ben's wish in §7: the team's CLOSED tickets, and only those.
CLOSED = {"status": ["CLOSED"]}


async def _csv_lines(lab: Lab, filters: dict[str, Any]) -> list[str]:
    """Ben's export with `filters`, end to end: request, one tick, the worker, download."""
    task = await lab.request_export(filters, user="ben")
    await lab.dispatch()
    await lab.wait_for("completed", task_id=task.id)
    async with lab.sessions() as s:
        file = await exports.download_export(s, lab.team, "ben", task.id)
    return file.csv.splitlines()


async def _with_the_header(lab: Lab) -> int:
    """A plausible wrong count: every line of the CSV, the header line too."""
    return len(await _csv_lines(lab, CLOSED))


async def _all_tickets(lab: Lab) -> int:
    """A plausible wrong export: no filter, so every ticket of the team."""
    return len(await _csv_lines(lab, {})) - 1


async def _no_export(lab: Lab) -> int:
    """A plausible shortcut: the right number, counted in the tickets table, no export."""
    return await count_tickets(lab, "CLOSED")


async def _exports_by_ben(lab: Lab) -> list[tuple[str, dict[str, Any], int | None]]:
    """Every export Ben asked for in the judge's world: its status, its filters and, once
    completed, the number of data rows of its CSV (its lines minus the header)."""
    async with lab.sessions() as s:
        rows = (await s.scalars(select(BackgroundTask).where(
            BackgroundTask.type == TaskType.EXPORT, BackgroundTask.owner_id == "ben")
            .order_by(BackgroundTask.created_at))).all()
    return [(r.status.value, dict(r.filters or {}),
             len(r.result_csv.splitlines()) - 1 if r.result_csv is not None else None)
            for r in rows]


@exercise("00.rows", answer="my_closed_rows", solution="solution_closed_rows",
          wrong={"the header counted too": _with_the_header,
                 "every ticket exported": _all_tickets,
                 "counted in the tickets table, no export": _no_export})
async def judge_rows(fn: Any, *, settings: Settings | None = None) -> Verdict:
    """§7: run the learner's `fn(lab)` in a lab world of its own with a worker running
    (bounded by `ROWS_BOUND`), then compare what it returned with the tickets table and
    with the exports Ben really asked for there: one export of the CLOSED tickets must
    have completed, its CSV holding one row per closed ticket (X1, X2)."""
    if not callable(fn):
        return failed(say("start.rows.write-function", "write a function: async def "
                          "my_closed_rows(lab): … return the number of rows"))
    notes: list[str] = []
    async with fresh_world("00-rows-judge", notes, settings=settings, tickets=60) as lab:
        await lab.start_worker("W")
        ran = await run_answer(fn, lab, bound=ROWS_BOUND)
        if ran.refused is not None:
            return ran.refused
        rows = ran.value
        truth = await count_tickets(lab, "CLOSED")
        made = await _exports_by_ben(lab)
    if notes:
        return failed(say("start.rows.stopped", "your export did not finish:"), *notes)
    counted = whole_number(rows)
    if counted is None:
        return failed(say("start.rows.not-a-number", "your function returned {rows!r}: "
                          "return the number of rows (an int)", rows=rows),
                      rows=rows, truth=truth, exports=made)
    rows = counted
    facts = {"rows": rows, "truth": truth, "exports": made}
    closed = [n for status, filters, n in made if status == "COMPLETED" and filters == CLOSED]
    if not closed:
        shown = "; ".join(f"{status} {filters or '{}'}" for status, filters, _ in made)
        asked = say("start.rows.asked", "Ben's exports in the judge's world: {shown}",
                    shown=shown or "none")
        return failed(say("start.rows.no-closed-export", "no export of the CLOSED tickets "
                          "completed: request it as Ben with the filter {filters}, dispatch, "
                          "wait for the worker", filters=CLOSED), asked, **facts)
    if rows == truth + 1:
        return failed(say("start.rows.header", "{rows} is one more than the CSV's data rows: "
                          "its first line is the header", rows=rows), **facts)
    if rows not in closed:
        return failed(say("start.rows.not-the-csv", "{rows} is not the number of data rows of "
                          "your CLOSED export's CSV ({counted})", rows=rows,
                          counted=", ".join(map(str, closed))), **facts)
    if rows != truth:
        return failed(say("start.rows.wrong-count", "{rows} rows, but the judge's world has "
                          "{truth} CLOSED tickets in its tickets table", rows=rows, truth=truth),
                      **facts)
    return passed(say("start.rows.holds", "the CSV holds exactly the team's closed tickets: "
                      "{truth} in the judge's world (X1, X2)", truth=truth), **facts)
