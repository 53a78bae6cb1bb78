"""What a chaos run is asked to do (`ChaosConfig`) and the counterexamples it can switch on.
The workers' timings are `labs.timings.CHAOS_WORKER`."""

from __future__ import annotations

from dataclasses import dataclass

from labs import fences
from labs.chaos.kinds import KINDS
from labs.chaos.plan import SEED_TICKETS

#: Counterexamples a run can switch on: the names of `labs.fences.COUNTEREXAMPLES`, the
#: same a lab switches on in-process. The worker processes of that run only are started
#: with that change (`labs.chaos.worker --counterexample`, `labs.counterexample_worker`),
#: e.g. the retired `failed` listener (W2) or the export's writes by `task_id + run` (P3, P5).
COUNTEREXAMPLES = fences.NAMES


@dataclass(frozen=True)
class ChaosConfig:
    """The arguments of one run; (seed, workers, duration, kinds) fix its fault schedule
    and (seed, tasks) its task plan."""

    seed: int
    workers: int = 2
    tasks: int = 120
    duration: float = 10.0
    kinds: tuple[str, ...] = KINDS
    #: Bound of the settle phase after the fault window.
    settle: float = 90.0
    #: Share of the tasks created before the workers start; the rest arrive in waves.
    upfront: float = 0.4
    waves: int = 4
    #: Seeded tickets of the exported team.
    export_tickets: int = SEED_TICKETS
    #: Drop the `redis` kind with a printed note, instead of refusing the run, when no
    #: Redis of the run's own can be started: what a notebook wants.
    redis_optional: bool = False
    #: A counterexample of `COUNTEREXAMPLES` switched on in this run's worker processes.
    counterexample: str | None = None
    #: The bound on a fault's sync points (`labs.chaos.driver`): its worker free of the
    #: fault before, then holding an export of a task not struck yet between two batches
    #: (`labs.chaos.holds`). The fault brings exports of its own, so one always comes: the
    #: bound only detects a stuck system, and passing it is a violation, not a skip.
    hold_wait: float = 30.0

    def check(self) -> None:
        """Refuse an unknown counterexample before anything runs."""
        if self.counterexample is not None:
            fences.lookup(self.counterexample)
