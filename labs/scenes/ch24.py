"""Scene helpers of `24-reminders.ipynb` (chapter 24, inferred: reminders voided by a
revision number).

Two tables the notebook shows after each scene — the reminder tasks and the tickets they
belong to — and the judges of the two exercises (`labs.exercises`): D due now (`24.d`,
staged again in a world of its own) and the stale check (`24.stale`). A learner need not
read them to follow the chapter; the scenes (re-schedule, clear, close, run, duplicate) stay in the
cells.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import select

from labs import tables
from labs.exercises import Verdict, exercise, failed, passed, run_answer
from labs.i18n import say
from labs.names import Names
from labs.worlds import fresh_world, world_context
from teamdesk.db.models import BackgroundTask, Ticket, TicketEvent
from teamdesk.tasks.queue import job_states, task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings


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


# ------------------------------------------------------------ §7's exercise: D is due now

#: Seconds the learner's re-scheduling may take, end to end, in the judge's world.
D_BOUND = 30.0


async def stage_d(lab: Lab) -> tuple[Any, Any]:
    """What the notebook has before §7's exercise, in the judge's world: ticket D due
    tomorrow, its reminder `d1` already in Redis as a delayed job (D1, D2), and a worker
    running. Returns (D, d1)."""
    D, d1 = await lab.create_ticket("Send the quarterly report",
                                    due_at=datetime.now(UTC) + timedelta(days=1))
    await lab.dispatch()
    await lab.start_worker("W")
    return D, d1


async def d_facts(lab: Lab, D: Any, d1: Any, task: Any) -> dict[str, Any]:
    """The exercise's facts about ticket D: the new reminder `task` (status, summary, its
    ticket, its revision; None if `task` is not a REMINDER task), D's id and current
    revision, whether `task` is `d1` itself, and `d1` (ledger status, queue state)."""
    new = await lab.task(task.id) if getattr(task, "type", None) == "REMINDER" else None
    old = await lab.task(d1.id)
    [old_state] = await job_states(lab.queue, [task_job_id(old.id, old.run)])
    async with lab.sessions() as s:
        ticket = await s.get(Ticket, D.id)
    return {"new": new and (new.status.value, new.result_summary or "", new.ticket_id,
                            new.reminder_revision),
            "d_id": D.id, "d_revision": ticket.reminder_revision,
            "d1_returned": new is not None and new.id == old.id,
            "d1": (old.status.value, old_state or "none")}


def d_judged(facts: dict[str, Any]) -> Verdict:
    """The exercise's judge of `d_facts`: D's new reminder (for D, not d1) completed with
    a reminder sent, while `d1` still waits in Redis as a delayed job — nothing is
    cancelled there (O4); its own revision decides what it does when its delay ends (M1)."""
    if facts["new"] is None:
        return failed(say("ch24.d.not-a-reminder", "return D's new REMINDER task (the second "
                          "value lab.set_due_date returns)"), **facts)
    status, summary, ticket_id, _revision = facts["new"]
    if ticket_id != facts["d_id"] or facts["d1_returned"]:
        return failed(say("ch24.d.not-moved", "that reminder is not for a new due date of D: "
                          "move D's own due date with lab.set_due_date(D.id, …), which writes "
                          "D's next revision and its reminder (O3)"), **facts)
    if status != "COMPLETED" or not summary.startswith("Reminder sent"):
        return failed(say("ch24.d.new-reminder-unsent", "the new reminder is {status}, not yet "
                          "completed with a reminder sent: dispatch it, then wait for the "
                          "worker", status=status), **facts)
    if facts["d1"] != ("WAITING", "delayed"):
        return failed(say("ch24.d1-touched", "d1 is {status} with its job {state}: it should "
                          "still wait in Redis as a delayed job — nothing needs cancelling "
                          "there (O4)", status=facts["d1"][0], state=facts["d1"][1]), **facts)
    return passed(say("ch24.d.holds", "D's new reminder sent now, and d1 still waits in Redis "
                      "until tomorrow (O3, O4)"), **facts)


async def _no_dispatch(lab: Lab, D: Any) -> Any:
    """A plausible wrong move: the due date moved, but nothing dispatched or waited."""
    _D, task = await lab.set_due_date(D.id, datetime.now(UTC))
    return task


async def _another_ticket(lab: Lab, D: Any) -> Any:
    """A plausible wrong move: a second reminder due now, on a new ticket, D unchanged."""
    _t, task = await lab.create_ticket(D.title, due_at=datetime.now(UTC))
    await lab.dispatch()
    await lab.wait_for("completed", task_id=task.id)
    return task


async def _cancel_d1(lab: Lab, D: Any) -> Any:
    """A plausible wrong move: re-scheduled right, and d1's delayed job removed from Redis
    as if it had to be cancelled (O4: nothing is)."""
    async with lab.sessions() as s:
        [old] = (await s.scalars(select(BackgroundTask).where(
            BackgroundTask.ticket_id == D.id))).all()
    _D, task = await lab.set_due_date(D.id, datetime.now(UTC))
    await lab.queue.remove(task_job_id(old.id, old.run))
    await lab.dispatch()
    await lab.wait_for("completed", task_id=task.id)
    return task


@exercise("24.d", answer="my_due_now", solution="solution_due_now",
          wrong={"no dispatch, no wait": _no_dispatch,
                 "a new ticket due now": _another_ticket,
                 "d1's job removed": _cancel_d1})
async def judge_due_now(fn: Any, *, settings: Settings | None = None) -> Verdict:
    """§7: stage D and `d1` in a lab world of its own (`stage_d`), run the learner's
    `fn(lab, D)` there (bounded by `D_BOUND`), and judge the task it returns and what is
    left of `d1` (`d_facts`, `d_judged`)."""
    if not callable(fn):
        return failed(say("ch24.d.write-function", "write a function: async def "
                          "my_due_now(lab, D): … return the new reminder task"))
    notes: list[str] = []
    async with fresh_world("24-d-judge", notes, settings=settings, tickets=20) as lab:
        D, d1 = await stage_d(lab)
        ran = await run_answer(fn, lab, D, bound=D_BOUND)
        if ran.refused is not None:
            return ran.refused
        task = ran.value
        facts = await d_facts(lab, D, d1, task)
    if notes:
        return failed(say("ch24.d.stopped", "your move did not finish:"), *notes)
    return d_judged(facts)


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
