"""The task plan: what the services will be asked to do, in order — a pure function of
(seed, tasks). Exports with varied filters and scopes (some by an agent who is demoted
before the run, so they must be rejected), and reminders: a ticket's creation, due-date
changes that supersede earlier revisions, and closings, each group in one transaction."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from teamdesk.db.models import Scope
from teamdesk.seed import EPOCH

EXPORT_TEAM = "acme"
REMINDER_TEAM = "ops"
#: The agent whose team-wide exports are requested, then who is demoted to customer before
#: the workers start: those exports must end rejected (R1, P8).
DEMOTED = "cai"
#: Tickets of the exported team: enough that a broad export takes dozens of batches, so
#: faults often strike while an export is running.
SEED_TICKETS = 600


@dataclass(frozen=True)
class ExportSpec:
    """One export request: who asks, in which scope, with which filters."""

    user: str
    scope: Scope
    filters: dict[str, Any]

    @property
    def rejected(self) -> bool:
        """Requested by the agent who is demoted before the run: must end rejected."""
        return self.user == DEMOTED


@dataclass(frozen=True)
class ReminderSpec:
    """One reminder ticket and the due-date changes made to it in the same transaction."""

    creator: str
    assignee: str | None
    #: Due dates in seconds from creation: the first at creation, each later one a
    #: `set_due_date` in the same transaction (None clears the due date).
    dues: tuple[float | None, ...]
    close: bool

    @property
    def tasks(self) -> int:
        """The REMINDER task rows it creates (one per due date set, O3)."""
        return sum(1 for d in self.dues if d is not None)


Spec = ExportSpec | ReminderSpec

#: What each fault asks the services for when it is due, once per worker
#: (`labs.chaos.driver`): the team's high and urgent tickets (about 30 % of them), read in
#: a few batches, so a worker can be held between two of them. One per worker: whichever
#: export each worker takes, the struck worker gets one (the others hold theirs until it
#: does).
STRIKE_EXPORT = ExportSpec("ben", Scope.TEAM, {"priority": ["HIGH", "URGENT"]})

_TEXTS = ("Login", "Invoice", "Export", "slow", "error 500", "#1", "Safari", "50%", "e_mail",
          "Two-factor", "total")


def _filters(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rng.random() < 0.5:
        out["status"] = rng.sample(["OPEN", "PENDING", "CLOSED"], rng.randint(1, 2))
    if rng.random() < 0.4:
        out["priority"] = rng.sample(["LOW", "NORMAL", "HIGH", "URGENT"], rng.randint(1, 3))
    if rng.random() < 0.35:
        out["text"] = rng.choice(_TEXTS)
    if rng.random() < 0.35:
        start = rng.randint(0, 14)
        out["created_from"] = (EPOCH.date() + timedelta(days=start)).isoformat()
        out["created_to"] = (EPOCH.date() + timedelta(days=start + rng.randint(0, 6))
                             ).isoformat()
    if rng.random() < 0.2:
        out["assignee_id"] = rng.choice(["ben", "cai"])
    return out


def make_plan(seed: int, tasks: int) -> list[Spec]:
    """What the services will be asked to do, in order: exactly `tasks` task rows."""
    rng = random.Random(f"teamdesk-chaos-plan:{seed}:{tasks}")
    plan: list[Spec] = []
    left = tasks
    while left > 0:
        if rng.random() < 0.5 or left == 1:
            user, scope = rng.choice([("ben", Scope.TEAM), ("ada", Scope.TEAM),
                                      ("ben", Scope.OWN), ("dan", Scope.OWN),
                                      ("eve", Scope.OWN), ("fay", Scope.OWN),
                                      (DEMOTED, Scope.TEAM)])
            plan.append(ExportSpec(user, scope, _filters(rng)))
            left -= 1
            continue
        due = rng.choice([-60.0, -5.0, 0.0, 1.0, 3.0])
        dues: list[float | None] = [due]
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            dues.append(None if rng.random() < 0.15 else rng.choice([-30.0, 0.0, 2.0]))
        spec = ReminderSpec(rng.choice(["dan", "eve", "fay"]),
                            rng.choice(["ben", "cai", None]), tuple(dues),
                            close=rng.random() < 0.12)
        if spec.tasks > left:
            spec = ReminderSpec(spec.creator, spec.assignee, (due,), spec.close)
        plan.append(spec)
        left -= spec.tasks
    return plan
