"""Scene helpers of `24-reminders.ipynb` (chapter 24, inferred: reminders voided by a
revision number).

Two tables the notebook shows after each scene — the reminder tasks and the tickets they
belong to — and the judge of its exercise. A learner need not read them to follow the
chapter; the scenes (re-schedule, clear, close, run, duplicate) stay in the cells.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from sqlalchemy import select

from labs import tables
from labs.names import Names
from teamdesk.db.models import Ticket, TicketEvent
from teamdesk.tasks.queue import job_states, task_job_id


async def reminders(lab: Any, names: Names, *tasks: Any) -> pd.DataFrame:
    """One row per REMINDER task, by name: its ticket, its revision (O3), its ledger
    status, its queue job's state ("none" without a record) and its result summary (which
    says why a stale reminder sent nothing, M1)."""
    ledger = [await lab.task(t.id) for t in tasks]
    states = await job_states(lab.queue, [task_job_id(row.id, row.run) for row in ledger])
    rows = [{"task": names.of(row.id), "ticket": names.of(row.ticket_id),
             "revision": row.reminder_revision, "status": row.status.value,
             "job": state or "none", "summary": row.result_summary or ""}
            for row, state in zip(ledger, states, strict=True)]
    return pd.DataFrame(rows).set_index("task")


async def tickets(lab: Any, names: Names, *items: Any) -> pd.DataFrame:
    """One row per ticket, by name: status, due date set or not, current revision, version,
    notifications and history events — a reminder's effects (P10) in one place."""
    rows = []
    for t in items:
        notified, _events, version = await tables.reminder_effects(lab, t.id)
        async with lab.sessions() as s:
            tk = await s.get(Ticket, t.id)
            kinds = (await s.scalars(select(TicketEvent.kind).where(
                TicketEvent.ticket_id == t.id).order_by(TicketEvent.id))).all()
        rows.append({"ticket": names.of(t.id), "status": tk.status.value,
                     "due": "set" if tk.due_at else "none",
                     "revision": tk.reminder_revision, "version": version,
                     "notifications": notified, "events": ", ".join(kinds)})
    return pd.DataFrame(rows).set_index("ticket")


async def d_facts(lab: Any, d1: Any, task: Any) -> dict[str, Any]:
    """The exercise's facts about ticket D: the new reminder `task` (status, summary; None
    if `task` is not a REMINDER task) and the old `d1` (ledger status, queue state)."""
    new = await lab.task(task.id) if getattr(task, "type", None) == "REMINDER" else None
    old = await lab.task(d1.id)
    [old_state] = await job_states(lab.queue, [task_job_id(old.id, old.run)])
    return {"new": new and (new.status.value, new.result_summary or ""),
            "d1": (old.status.value, old_state)}


def d_judged(facts: dict[str, Any] | None) -> bool | str:
    """The exercise's judge: D's new reminder completed with a reminder sent, while `d1`
    still waits in Redis as a delayed job (nothing was cancelled there, O4; it will find
    its revision stale tomorrow, M1). A string says what is not there yet."""
    if facts is None or facts["new"] is None:
        return "answer should be D's new REMINDER task"
    status, summary = facts["new"]
    if status != "COMPLETED" or not summary.startswith("Reminder sent"):
        return f"the new reminder is {status}, not yet completed with a reminder sent"
    return facts["d1"] == ("WAITING", "delayed") or f"d1 is {facts['d1']}"
