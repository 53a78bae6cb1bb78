"""A `teamdesk worker` process with a counterexample switched on — for one lab run only.

    python -m labs.counterexample_worker legacy-failed-listener worker --name w1 ...
    python -m labs.counterexample_worker lease-less-export worker --name w1 ...

NAME is any counterexample of `labs.fences.COUNTEREXAMPLES`, the same names a lab switches
on in-process (`Lab.counterexample`); what each one breaks is told there. The product is
not changed, and none of its names is rebound: the remaining arguments are the product's
`worker` options, and the counterexample goes through the worker process's seams
(`labs.worker_entry` → `runner.worker_main(seams=...)`): its fence (`Seams(fence=...)`, the
`fence=` of `create_task_worker`, P3), its reminder effect-writing step
(`Seams(reminder_effects=...)`, P10), or a worker hook (`Seams(on_worker=...)`, W1's
worker) that adds its listener to the process's task worker before it takes a job — the
retired `failed` listener (W2). Only processes started this way (by `labs.chaos` with
`ChaosConfig(counterexample=...)`, through `labs.chaos.worker`) carry it.

`legacy_failed_listener` (`labs.fences`) is named here too: ch. 26 §7's retired listener
that these processes run and that `labs.scenes.ch26d.LateCallback` adds to one worker of a
lab; `tests/integration/test_worker_recovery.py` shows it in a gated race.
"""

from __future__ import annotations

import sys

from labs.fences import NAMES, Effects, legacy_failed_listener, lookup
from teamdesk.tasks.lease import leased_update
from teamdesk.tasks.reminder_effects import write_reminder_effects
from teamdesk.tasks.runner import PRODUCT, Seams

__all__ = ["NAMES", "legacy_failed_listener", "main", "seams_for"]


def seams_for(name: str | None) -> Seams:
    """The worker process's seams that switch counterexample `name` on; the product's own
    parts for None. An unknown name fails as in a lab (`labs.fences.lookup`)."""
    if name is None:
        return PRODUCT
    entry = lookup(name)
    # What the old code changed is reported in this process's log lines; the effects list
    # it also appends to is read by no one here (a lab reads it, `Switch.effects`).
    effects: Effects = []
    return Seams(on_worker=entry.on_worker,
                 fence=entry.fence(effects) if entry.fence else leased_update,
                 reminder_effects=(entry.reminder_effects(effects) if entry.reminder_effects
                                   else write_reminder_effects))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in NAMES:
        print(f"usage: python -m labs.counterexample_worker {{{','.join(NAMES)}}} "
              "worker [teamdesk worker options]", file=sys.stderr)
        return 2
    from labs.worker_entry import run_worker

    return run_worker(argv[1:], seams_for(argv[0]),
                      prog=f"python -m labs.counterexample_worker {argv[0]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
