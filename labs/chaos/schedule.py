"""The fault schedule: a pure function of (seed, workers, duration, kinds) — same
arguments, same schedule, printed before the run (`--dry-run` prints it and stops). An
offset is when a fault is due: it strikes then or later, in the schedule's order, once
its sync points have come (`labs.chaos.driver`); nothing waits on an offset to order
events."""

from __future__ import annotations

import random
from dataclasses import dataclass

from labs.chaos.kinds import FAULT_KINDS, KINDS, action_line, check_kinds


@dataclass(frozen=True)
class FaultEvent:
    """One scheduled fault."""

    #: Seconds after the fault window opens: when it is due (it strikes then or later).
    at: float
    #: Its kind, a key of `FAULT_KINDS`.
    kind: str
    #: Worker index for a process or link fault; None for a server fault (redis) or
    #: one that strikes whichever worker holds an export first (takeover).
    worker: int | None
    #: sigkill/sigterm: pause before the restart; redis: downtime; cut: how long cut;
    #: sigstop: how long frozen.
    hold: float

    def describe(self) -> str:
        """The schedule's printed line for this fault (its action in the edition's words)."""
        who = (f"w{self.worker + 1}" if self.worker is not None else
               "any" if FAULT_KINDS[self.kind].target == "any" else "redis")
        return f"+{self.at:6.2f} s  {self.kind:7s} {who:5s} {action_line(self.kind, self.hold)}"


def make_schedule(seed: int, workers: int, duration: float,
                  kinds: tuple[str, ...] = KINDS) -> list[FaultEvent]:
    """The fault schedule: a pure function of its arguments (same seed, same schedule).

    Faults arrive about every 1.2 s (exponential gaps) from 0.5 s until 0.5 s before the
    window closes; the first ones cover every kind once (in a seeded order), the rest are
    drawn by each kind's weight. Redis outages never overlap and keep 1 s between them
    (one that would is a SIGKILL instead, when that kind is chosen)."""
    if workers < 1 or duration <= 0:
        raise ValueError("workers must be >= 1 and duration > 0")
    check_kinds(kinds)
    rng = random.Random(f"teamdesk-chaos:{seed}:{workers}:{duration}:{','.join(kinds)}")
    first = rng.sample(list(kinds), len(kinds))
    weights = [FAULT_KINDS[k].weight for k in kinds]
    events: list[FaultEvent] = []
    server_free_at = 0.0
    t = 0.5
    while t <= duration - 0.5:
        kind = FAULT_KINDS[first.pop(0) if first else rng.choices(kinds, weights=weights)[0]]
        hold = kind.draw_hold(rng)
        if kind.target == "server" and t >= server_free_at:
            server_free_at = t + hold + 1.0
            events.append(FaultEvent(round(t, 2), kind.name, None, hold))
        elif kind.target == "server" and "sigkill" in kinds:
            # The draw stands (the generator moves on the same), the outage becomes a kill.
            kill = FAULT_KINDS["sigkill"]
            hold = kill.draw_hold(rng)
            events.append(FaultEvent(round(t, 2), kill.name, rng.randrange(workers), hold))
        elif kind.target != "server":
            # Drawn even for an `any` fault, so the generator moves on as for every other
            # kind and the rest of the schedule stays what it was.
            worker = rng.randrange(workers)
            events.append(FaultEvent(round(t, 2), kind.name,
                                     None if kind.target == "any" else worker, hold))
        t += rng.expovariate(1 / 1.2) + 0.1
    return events
