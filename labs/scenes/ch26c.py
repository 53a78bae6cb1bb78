"""Scene helpers of `26c-reminder-commit-gate.ipynb` (ch. 26 §5, and the book's §8 test
3): a reminder whose first attempt meets a fault, and the judges of the two exercises —
the last probe point inside the transaction (`judge_last_point`, exercise `26c.last-point`),
and the commit gate the learner writes
(`judge_gate`, through `labs.fences.gate_fence`: the old code still updated under E1's
condition at its end, but never checked the row count)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from labs import tables
from labs.exercises import Verdict, exercise, failed, passed
from labs.fences import gate_fence
from labs.i18n import say
from labs.worlds import fresh_world, world_context
from teamdesk.tasks.lease import Lease, LeaseLost
from teamdesk.tasks.queue import task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings

Effects = tuple[int, int, int]

#: The last probe point inside the reminder's transaction (after the completion matched,
#: before COMMIT): the exercise's answer.
LAST_POINT = "reminder.after_completion"


async def fault_at(lab: Lab, point: str, *, timeout: float = 8.0
                   ) -> tuple[Effects, Effects, Effects]:
    """A new due reminder whose attempt 1 meets a fault ("disk full") at probe `point`:
    its ticket's `reminder_effects` before, between the attempts (a gate holds attempt 2
    just before its claim) and after attempt 2. A fault inside the transaction must leave
    "between" equal to "before" (P10) and attempt 2 must give the only result (P7, I3).
    A point the reminder never crosses raises (the gate is never reached)."""
    ticket, task = await lab.create_ticket(f"Fault at {point}", actor="dan",
                                           due_at=datetime.now(UTC), assignee_id="ben")
    before = await tables.reminder_effects(lab, ticket.id)

    def mine(ctx: dict[str, Any]) -> bool:
        return ctx["task_id"] == task.id

    fault = lab.fault(point, RuntimeError("disk full"), when=mine)
    hold = lab.gate("claim.before", when=lambda ctx: mine(ctx) and fault.fired == 1)
    with lab.expect_errors(source="worker failed", job_id=task_job_id(task.id, 0)):
        await lab.dispatch()
        await hold.reached(timeout)
    between = await tables.reminder_effects(lab, ticket.id)
    hold.release()
    await lab.wait_for("completed", task_id=task.id, timeout=timeout)
    return before, between, await tables.reminder_effects(lab, ticket.id)


async def _worker_w(lab: Lab) -> dict[str, Any]:
    """The check cell's keywords outside the notebook: a world with a worker (`lab=`) and
    an empty cache (`tried=`)."""
    await lab.start_worker("W")
    return {"lab": lab, "tried": {}}


@exercise("26c.last-point", answer="my_point", solution="solution_point",
          wrong={"a point before the completion": "reminder.after_event"},
          context=world_context("26c-last-point-judge", _worker_w, tickets=10,
                                backoff_delay_ms=30))
async def judge_last_point(point: Any, *, lab: Lab, tried: dict[str, tuple] | None = None
                           ) -> Verdict:
    """§5.8's exercise: `point` must be `LAST_POINT`, and a fault there must leave nothing
    between the attempts and one of each effect after attempt 2 (P10, P7). Runs `fault_at`
    once per point (`tried` caches the counts, so a re-run check cell does not run it
    again)."""
    tried = {} if tried is None else tried
    if not isinstance(point, str):
        return failed(say("ch26c.last-point.not-a-name", "write the probe point's name, e.g. "
                          "\"reminder.after_event\""))
    if point not in tried:
        try:
            tried[point] = await fault_at(lab, point)
        except Exception as err:  # a wrong point is a step of learning, not a crash
            return failed(say("ch26c.last-point.never-struck", "that fault never struck inside a "
                              "reminder ({error_type})", error_type=type(err).__name__))
    before, between, after = counts = tried[point]
    if point != LAST_POINT:
        return failed(say("ch26c.last-point.not-last", "not the last point inside the transaction "
                          "(counts {before} → {between} → {after})", before=before,
                          between=between, after=after), counts=counts)
    if between != before or after != _once_more(before):
        return failed(say("ch26c.last-point.stuck", "the fault at the last point left counts "
                          "{before} → {between} → {after}: something committed", before=before,
                          between=between, after=after), counts=counts)
    return passed(say("ch26c.last-point.holds", "a fault after the completion matched, before "
                      "commit, still rolls all four writes back; attempt 2 gives the only "
                      "result (P10)."), counts=counts)


def _once_more(effects: Effects) -> Effects:
    """One more of each effect: a notification, an event and a version bump."""
    return effects[0] + 1, effects[1] + 1, effects[2] + 1


# ---------------------------------------------------------------- the commit gate (exercise)

@dataclass
class GateRuns:
    """What the real runs found out about a commit gate (`judge_gate`)."""

    #: alone: an executor with the gate completed its reminder, effects once.
    alone: bool = False
    #: the recovery race: what G's run returned; its effects rolled back once it returned.
    returned: str = ""
    rolled_back: bool = False
    #: the redelivery afterwards: the ledger's end and the effects.
    final_status: str = ""
    final_effects: Effects | None = None
    single: bool = False
    notes: list[str] = field(default_factory=list)

    def verdict(self) -> Verdict:
        facts = {"alone": self.alone, "returned": self.returned,
                 "rolled_back": self.rolled_back, "final_status": self.final_status,
                 "final_effects": self.final_effects, "single": self.single}
        if not self.alone:
            return failed(say("ch26c.gate.stops-holder", "your gate stopped the lease holder "
                              "itself: an executor alone could not complete its reminder"),
                          *self.notes, **facts)
        if not self.rolled_back:
            return failed(say("ch26c.gate.committed-anyway", "after the recovery scan cleared G's "
                              "lease, G's effects committed anyway (its completion matched 0 "
                              "rows): the ledger says WAITING, the ticket says sent"),
                          *self.notes, **facts)
        if not self.returned.startswith("lease lost"):
            return failed(say("ch26c.gate.not-lease-lost",
                              "G's writes rolled back, but not as a lost "
                              "lease: the processor took it for a failure of the task "
                              "({returned!r}); raise LeaseLost (P6)", returned=self.returned),
                          *self.notes, **facts)
        if not self.single:
            return failed(say("ch26c.gate.redelivery-not-single", "the redelivery did not end with "
                              "exactly one of each effect"), *self.notes, **facts)
        return passed(say("ch26c.gate.holds", "your gate holds: alone the reminder "
                          "completes; after the recovery scan G's completion matched 0 rows, "
                          "LeaseLost rolled all four writes back, and the redelivery gave the "
                          "only notification, event and version bump (P10, P12)"),
                      *self.notes, **facts)


def _said(event: dict[str, Any]) -> str:
    """What a job's end said, in one line: its result, or its error's first line."""
    text = str(event.get("result") or event.get("error") or "")
    return (text.splitlines() or [""])[0]


async def _gate_alone(lab: Lab, verdict: GateRuns) -> None:
    ticket, task = await lab.create_ticket("Alone with the gate", due_at=datetime.now(UTC),
                                           assignee_id="cai")
    before = await tables.reminder_effects(lab, ticket.id)
    since = time.monotonic()
    await lab.dispatch()
    end = await lab.done_with(task_job_id(task.id, 0), 8.0, since=since)
    row = await lab.task(task.id)
    after = await tables.reminder_effects(lab, ticket.id)
    verdict.alone = (row.status.value == "COMPLETED"
                     and after == _once_more(before))
    verdict.notes.append(say("ch26c.gate.alone", "alone: {said} → {status}, effects {before} → "
                             "{after}",
                             said=_said(end), status=row.status.value, before=before, after=after))


async def _gate_race(lab: Lab, verdict: GateRuns) -> None:
    ticket, task = await lab.create_ticket("Recovery during the gate",
                                           due_at=datetime.now(UTC), assignee_id="cai")
    job_id = task_job_id(task.id, 0)
    before = await tables.reminder_effects(lab, ticket.id)
    gate = lab.gate("reminder.after_event", actor="G", when=lambda c: c["task_id"] == task.id)
    await lab.dispatch()
    await gate.reached(8.0)
    await lab.age(task.id, lab.settings.stale_running_age_s + 1)
    await lab.dispatch()  # D6 clears the lease while G is inside its transaction
    gate.release()
    done = await lab.wait_for("completed", actor="G", job_id=job_id, timeout=8.0)
    verdict.returned = str(done["result"])
    after_a = await tables.reminder_effects(lab, ticket.id)
    verdict.rolled_back = after_a == before
    ledger = (await lab.task(task.id)).status.value
    verdict.notes.append(say("ch26c.gate.race", "recovery race: G returned {returned!r}, "
                             "effects {before} → {during}, ledger {ledger}",
                             returned=verdict.returned, before=before, during=after_a,
                             ledger=ledger))
    since = time.monotonic()
    await lab.dispatch()  # D4: the job completed while the ledger is WAITING: added again
    end = await lab.done_with(job_id, 8.0, since=since)
    verdict.final_status = (await lab.task(task.id)).status.value
    verdict.final_effects = await tables.reminder_effects(lab, ticket.id)
    verdict.single = (verdict.final_status == "COMPLETED"
                      and verdict.final_effects == _once_more(before))
    verdict.notes.append(say("ch26c.gate.redelivery", "redelivery: {said} → {status}, "
                             "effects {effects}",
                             said=_said(end), status=verdict.final_status,
                             effects=verdict.final_effects))


def _always_rolls_back(rows_matched: int, lease: Lease) -> None:
    """A wall, not a gate: it rolls back even the lease holder's own completion."""
    raise LeaseLost(lease, "reminder completion")


