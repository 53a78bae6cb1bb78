"""Scene helpers of `26c-reminder-commit-gate.ipynb` (ch. 26 §5, and the book's §8 test
3): a reminder whose first attempt meets a fault, and the exercise's judge."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from labs import tables
from teamdesk.tasks.queue import task_job_id

Effects = tuple[int, int, int]

#: The last probe point inside the reminder's transaction (after the completion matched,
#: before COMMIT): the exercise's answer.
LAST_POINT = "reminder.after_completion"


async def fault_at(lab: Any, point: str, *, timeout: float = 8.0
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


async def judge_last_point(lab: Any, point: Any, tried: dict[str, tuple]) -> bool | str:
    """The exercise's verdict for `point` (True, or why not), running `fault_at` once per
    point (`tried` caches the counts, so a re-run check cell does not run it again)."""
    if point not in tried:
        try:
            tried[point] = await fault_at(lab, point)
        except Exception as err:  # a wrong point is a step of learning, not a crash
            return f"that fault never struck inside a reminder ({type(err).__name__})"
    before, between, after = tried[point]
    if point != LAST_POINT:
        return (f"not the last point inside the transaction (counts {before} → {between} → "
                f"{after})")
    return between == before and after == (before[0] + 1, before[1] + 1, before[2] + 1)
