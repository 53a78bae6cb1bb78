"""Old fences, switched on for one lab's executors only (ch. 26 §4, §5).

    bug = lab.counterexample("forgot-row-count", actor="A")   # A runs the old code
    ...                                                        # watch the bug happen
    bug.off()                                                  # (closing the lab does too)

The old code itself, and the list of valid names, is `labs.fences` (`COUNTEREXAMPLES`:
`forgot-row-count`, `separate-effects`, `status-only-guard`, `lease-less-export`, …); here is
only the bookkeeping of one lab: which switch is on, for which actor.

The product is not changed, and none of its names is rebound. Every fenced write goes
through the fence of the executor's context (`TaskContext.fence`, P3), which
`create_task_worker(..., fence=...)` sets. A lab gives each of its workers a `LabFence`
there: a callable the lab keeps, holding the lab's switches. On each call it applies the
fence of the first switch that is on for that worker's actor, else the product's
`leased_update`. So a switch turned on or off reaches a worker that is already running, and
only the lab's own workers ever see it; other labs, other actors and tests keep the
product's fence. The reminder's effect-writing step goes the same way
(`TaskContext.reminder_effects`, set by `create_task_worker(..., reminder_effects=...)`): a
`LabReminderEffects` per worker runs the first switch's old step while it has one (the
book's separate writes, `separate-effects`), else the product's `write_reminder_effects`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labs import fences
from labs.i18n import say
from teamdesk.tasks.lease import Fence, Lease, leased_update
from teamdesk.tasks.reminder_effects import ReminderEffects, write_reminder_effects

#: The name of a switch that runs a fence of one's own (`Lab.use_fence`), not an old one.
OWN_FENCE = "own fence"


@dataclass(eq=False)
class Switch:
    """One counterexample, on for one lab's workers (its `LabFences`) and maybe one actor."""

    #: A name of `labs.fences.COUNTEREXAMPLES`, or `OWN_FENCE`.
    bug: str
    board: LabFences
    actor: str | None = None
    #: The fence it runs instead of `leased_update`: the old one's, or one's own.
    fence: Fence | None = None
    #: The reminder effect-writing step it runs instead of the product's, if any.
    reminder_effects: ReminderEffects | None = None
    #: What it changed: one line per write it let through or redirected (the list its old
    #: fence and effects step append to).
    effects: fences.Effects = field(default_factory=list)
    on: bool = True

    def applies(self, actor: str | None) -> bool:
        return self.on and (self.actor is None or self.actor == actor)

    def off(self) -> None:
        """Back to the product's fence for this lab's workers; idempotent."""
        if self.on:
            self.on = False
            self.board.switches.remove(self)

    def shown(self) -> list[str]:
        """`effects` in the edition's words, for a cell to print (compare `effects`)."""
        return [e.shown() for e in self.effects]

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
        """Turn `bug` (a name of `labs.fences.COUNTEREXAMPLES`) on for this lab's workers
        (and only `actor`'s, if given)."""
        entry = fences.lookup(bug)
        if entry.listener_only:
            raise ValueError(say("fences.listener-only", "{bug} is a listener, not a fence: "
                                 "worker processes run it (labs.chaos, counterexample={bug!r}); "
                                 "in a lab, ch26d.LateCallback adds it to one worker", bug=bug))
        effects: fences.Effects = []
        switch = Switch(bug, self, actor, effects=effects,
                        fence=entry.fence(effects) if entry.fence else None,
                        reminder_effects=(entry.reminder_effects(effects)
                                          if entry.reminder_effects else None))
        self.switches.append(switch)
        return switch

    def use(self, fence: Fence, actor: str | None = None) -> Switch:
        """Run `fence` (a `teamdesk.tasks.lease.Fence`, e.g. a learner's) for this lab's
        workers (and only `actor`'s, if given) instead of the product's."""
        switch = Switch(OWN_FENCE, self, actor, fence=fence)
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
    `leased_update`, or the fence of the first switch on for this actor, decided per
    write."""

    board: LabFences
    actor: str | None

    async def __call__(self, conn: Any, held: Lease, statement: str | None = None, *,
                       during: str = "write", **values: Any) -> None:
        switch = self.board.active(self.actor)
        fence = switch.fence if switch is not None and switch.fence is not None else leased_update
        return await fence(conn, held, statement, during=during, **values)


@dataclass(frozen=True)
class LabReminderEffects:
    """A `teamdesk.tasks.reminder_effects.ReminderEffects` for one worker of a lab: the
    product's one statement, or the old step of the first switch on for this actor (the
    book's separate writes, `separate-effects`), decided per call."""

    board: LabFences
    actor: str | None

    async def __call__(self, conn: Any, *, ticket_id: int, team_id: str, revision: int,
                       recipient_id: str, message: str) -> None:
        switch = self.board.active(self.actor)
        step = (switch.reminder_effects if switch is not None
                and switch.reminder_effects is not None else write_reminder_effects)
        await step(conn, ticket_id=ticket_id, team_id=team_id, revision=revision,
                   recipient_id=recipient_id, message=message)
