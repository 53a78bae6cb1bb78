"""What a run found (`ChaosReport`) and how it is printed: the header before the run (the
schedule, the timings) and the summary after it."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs.chaos.checker import Invariant, Violation, invariant_rows
from labs.chaos.config import ChaosConfig
from labs.chaos.holds import Crossing
from labs.chaos.schedule import FaultEvent
from labs.chaos.workload import Expected
from labs.i18n import say
from labs.timings import CHAOS_WORKER, describe

#: A run is conclusive about running work when at least this many faults struck a task
#: that was RUNNING in the ledger, held by the struck worker's process.
MIN_STRUCK_RUNNING = 3


@dataclass
class Strike:
    """One fault as it struck: on a task held in flight (`task_id` set and verified
    RUNNING with that execution id in the ledger just before), or on whatever the worker
    was doing (none held within the bound)."""

    #: Seconds after the window opened.
    at: float
    kind: str
    #: A worker's name, or "redis".
    lane: str
    #: The worker whose held export it struck (a Redis fault strikes one too), or None.
    worker: str | None = None
    task_id: str | None = None
    execution_id: str | None = None
    #: The held task was RUNNING under that execution id when the fault struck.
    on_running: bool = False
    #: What the held lease had become when its executor was let go on: "taken over" (a
    #: newer claim), "cleared" (a D6 recovery, no new claim yet) or "kept"; None when
    #: the strike did not wait for it (the executor died, or was let go at once).
    lease_after: str | None = None


@dataclass
class ChaosReport:
    """Everything one run did and found; `ok` when it settled without a violation."""

    config: ChaosConfig
    schedule: list[FaultEvent]
    executed: Counter = field(default_factory=Counter)
    #: Faults that struck a RUNNING task held by the struck worker, by kind.
    struck_running: Counter = field(default_factory=Counter)
    #: Every fault as it struck (`Strike`), in order.
    strikes: list[Strike] = field(default_factory=list)
    #: From the workers' logs: stalls detected (`task.stalled`), leases lost
    #: (`task.lease_lost`, P6), RUNNING rows recovered by D6 (the ticks' sums).
    stalls: int = 0
    leases_lost: int = 0
    d6_recoveries: int = 0
    #: The crossings the workers recorded (claims, result writes; `labs.chaos.holds`).
    history: list[Crossing] = field(default_factory=list)
    #: The ledger after the run, task id → columns (`checker.ledger_rows`).
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    #: Deviations worth a look that are not ledger invariants (e.g. an idle worker whose
    #: drain timed out): printed, not counted as violations.
    findings: list[str] = field(default_factory=list)
    by_status: Counter = field(default_factory=Counter)
    failed_texts: Counter = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    settled: bool = False
    settle_s: float = 0.0
    snapshots: int = 0
    log_dir: Path | None = None
    expected: Expected | None = None
    completed_seen: dict[str, tuple] = field(default_factory=dict)
    #: Fault spans for the swimlanes: (start, end, lane, kind), offsets from the window's
    #: start; lane is a worker's name or "redis".
    timeline: list[tuple[float, float, str, str]] = field(default_factory=list)
    #: (offset, COMPLETED rows so far) at each snapshot.
    completions: list[tuple[float, int]] = field(default_factory=list)
    #: The kinds really used (after dropping unavailable ones).
    kinds: tuple[str, ...] = ()
    #: Dispatch faults (D8) in the workers' logs, split: struck while this run had that
    #: worker's Redis broken (Redis stopped, its link cut, the worker frozen) — the fault
    #: injected — and any other, a dispatcher fault of our own (its log lines).
    dispatch_faults_injected: int = 0
    dispatch_faults_own: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.settled and not self.violations

    @property
    def struck(self) -> int:
        """Faults that struck a RUNNING task."""
        return sum(self.struck_running.values())

    @property
    def conclusive(self) -> bool:
        """Did the run test running work: ≥ `MIN_STRUCK_RUNNING` faults struck a RUNNING
        task and at least one lease was lost? A run without it proved little (P3, P6)."""
        return self.struck >= MIN_STRUCK_RUNNING and self.leases_lost > 0

    def verdict(self) -> str:
        """One line: "conclusive" or "inconclusive", with why."""
        figures = (f"{self.struck} fault(s) struck a RUNNING task, {self.stalls} stall(s), "
                   f"{self.leases_lost} lease(s) lost, {self.d6_recoveries} D6 recovery(ies)")
        if self.conclusive:
            return f"conclusive: {figures}"
        why = [] if self.struck >= MIN_STRUCK_RUNNING else [
            f"fewer than {MIN_STRUCK_RUNNING} faults struck a RUNNING task"]
        why += [] if self.leases_lost else ["no lease was lost"]
        return f"inconclusive ({'; '.join(why)}): {figures}"

    def strike_rows(self) -> list[dict[str, Any]]:
        """One row per strike, for a table: when, what, whom, the held task, its lease."""
        return [{"at_s": round(s.at, 2), "kind": s.kind, "lane": s.lane,
                 "held_by": s.worker or "", "task": s.task_id or "",
                 "execution": (s.execution_id or "")[:8], "on_RUNNING": s.on_running,
                 "lease_after": s.lease_after or ""} for s in self.strikes]

    def violate(self, text: str, invariant: Invariant = Invariant.RUN) -> None:
        """Record a violation found by the run itself (not about one task)."""
        self.violations.append(Violation(invariant, None, text))

    def invariant_rows(self) -> list[dict[str, Any]]:
        """One row per invariant: the rules it checks and the violations found."""
        return invariant_rows(self.violations)

    def invariant_table(self) -> Any:
        """`invariant_rows()` as a pandas DataFrame (for a notebook)."""
        import pandas as pd

        return pd.DataFrame(self.invariant_rows()).set_index("invariant")


def print_header(config: ChaosConfig, kinds: tuple[str, ...], schedule: list[FaultEvent],
                 out: Callable[[str], None], notes: list[str]) -> None:
    """What the run will do, before it does it: the arguments, timings and schedule."""
    out(say("chaos.report.run", "chaos run: seed {seed}, {workers} worker process(es), "
            "{tasks} task(s), fault window {duration:g} s, kinds {kinds}; machine: {cores} "
            "cores",
            seed=config.seed, workers=config.workers, tasks=config.tasks, duration=config.duration,
            kinds=','.join(kinds), cores=os.cpu_count()))
    out(say("chaos.report.timings", "  worker timings (environment): {timings}",
            timings=describe(CHAOS_WORKER)))
    for n in notes:
        out(say("chaos.report.note", "  note: {n}", n=n))
    out(say("chaos.report.schedule", "  fault schedule ({count} faults):",
            count=len(schedule)))
    for ev in schedule:
        out(f"    {ev.describe()}")


def print_summary(report: ChaosReport, out: Callable[[str], None]) -> None:
    """What the run did and found, after it."""
    out(say("chaos.report.summary", "summary"))
    injected = ", ".join(
        f"{k} {report.executed[k]}" + (say("chaos.report.skipped", " (+{skipped} skipped)",
                                           skipped=report.skipped[k])
                                       if report.skipped[k] else "") for k in report.kinds)
    out(say("chaos.report.injected", "  faults injected: {faults}", faults=injected))
    struck = ", ".join(f"{k} {n}" for k, n in sorted(report.struck_running.items()))
    out(say("chaos.report.struck", "  faults that struck a RUNNING task (held "
            "between two batches): {count} ({kinds})", count=report.struck, kinds=struck))
    out(say("chaos.report.running-work", "  running work: {verdict}", verdict=report.verdict()))
    out(say("chaos.report.by-status", "  tasks by status: {counts}",
            counts=", ".join(f"{k} {n}" for k, n in sorted(report.by_status.items()))))
    for text_, n in report.failed_texts.most_common():
        out(say("chaos.report.failed", "  FAILED x{n}: {text}", n=n, text=text_))
    out(say("chaos.report.settled", "  settled: {settled} after {seconds:.1f} s; "
            "{snapshots} snapshots of COMPLETED rows ({checked} rows checked unchanged)",
            settled=report.settled, seconds=report.settle_s, snapshots=report.snapshots,
            checked=len(report.completed_seen)))
    out(say("chaos.report.recovery-notes", "  recovery notes:"))
    for n in report.notes:
        out(f"    {n}")
    if report.findings:
        out(say("chaos.report.findings", "  findings (not ledger invariants, not "
                "counted as violations):"))
        for n in report.findings:
            out(f"    {n}")
    kept = report.log_dir or "removed (nothing to read in them; --keep-logs keeps them)"
    out(f"  worker logs: {kept}")
    out(say("chaos.report.violations", "  violations: {count}",
            count=len(report.violations)))
    for v in report.violations[:30]:
        out(f"    VIOLATION {v}")
