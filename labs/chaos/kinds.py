"""The fault kinds of a chaos run, each declared once: everything else — the default and
opt-in kind lists, the schedule's weights and holds, the printed schedule, which faults
break a worker's Redis, the swimlanes' colours — is derived from `FAULT_KINDS`. The
driver (`labs.chaos.driver.Driver`) has one method per kind, named after it."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from labs.chaos.words import Words

#: Whom a fault strikes: one worker process, one worker's Redis link, the Redis server
#: every worker uses, or whichever worker holds an export first.
Target = Literal["process", "link", "server", "any"]


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault, as the schedule draws it and the driver strikes it."""

    #: Its name on the command line (`--kinds`), in the schedule and in the legend.
    name: str
    #: Its share of the drawn faults, after the first round that covers each kind once.
    weight: int
    #: Bounds (seconds) of its hold, drawn uniformly: the pause before a restart, the
    #: downtime, how long a link stays cut or a worker frozen.
    hold: tuple[float, float]
    #: Whom it strikes; a `server` fault has no worker and never overlaps another, an
    #: `any` fault has no worker of its own (the first to hold an export).
    target: Target
    #: What a strike does, as the printed schedule says it (followed by the hold;
    #: `ACTIONS` says it in the edition's words).
    action: str
    #: What it is and what it tests, for a reader.
    description: str
    #: Its bar colour in the swimlanes (`labs.chaos.plot`).
    colour: str
    #: While it lasts a worker's Redis calls fail, so a dispatch fault then is the fault
    #: injected, not the dispatcher's own (D8).
    breaks_redis: bool
    #: In the default kinds; an opt-in kind leaves the default schedules as they were.
    default: bool = True

    def draw_hold(self, rng: random.Random) -> float:
        """Its hold for one strike, drawn from the schedule's generator."""
        return round(rng.uniform(*self.hold), 2)


#: Every fault kind, in the order of `ALL_KINDS`.
FAULT_KINDS: dict[str, FaultKind] = {k.name: k for k in (
    FaultKind("sigkill", 3, (0.1, 1.0), "process", "SIGKILL, restart after",
              "SIGKILL a worker process, restart it after a short pause: no drain, no "
              "clean-up; whatever it held RUNNING is recovered (D6)", "#d62728", False),
    FaultKind("sigterm", 2, (0.1, 1.0), "process", "SIGTERM, restart after",
              "SIGTERM a worker (it drains for at most its drain timeout and exits 0 or "
              "3, W4), restart it", "#ff7f0e", False),
    FaultKind("redis", 1, (0.3, 1.5), "server", "stop Redis, start again after",
              "stop the run's own Redis server and start it again: it comes back empty, "
              "the outbox and reconciliation bring the jobs back (O1, D4)", "#1f77b4",
              True),
    FaultKind("cut", 2, (0.3, 2.0), "link", "cut its Redis link for",
              "reset one worker's Redis connections through `labs.faults.RedisProxy` "
              "and refuse new ones for a while, then heal", "#7f7f7f", True),
    FaultKind("sigstop", 2, (1.5, 2.5), "process", "SIGSTOP beyond its lock, SIGCONT after",
              "freeze a worker for longer than its 1 s lock, then SIGCONT: its job "
              "stalls, another worker may take it over, and the frozen executor's late "
              "writes must match nothing (P3, P6)", "#9467bd", True, default=False),
    FaultKind("takeover", 1, (1.5, 2.5), "any", "SIGSTOP, hand over, SIGCONT within",
              "the takeover race staged by gates, on whichever worker holds an export "
              "first: freeze it (E1) past its lock, hold the executor that takes the "
              "task over (E2) between two batches, wake E1 and release E2 only once "
              "E1's late write has landed (the hold is only a bound): every run stages "
              "the race the same way (P3, P5, P6)", "#8c564b", True, default=False),
)}
#: The default fault kinds (the benchmark's figures were measured with these).
KINDS: tuple[str, ...] = tuple(k for k, kind in FAULT_KINDS.items() if kind.default)
#: Every kind; the opt-in ones (`sigstop`, `takeover`) come after the defaults.
ALL_KINDS: tuple[str, ...] = (*KINDS, *(k for k, kind in FAULT_KINDS.items()
                                       if not kind.default))
#: The kinds that break a worker's Redis while they last.
BREAKS_REDIS: frozenset[str] = frozenset(k for k, kind in FAULT_KINDS.items()
                                         if kind.breaks_redis)


#: Each kind's action as the printed schedule says it, under the key `chaos.kind.<name>`.
ACTIONS = Words("chaos.kind", {k.action: k.name for k in FAULT_KINDS.values()}, __file__,
                suffix=" {hold:.2f} s")


def action_line(kind: str, hold: float) -> str:
    """What a strike of `kind` does and for how long (its `action` and the hold), in the
    edition's words: the printed schedule's last column."""
    return ACTIONS.shown(FAULT_KINDS[kind].action, hold=hold)


def check_kinds(kinds: tuple[str, ...]) -> None:
    """Refuse an empty or unknown choice of kinds, naming the ones there are."""
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown or not kinds:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; choose from {ALL_KINDS}")
