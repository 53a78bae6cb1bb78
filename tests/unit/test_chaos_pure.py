"""Pure pieces of `labs.chaos` (no services): the opt-in SIGSTOP kind leaves the default
schedules as they were, the invariant table groups the checker's messages, and the
counterexample entry point refuses what it does not know."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from labs import counterexample_worker
from labs.chaos import (
    ALL_KINDS,
    INVARIANTS,
    KINDS,
    ChaosConfig,
    invariant_rows,
    make_schedule,
    run_chaos,
)
from teamdesk.config import Settings

#: Printed by `python -m benchmarks.chaos --seed 11 --workers 3 --duration 12 --dry-run`
#: before `sigstop` existed: adding an opt-in kind must not move a default fault.
SEED_11 = [
    "+  0.50 s  sigterm w3    SIGTERM, restart after 0.85 s",
    "+  1.10 s  redis   redis stop Redis, start again after 1.30 s",
    "+  2.12 s  sigkill w2    SIGKILL, restart after 0.14 s",
    "+  3.18 s  cut     w2    cut its Redis link for 1.38 s",
    "+  6.43 s  redis   redis stop Redis, start again after 0.87 s",
    "+  8.18 s  sigkill w2    SIGKILL, restart after 0.13 s",
    "+ 10.80 s  cut     w3    cut its Redis link for 0.97 s",
]


def test_default_schedule_is_unchanged_and_sigstop_is_opt_in():
    assert [e.describe() for e in make_schedule(11, 3, 12.0)] == SEED_11
    assert "sigstop" not in KINDS and "sigstop" in ALL_KINDS
    assert all(e.kind != "sigstop" for s in range(20) for e in make_schedule(s, 2, 10.0))


def test_sigstop_holds_outlast_the_lock():
    """A frozen worker must stay frozen past its 1 s lock, or its job never stalls."""
    stops = [e for s in range(30) for e in make_schedule(s, 2, 8.0, ALL_KINDS)
             if e.kind == "sigstop"]
    assert stops and all(1.5 <= e.hold <= 2.5 and e.worker is not None for e in stops)
    assert make_schedule(5, 2, 8.0, ALL_KINDS) == make_schedule(5, 2, 8.0, ALL_KINDS)


def test_invariant_rows_group_the_checkers_messages():
    violations = [
        "TABCDE: FAILED with a text that is not one of the fixed ones: 'Boom: raw'",
        "TABCDF: CSV differs from a fresh recomputation of {} (3 vs 2 lines)",
        "TABCDF: a COMPLETED row changed afterwards (result_csv_md5)",
        "ticket 4: 2 notification(s) for 1 delivered reminder(s)",
        "TABCDG: not terminal (RUNNING, progress 40)",
        "w1 exited 1 after SIGTERM; expected 0 or 3 (W4)",
    ]
    rows = {r["invariant"]: r for r in invariant_rows(violations)}
    assert list(rows) == [name for name, _, _ in INVARIANTS]
    assert {n: r["violations"] for n, r in rows.items() if r["violations"]} == {
        "every task terminal, no lease left": 1,
        "FAILED only with a fixed readable text": 1,
        "each CSV equals a fresh recomputation": 1,
        "each current reminder sent once, stale ones never": 1,
        "no COMPLETED row changed afterwards": 1,
        "the run itself (workers, settling)": 1,
    }
    assert rows["FAILED only with a fixed readable text"]["example"].startswith("TABCDE")
    assert all(r["violations"] == 0 for r in invariant_rows([]))


def test_unknown_counterexample_is_refused_before_anything_runs():
    config = ChaosConfig(seed=1, counterexample="no-such-thing")
    with pytest.raises(ValueError, match="unknown counterexample 'no-such-thing'"):
        asyncio.run(run_chaos(Settings(), config, out=lambda line: None))


def test_counterexample_worker_needs_a_known_name():
    assert counterexample_worker.main([]) == 2
    assert counterexample_worker.main(["nope", "worker"]) == 2
    proc = subprocess.run([sys.executable, "-m", "labs.counterexample_worker", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "legacy-failed-listener" in proc.stderr


def test_dispatch_faults_are_split_into_injected_and_our_own():
    """D8: a dispatch fault while the run had that worker's Redis broken (Redis stopped:
    every worker; a cut or a SIGSTOP: that worker only), up to the grace after it, is the
    fault injected; any other — here a deadlock, and a fault on w2 while only w1's link
    was cut — is a dispatcher fault of our own. Log stamps are whole local seconds."""
    import time as _time

    from labs.chaos import FAULT_GRACE_S, classify_dispatch_faults

    wall0 = _time.mktime((2026, 12, 1, 10, 0, 0, 0, 0, -1))  # 10:00:00 local

    def line(offset: float, what: str) -> str:
        return _time.strftime("%H:%M:%S", _time.localtime(wall0 + offset)) + \
            f" ERROR dispatch.fault error={what}"

    logs = {
        "w1": "\n".join([line(5.4, "QueueTimeout: redis down"),  # Redis stopped 5–6 s
                         line(6 + FAULT_GRACE_S - 0.5, "ConnectionError: just after"),
                         line(20.2, "TimeoutError: w1's link cut"),  # cut 20–21 s
                         line(40.0, "DeadlockDetected: deadlock detected")]),
        "w2": "\n".join([line(20.5, "QueueTimeout: not w2's link"),
                         "10:00:03 INFO dispatch.tick scanned=0"]),
    }
    windows = [(wall0 + 5.0, wall0 + 6.0, "redis"), (wall0 + 20.0, wall0 + 21.0, "w1")]
    injected, own = classify_dispatch_faults(logs, windows, wall0)
    assert [x.split("error=")[1].split(":")[0] for x in injected] == [
        "QueueTimeout", "ConnectionError", "TimeoutError"]
    assert own == ["w1: dispatch.fault error=DeadlockDetected: deadlock detected",
                   "w2: dispatch.fault error=QueueTimeout: not w2's link"]
