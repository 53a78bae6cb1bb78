"""The lab harness: drives and observes `teamdesk` through its public functions and probes.

It holds no product logic. The tools (see `labs/README.md`):

- `labs.lab` — `Lab`, one isolated world (database, queue prefix, workers, errors);
- `labs.gates` — pause an executor at a probe point, or raise there;
- `labs.faults` — stop Redis, cut one client's connection, lose Redis data, fail a write;
- `labs.tables` — the ledger, the queue, and the two side by side with a verdict;
- `labs.history` — a Jepsen-style history of every step, and its swimlane plot.
"""
