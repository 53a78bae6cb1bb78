"""Old fences, switched on for one lab's executors only (ch. 26 §4, §5).

    bug = lab.counterexample("forgot-row-count", actor="A")   # A runs the old code
    ...                                                        # watch the bug happen
    bug.off()                                                  # (closing the lab does too)

- `forgot-row-count` — the old reminder code of ch. 26 §5: at its end it still updated
  under E1's condition, but never checked how many rows that changed. The fenced UPDATE
  keeps its lease condition; a 0-row result is ignored, and the executor carries on as if
  it had written (breaks P3, P10).
- `separate-effects` — the book's whole old reminder (ch. 26 §5): its notification, event
  and version bump are separate writes, the notification's unique constraint only skips a
  duplicate (`ON CONFLICT DO NOTHING`, our reading of the book's "the notification's unique
  constraint blocks the duplicate row"), and the completion's row count is ignored as in
  `forgot-row-count`. A redelivery then adds a
  second event and a second version bump (the book: the ticket's version and the system
  event may still be added once more; breaks P3, P10, P12).
- `status-only-guard` — the guard the lease replaced: `WHERE id AND run AND status =
  'RUNNING'`, without `execution_id`. Any executor of the run passes while *somebody* is
  RUNNING (breaks P3, P5).

The product is not changed, and none of its names is rebound. Every fenced write goes
through the fence of the executor's context (`TaskContext.fence`, P3), which
`create_task_worker(..., fence=...)` sets. A lab gives each of its workers a `LabFence`
there: a callable the lab keeps, holding the lab's switches. On each call it applies the
first switch that is on for that worker's actor, else the product's `leased_update`. So a
switch turned on or off reaches a worker that is already running, and only the lab's own
workers ever see it; other labs, other actors and tests keep the product's fence. The
reminder's effect-writing step goes the same way (`TaskContext.reminder_effects`, set by
`create_task_worker(..., reminder_effects=...)`): a `LabReminderEffects` per worker runs
the old separate writes while `separate-effects` is on for its actor, else the product's
`write_reminder_effects`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from labs.statements import LAB_QUERIES
from teamdesk.tasks.lease import Fence, Lease, LeaseLost, leased_update
from teamdesk.tasks.reminder_effects import write_reminder_effects

log = logging.getLogger("teamdesk.counterexample")

#: The switches, and the rules each one breaks (for the lab's printout).
BUGS = {
    "forgot-row-count": "a fenced UPDATE that matched 0 rows is ignored (breaks P3, P10)",
    "status-only-guard": "the fence checks id, run and RUNNING, not execution_id (breaks P3, P5)",
    "separate-effects": ("the book's old reminder: notification (duplicates skipped), event and "
                         "version as separate writes, the completion's row count ignored "
                         "(breaks P3, P10, P12)"),
}

@dataclass(eq=False)
class Switch:
    """One counterexample, on for one lab's workers (its `LabFences`) and maybe one actor."""

    bug: str
    board: LabFences
    actor: str | None = None
    #: A fence of the learner's own (`Lab.use_fence`), run instead of an old one.
    fence: Fence | None = None
    #: What it changed: one line per write it let through or redirected.
    effects: list[str] = field(default_factory=list)
    on: bool = True

    def applies(self, actor: str | None) -> bool:
        return self.on and (self.actor is None or self.actor == actor)

    def off(self) -> None:
        """Back to the product's fence for this lab's workers; idempotent."""
        if self.on:
            self.on = False
            self.board.switches.remove(self)

    def __repr__(self) -> str:
        who = f" for {self.actor}" if self.actor else ""
        state = "on" if self.on else "off"
        return f"<counterexample {self.bug}{who}: {state}, {len(self.effects)} write(s) changed>"


