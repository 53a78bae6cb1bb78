"""A seeded chaos run: real worker processes, real faults, then invariants over the ledger.

The reusable part of `python -m benchmarks.chaos` (its command line stays there), used by
that benchmark, by `tests/labs/test_chaos.py` and by `notebooks/90-chaos.ipynb`:

    lab = await Lab.open("chaos", seed=False, private_redis=True)
    report = await run_chaos(lab.settings, ChaosConfig(seed=7, workers=2, tasks=30, duration=4),
                             redis=private_restarter(lab.private_redis))
    report.invariant_table()     # one row per invariant: its rules, violations found
    report.violations            # typed: Violation(invariant, task_id, text)
    plot_swimlanes(report)       # faults per worker lane, Redis lane, completions
    ChaosConfig(..., counterexample="legacy-failed-listener")  # same seed, W2 broken
    ChaosConfig(..., counterexample="lease-less-export")  # P3, P5 broken: a clobber
    report.verdict()             # "conclusive: …" / "inconclusive (…)": struck running work?
    report.fault_table()         # one row per scheduled fault: due, struck, task, lease
    report.strikes, report.history  # each strike (on a RUNNING task), each claim/result

One concept per module:

- `kinds`    — the fault kinds, each declared once (`FAULT_KINDS`: weight, hold, target,
  printed action, description, colour, whether it breaks a worker's Redis); `KINDS`
  (the defaults: sigkill, sigterm, redis, cut) and `ALL_KINDS` (+ the opt-in sigstop, and
  takeover: the takeover race staged by gates, notebook 90's counterexample);
- `schedule` — `make_schedule`: the faults, a pure function of (seed, K, D, kinds), printed
  before the run (`--dry-run` prints it and stops);
- `plan`     — `make_plan`: the tasks the services will be asked for, from (seed, M);
  `STRIKE_EXPORT`: the export each fault asks for when due, once per worker;
- `config`   — `ChaosConfig`, the counterexamples a run can switch on;
- `guards`   — a Redis of the run's own to restart, a working proxy for cuts, `ChaosRefused`;
- `workload` — the teams seeded and the plan created through the services (O1), recorded
  as `Expected`;
- `driver`   — the faults: one method per fault kind, each strike after its sync points;
- `window`   — what runs beside the faults: the supervisor, the waves, the snapshots;
- `settle`   — after the window: restore, settle, the final stop;
- `checker`  — the invariants (`Invariant`), typed `Violation`s, `check_invariants`;
- `worker_logs` — the one parse of the workers' log lines;
- `holds`    — strikes on running work: a worker process holds an export between two
  batches (probe `export.after_read`) until the driver has struck, and records each
  claim and result write with its execution id (files: the sync point between
  processes); `worker` — the workers' entry point that installs them (and a
  counterexample, `labs.counterexample_worker`);
- `report`   — `ChaosReport`, the printed header and summary; `plot` — the swimlanes;
  every line the run prints or records speaks the edition's language (`labs.i18n.say`);
  the workers' own log lines stay as the product writes them;
- `run`      — `run_chaos`, start to summary.

The world (database + queue prefix) belongs to the caller, fresh for each run (a `Lab`
opened with `seed=False`, or a cloned database): the run seeds its own teams. K `teamdesk
worker` subprocesses (each with its own dispatch tick, timings `labs.timings.CHAOS_WORKER`,
started through `labs.chaos.worker`) work on M tasks created through the product's
services; about 40 % exist before the workers start, the rest arrive in waves during the
fault window, while the faults strike.
A `redis` fault always restarts a server of the run's own (`labs.private_redis`), so it
hurts no open lab, test or notebook; `cut` needs `labs.faults.RedisProxy` and is dropped,
and said so, without a working one (which changes the schedule). A worker that exits by
itself is restarted after 0.5 s, as a process supervisor would, and reported as a
finding. After the window: Redis up, proxies healed, every worker running, then a bounded
settle until every task is COMPLETED or FAILED. Then the invariants (`Invariant`):

- nothing lost: the ledger holds exactly the tasks the services created, all run 0;
- every task terminal, no lease left; FAILED only with one of the fixed readable texts,
  and never a rejection text for a task whose authorization did not change;
- each export's CSV equals a fresh recomputation (`matching_tickets` + `to_csv`) — the
  exported team's tickets are not changed during the run (a fingerprint says so);
- each current reminder revision: COMPLETED → exactly one notification, one
  `reminder_sent` event, one version bump; FAILED → none; superseded or closed: none;
- no COMPLETED row changed after it was first seen (snapshots every second);
- no result written over a newer lease: walked in time order, every result write in the
  recorded history was made by the newest execution that had claimed its task (P3, P5, W2);

Each fault strikes running work, at its offset or later, the faults one at a time in the
schedule's order, once its sync points have come: its worker free of the fault before
(a process or link fault; a Redis restart takes any free worker), then holding an export
between two batches of a task no fault has struck yet, RUNNING in the ledger under that
worker's lease. So that one always comes, the fault asks for `STRIKE_EXPORT` once per
worker when due, and the other free workers hold whatever export they take until its
worker holds one; a hold whose lease lapsed meanwhile (a starved machine) is let go and
the next awaited. Every wait is bounded (`ChaosConfig.hold_wait`), and the bound only
detects a stuck system: a fault that passes it is a violation, never a skip. A frozen or
Redis-struck executor is let go only once its lease was taken over (or cleared by D6),
so its next write meets `LeaseLost`. The report counts the strikes on RUNNING tasks and
the different tasks they held, stalls, leases lost and D6 recoveries, and says
"conclusive" only when every kind scheduled struck a RUNNING task, on at least three
different tasks, and a lease was lost — else "inconclusive", and why;

then a summary (faults by kind, tasks by status, FAILED texts, recovery notes from the
worker logs) and `report.ok`; `benchmarks.chaos` exits 0, or 1 on any violation (2:
refused or bad arguments). A task may legitimately end FAILED when faults used up its
attempts; that is counted, not hidden.
"""

from labs.chaos.checker import (
    FIXED_FAILED_TEXTS,
    INVARIANTS,
    REJECT_TEXTS,
    Invariant,
    Violation,
    check_invariants,
    completed_rows,
    invariant_rows,
)
from labs.chaos.config import COUNTEREXAMPLES, ChaosConfig
from labs.chaos.driver import Driver
from labs.chaos.guards import ChaosRefused, RedisRestart, private_restarter
from labs.chaos.kinds import ALL_KINDS, FAULT_KINDS, KINDS, FaultKind
from labs.chaos.plan import ExportSpec, ReminderSpec, make_plan
from labs.chaos.plot import plot_swimlanes
from labs.chaos.report import ChaosReport, print_header
from labs.chaos.run import run_chaos
from labs.chaos.schedule import FaultEvent, make_schedule
from labs.chaos.worker_logs import FAULT_GRACE_S, classify_dispatch_faults
from labs.chaos.workload import Expected, prepare

__all__ = [
    "ALL_KINDS", "COUNTEREXAMPLES", "FAULT_GRACE_S", "FAULT_KINDS", "FIXED_FAILED_TEXTS",
    "INVARIANTS", "KINDS", "REJECT_TEXTS", "ChaosConfig", "ChaosRefused", "ChaosReport",
    "Driver", "Expected", "ExportSpec", "FaultEvent", "FaultKind", "Invariant",
    "RedisRestart", "ReminderSpec", "Violation", "check_invariants",
    "classify_dispatch_faults", "completed_rows", "invariant_rows", "make_plan",
    "make_schedule", "plot_swimlanes", "prepare", "print_header", "private_restarter",
    "run_chaos",
]
