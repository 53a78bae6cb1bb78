"""The lab harness: drives and observes `teamdesk` through its public functions and probes.

It holds no product logic. The tools (see `labs/README.md`):

- `labs.lab` — `Lab`, one isolated world (database, queue prefix, workers, errors), a
  facade over `labs.errors` (its error book), `labs.workers` (its in-process workers,
  gates, faults and old fences), `labs.routing` (probe, log and loop-exception routing,
  and the one registry of open labs), `labs.calls` (thin calls into the product) and
  `devkit.world.World` (the database + prefix and their clean-up);
- `labs.gates` — pause an executor at a probe point, or raise there;
- `labs.faults` — stop Redis, cut one client's connection, lose Redis data, fail a write;
- `labs.tables` — the ledger, the queue, and the two side by side with a verdict;
- `labs.history` — a Jepsen-style history of every step, and its swimlane plot.

`from labs import Lab` works too; it is imported on first use, so `import labs.<tool>`
alone (a worker subprocess's counterexample entry) does not load the whole harness.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STUCK", "WATCHFUL", "Lab", "LabError", "LabErrors"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from labs import lab

        return getattr(lab, name)
    raise AttributeError(f"module 'labs' has no attribute {name!r}")