def _another_error(rows_matched: int, lease: Lease) -> None:
    """The right test, the wrong exception: the processor takes it for a failure of the
    task, not a lost lease (P6)."""
    if rows_matched != 1:
        raise RuntimeError("lease lost")


@exercise("26c.gate", answer="my_gate", solution="solution_gate",
          wrong={"a gate that always rolls back": _always_rolls_back,
                 "another error than LeaseLost": _another_error})
async def judge_gate(gate: Any, *, settings: Settings | None = None) -> Verdict:
    """Run `gate` as the commit gate of executor G's reminders (`gate_fence`,
    `Lab.use_fence`) in a lab world of its own: (1) alone, G must complete a due reminder
    with one of each effect; (2) the recovery-scan race of §5: G paused inside its
    transaction after the three effects, a recovery scan (D6) clears its lease, G comes
    back — its effects must roll back as a lost lease (P10, P6), and the redelivery (D4)
    must give exactly one notification, one event and version +1 (P12). The world's retry
    backoff is short (`backoff_delay_ms=30`): a gate that lets the effects commit makes the
    redelivery use up its attempts."""
    if not callable(gate):
        return failed(say("ch26c.gate.not-a-function", "my_gate must be a function: def "
                          "my_gate(rows_matched, lease): …"))
    runs = GateRuns()
    async with fresh_world("26c-gate-judge", runs.notes, settings=settings, tickets=40,
                           backoff_delay_ms=30) as lab:
        lab.use_fence(gate_fence(gate), actor="G")
        await lab.start_worker("G")
        with lab.expect_errors(actor="G"):
            await _gate_alone(lab, runs)
            if runs.alone:
                await _gate_race(lab, runs)
    return runs.verdict()