class LabFences:
    """The switches of one lab, and the fence it passes to each of its workers."""

    def __init__(self) -> None:
        #: The switches that are on, oldest first; the first that applies is used.
        self.switches: list[Switch] = []

    def switch_on(self, bug: str, actor: str | None = None) -> Switch:
        """Turn `bug` on for this lab's workers (and only `actor`'s, if given)."""
        if bug not in BUGS:
            raise ValueError(f"unknown counterexample {bug!r}; choose one of {', '.join(BUGS)}")
        switch = Switch(bug, self, actor)
        self.switches.append(switch)
        return switch

    def use(self, fence: Fence, actor: str | None = None) -> Switch:
        """Run `fence` (a `teamdesk.tasks.lease.Fence`, e.g. a learner's) for this lab's
        workers (and only `actor`'s, if given) instead of the product's."""
        switch = Switch("own fence", self, actor, fence=fence)
        self.switches.append(switch)
        return switch

    def fence_for(self, actor: str | None) -> LabFence:
        """The `fence=` of the worker named `actor` (`create_task_worker`)."""
        return LabFence(self, actor)

    def effects_for(self, actor: str | None) -> LabReminderEffects:
        """The `reminder_effects=` of the worker named `actor` (`create_task_worker`)."""
        return LabReminderEffects(self, actor)

    def active(self, actor: str | None) -> Switch | None:
        return next((s for s in self.switches if s.applies(actor)), None)


@dataclass(frozen=True)
class LabFence:
    """A `teamdesk.tasks.lease.Fence` for one worker of a lab: the product's
    `leased_update`, or the old fence of the first switch on for this actor, decided per
    write."""

    board: LabFences
    actor: str | None

    async def __call__(self, conn: Any, held: Lease, statement: str | None = None, *,
                       during: str = "write", **values: Any) -> None:
        switch = self.board.active(self.actor)
        if switch is None:
            return await leased_update(conn, held, statement, during=during, **values)
        if switch.fence is not None:
            return await switch.fence(conn, held, statement, during=during, **values)
        return await OLD_FENCES[switch.bug](switch, conn, held, statement, during=during,
                                            **values)


@dataclass(frozen=True)
class LabReminderEffects:
    """A `teamdesk.tasks.reminder_effects.ReminderEffects` for one worker of a lab: the
    product's one statement, or the book's old separate writes while `separate-effects`
    is the first switch on for this actor, decided per call."""

    board: LabFences
    actor: str | None

    async def __call__(self, conn: Any, *, ticket_id: int, team_id: str, revision: int,
                       recipient_id: str, message: str) -> None:
        values = {"ticket_id": ticket_id, "team_id": team_id, "revision": revision,
                  "recipient_id": recipient_id, "message": message}
        switch = self.board.active(self.actor)
        if switch is None or switch.bug != "separate-effects":
            return await write_reminder_effects(conn, **values)
        # The book's old effects (ch. 26 §5), one statement each (labs/queries.sql).
        notified = (await conn.execute(LAB_QUERIES["old_notification"], values)).rowcount
        await conn.execute(LAB_QUERIES["old_event"], values)
        await conn.execute(LAB_QUERIES["old_version"], values)
        if notified != 1:
            switch.effects.append("notification: a duplicate, skipped by the unique "
                                  "constraint; event and version written again")
            log.warning("counterexample.duplicate_notification_skipped ticket_id=%s "
                        "revision=%s", ticket_id, revision)


async def _forgot_row_count(switch: Switch, conn: Any, held: Lease, statement: str | None,
                            *, during: str, **values: Any) -> None:
    try:
        await leased_update(conn, held, statement, during=during, **values)
    except LeaseLost:
        # The bug: the row count is not looked at, so nothing stops the caller.
        switch.effects.append(f"{during}: 0 rows matched, carried on")
        log.warning("counterexample.row_count_ignored task_id=%s execution_id=%s during=%s",
                    held.task_id, held.execution_id, during)


async def _status_only_guard(switch: Switch, conn: Any, held: Lease, statement: str | None,
                             *, during: str, **values: Any) -> None:
    if isinstance(conn, psycopg.AsyncConnection):
        # Whoever holds the run now: written under that lease (labs/queries.sql).
        cur = await conn.execute(LAB_QUERIES["run_holder"],
                                 {"task_id": held.task_id, "run": held.run})
        holder = await cur.fetchone()
        if holder is not None and holder[0] != held.execution_id:
            switch.effects.append(f"{during}: written under {holder[0][:8]}'s lease, "
                                  f"not {held.execution_id[:8]}")
            held = Lease(held.task_id, held.run, holder[0])
    await leased_update(conn, held, statement, during=during, **values)


#: bug → the old fence it runs instead of the product's (same arguments, plus the switch
#: that records what it changed).
OLD_FENCES: dict[str, Callable[..., Awaitable[None]]] = {
    "forgot-row-count": _forgot_row_count,
    "separate-effects": _forgot_row_count,
    "status-only-guard": _status_only_guard,
}
