"""What a chaos run is asked to do (`ChaosConfig`) and the counterexamples it can switch on.
The workers' timings are `labs.timings.CHAOS_WORKER`."""

from __future__ import annotations

from dataclasses import dataclass

from labs.chaos.kinds import KINDS
from labs.chaos.plan import SEED_TICKETS

#: Counterexamples a run can switch on: the worker processes of that run only are
#: started through `labs.counterexample_worker` with that change.
COUNTEREXAMPLES = ("legacy-failed-listener",)


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

    def check(self) -> None:
        """Refuse an unknown counterexample before anything runs."""
        if self.counterexample is not None and self.counterexample not in COUNTEREXAMPLES:
            raise ValueError(f"unknown counterexample {self.counterexample!r}; "
                             f"choose from {COUNTEREXAMPLES}")
