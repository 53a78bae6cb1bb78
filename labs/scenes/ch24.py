"""Scene helpers of `24-reminders.ipynb` (chapter 24, inferred: reminders voided by a
revision number).

Two tables the notebook shows after each scene — the reminder tasks and the tickets they
belong to — the facts and judge of exercise D (a `learn.check`), and the judge of the
stale-check exercise (`24.stale`, `labs.exercises`). A learner need not read them to
follow the chapter; the scenes (re-schedule, clear, close, run, duplicate) stay in the
cells.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import select

from labs import tables
from labs.exercises import Verdict, exercise, failed, passed
from labs.i18n import say
from labs.names import Names
from labs.worlds import world_context
from teamdesk.db.models import Ticket, TicketEvent
from teamdesk.tasks.queue import job_states, task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab


async def reminders(lab: Lab, names: Names, *tasks: Any) -> pd.DataFrame:
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


async def tickets(lab: Lab, names: Names, *items: Any) -> pd.DataFrame:
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


async def d_facts(lab: Lab, d1: Any, task: Any) -> dict[str, Any]:
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
        return say("ch24.d.not-a-reminder", "answer should be D's new REMINDER task")
    status, summary = facts["new"]
    if status != "COMPLETED" or not summary.startswith("Reminder sent"):
        return say("ch24.d.new-reminder-unsent",
                   "the new reminder is {status}, not yet completed with "
                   "a reminder sent", status=status)
    return facts["d1"] == ("WAITING", "delayed") or say("ch24.d.d1-not-delayed", "d1 is {d1}",
                                                        d1=facts["d1"])


# ------------------------------------------------------------ Exercise (ours): the stale check

async def _situations(lab: Lab) -> list[tuple[str, Any, bool, str]]:
    """Four tickets, each with a reminder due now, changed by the product's services:
    (what happened, the reminder to run, whether it should remind anyone, what a wrong
    answer costs)."""
    from teamdesk.services import tickets as ticket_services

    now = datetime.now(UTC)
    out = []
    _t, current = await lab.create_ticket("Judge: nothing changed", due_at=now)
    out.append((say("ch24.stale.unchanged", "nothing changed since it was scheduled"), current,
                True, say("ch24.stale.never-came", "the one reminder that was due never came")))
    t, moved = await lab.create_ticket("Judge: re-scheduled", due_at=now)
    await lab.set_due_date(t.id, now + timedelta(minutes=5))
    out.append((say("ch24.stale.moved", "its due date moved (a newer reminder exists)"), moved,
                False,
                say("ch24.stale.moved-cost", "the newer reminder will remind too: twice for "
                    "one ticket")))
    t, cleared = await lab.create_ticket("Judge: due date cleared", due_at=now)
    await lab.set_due_date(t.id, None)
    out.append((say("ch24.stale.cleared", "its due date was cleared"), cleared, False,
                say("ch24.stale.cleared-cost", "a reminder for a ticket that has no due date any "
                    "more")))
    t, closed = await lab.create_ticket("Judge: closed", due_at=now)
    async with lab.sessions() as s:
        await ticket_services.close_ticket(s, lab.team, "ben", t.id)
    out.append((say("ch24.stale.closed", "its ticket was closed"), closed, False,
                say("ch24.stale.closed-cost", "a reminder about a closed ticket")))
    return out


def _never_stale(task: Any, ticket: Any) -> str | None:
    """A plausible wrong check: every reminder still applies (the moved, cleared and closed
    tickets are all reminded, M1)."""
    return None


@exercise("24.stale", answer="my_stale_reason", solution="solution_stale_reason",
          wrong={"never stale": _never_stale},
          context=world_context("24-stale-judge", tickets=60))
async def judge_stale(fn: Any, *, lab: Lab) -> Verdict:
    """Run the real processor and REMINDER executor (`process_task`, claim → team lock →
    ticket read → the check → effects → fenced completion, P10) on four reminders, with
    the learner's `fn(task, ticket)` as the executor's stale check (the product's seam
    `TaskContext.stale_check`, M1); judge each by its real effects: a notification for
    that ticket and revision, and the task's status and summary."""
    from teamdesk.tasks.context import TaskContext
    from teamdesk.tasks.processor import process_task
    from teamdesk.testing import FakeJob

    if not callable(fn):
        return failed(say("ch24.stale.not-a-function",
                          "write a function: def my_stale_reason(task, "
                          "ticket): ..."))
    ctx = TaskContext(settings=lab.settings, actor="J", stale_check=fn)
    lines: list[str] = []
    right = total = 0
    for what, task, should_send, cost in await _situations(lab):
        total += 1
        try:
            await process_task(FakeJob(task.id), None, ctx)
        except Exception as err:  # the learner's check raised: the processor re-raised it
            lines.append(say("ch24.stale.check-raised", "✗ {what}: your check raised {error_type}; "
                             "the reminder is left for a retry, nobody was told why",
                             what=what, error_type=type(err).__name__))
            continue
        row = await lab.task(task.id)
        sent = (row.result_summary or "").startswith("Reminder sent")
        right += sent == should_send
        mark = "✓" if sent == should_send else "✗"
        did = (say("ch24.stale.did-remind", "reminded") if sent
               else say("ch24.stale.did-nothing", "sent nothing"))
        ought = "" if sent == should_send else f" — {cost}"
        lines.append(say("ch24.stale.line", "{mark} {what}: {did} ({status}: "
                         "{result_summary}){ought}", mark=mark, what=what, did=did,
                         status=row.status.value, result_summary=row.result_summary, ought=ought))
    if right == total:
        return passed(say("ch24.stale.holds", "every reminder did what it should: only the "
                          "current one reminded anyone (M1, O3, P10)"),
                      *lines, right=right, total=total)
    return failed(say("ch24.stale.score", "{right} of {total} right:", right=right, total=total),
                  *lines, right=right, total=total)
