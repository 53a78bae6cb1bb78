"""What a run found (`ChaosReport`) and how it is printed: the header before the run (the
schedule, the timings) and the summary after it."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit import i18n
from labs.chaos.checker import Invariant, Violation, invariant_rows
from labs.chaos.config import ChaosConfig
from labs.chaos.holds import Crossing
from labs.chaos.kinds import FAULT_KINDS
from labs.chaos.schedule import FaultEvent
from labs.chaos.words import Words
from labs.chaos.workload import Expected
from labs.history import short
from labs.i18n import say
from labs.learn import shown
from labs.timings import CHAOS_WORKER, describe

#: A run is conclusive about running work only when its strikes held at least this many
#: different tasks RUNNING (the same task struck twice counts once) — and every kind
#: scheduled struck one (`ChaosReport.conclusive`).
MIN_DISTINCT_TASKS = 3


#: What a held lease had become when its executor went on (`Strike.lease_after`).
TAKEN_OVER, CLEARED, KEPT = "taken over", "cleared", "kept"
#: Those words in the edition's words (the strike's log line).
LEASE_AFTER = Words("chaos.lease", {TAKEN_OVER: "taken-over", CLEARED: "cleared", KEPT: "kept"},
                    __file__)


@dataclass
class Strike:
    """One fault as it struck: on a task held in flight (`task_id` set and verified
    RUNNING with that execution id in the ledger just before)."""

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
    #: Its fault's place in the schedule, and that fault's offset: a fault strikes at its
    #: offset or later, once its sync points have come (`labs.chaos.driver`).
    fault: int = 0
    due: float = 0.0
    #: What the held lease had become when its executor was let go on: `TAKEN_OVER` (a
    #: newer claim), `CLEARED` (a D6 recovery, no new claim yet) or `KEPT`; None when
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
    #: Exports the faults asked for when due (`plan.STRIKE_EXPORT`, one per worker each),
    #: among the tasks created.
    strike_exports: int = 0
    #: The crossings the workers recorded (claims, result writes; `labs.chaos.holds`).
    history: list[Crossing] = field(default_factory=list)
    #: The ledger after the run, task id → columns (`checker.ledger_rows`).
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Faults whose sync points did not come within `config.hold_wait`, by kind: each is
    #: also a violation (a stuck system), never a silent skip.
    missed: Counter = field(default_factory=Counter)
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
    def struck_tasks(self) -> set[str]:
        """The different tasks struck while RUNNING (a task struck twice counts once)."""
        return {s.task_id for s in self.strikes if s.on_running and s.task_id}

    @property
    def kinds_not_struck(self) -> list[str]:
        """The kinds of the schedule that struck no RUNNING task, in schedule order."""
        scheduled = dict.fromkeys(ev.kind for ev in self.schedule)
        return [k for k in scheduled if not self.struck_running[k]]

    @property
    def conclusive(self) -> bool:
        """Did the run test running work? Only when every kind scheduled struck a RUNNING
        task held in flight, the strikes held at least `MIN_DISTINCT_TASKS` different
        tasks, and at least one lease was lost: a kind that struck nothing, or one task
        struck by several faults, proves less than the schedule promises (P3, P6)."""
        return (bool(self.schedule) and not self.kinds_not_struck
                and len(self.struck_tasks) >= MIN_DISTINCT_TASKS and self.leases_lost > 0)

    def verdict(self) -> str:
        """One line: "conclusive" or "inconclusive", with why, in the edition's words (the
        word before the first ":" is the verdict)."""
        figures = say("chaos.verdict.figures", "{struck} fault(s) struck a RUNNING task, "
                      "{tasks} different task(s), {stalls} stall(s), {lost} lease(s) lost, "
                      "{d6} D6 recovery(ies)", struck=self.struck, tasks=len(self.struck_tasks),
                      stalls=self.stalls, lost=self.leases_lost, d6=self.d6_recoveries)
        if self.conclusive:
            return say("chaos.verdict.conclusive", "conclusive: every kind scheduled struck a "
                       "RUNNING task; {figures}", figures=figures)
        why = [say("chaos.verdict.kind-missed", "{kind} struck no RUNNING task", kind=k)
               for k in self.kinds_not_struck]
        if len(self.struck_tasks) < MIN_DISTINCT_TASKS:
            why.append(say("chaos.verdict.few-tasks", "{count} different task(s) struck, "
                           "fewer than {least}", count=len(self.struck_tasks),
                           least=MIN_DISTINCT_TASKS))
        if not self.leases_lost:
            why.append(say("chaos.verdict.no-lease-lost", "no lease was lost"))
        if not self.schedule:
            why.append(say("chaos.verdict.nothing-scheduled", "nothing was scheduled"))
        said = why[0]
        for more in why[1:]:
            said = say("chaos.verdict.and", "{reasons}; {reason}", reasons=said, reason=more)
        return say("chaos.verdict.inconclusive", "inconclusive ({why}): {figures}", why=said,
                   figures=figures)

    def fault_rows(self) -> list[dict[str, Any]]:
        """One row per scheduled fault: when it was due and when it struck, whom, the
        task held in flight and its lease (RUNNING then? what it became before its
        executor went on), or "missed" when its sync points never came."""
        rows = []
        for i, ev in enumerate(self.schedule):
            st = next((s for s in self.strikes if s.fault == i), None)
            target = FAULT_KINDS[ev.kind].target
            rows.append({
                "due_s": ev.at, "kind": ev.kind,
                "target": (f"w{ev.worker + 1}" if ev.worker is not None else
                           "any" if target == "any" else "redis"),
                "struck_s": round(st.at, 2) if st else None,
                "held_by": (st.worker or "") if st else "",
                "task": (st.task_id or "") if st else "",
                "execution": short(st.execution_id) if st else "",
                "on_RUNNING": st.on_running if st else False,
                "lease_after": (st.lease_after or "") if st else "missed"})
        return rows

    def fault_table(self) -> Any:
        """`fault_rows()` as a pandas DataFrame for the eye (a notebook's run view): the
        headers and the words among the values (what the lease became, whether the strike
        found a RUNNING task) in the edition's language; kinds, workers, task ids and
        executions are identifiers and stay. Code that reads the rows uses `fault_rows()`."""
        import pandas as pd

        if i18n.lang() == i18n.SOURCE_LANG:
            return pd.DataFrame(self.fault_rows())
        headers, words = _fault_headers(), _fault_words()
        return pd.DataFrame([{headers[k]: words.get(v, v) if isinstance(v, str | bool) else v
                              for k, v in row.items()} for row in self.fault_rows()])

    def violate(self, text: str, invariant: Invariant = Invariant.RUN) -> None:
        """Record a violation found by the run itself (not about one task)."""
        self.violations.append(Violation(invariant, None, text))

    def invariant_rows(self) -> list[dict[str, Any]]:
        """One row per invariant: the rules it checks and the violations found."""
        return invariant_rows(self.violations)

    def invariant_table(self) -> Any:
        """`invariant_rows()` as a pandas DataFrame (for a notebook), each invariant by its
        name in the edition's words (`labs.learn.shown`: a prediction asks for one, and
        takes it in either language). Shown with its headers in the edition's words too
        (`labs.tables.Shown`); its columns stay `rules`, `violations`, `example`, so a
        cell selects them by those names in both editions."""
        import pandas as pd

        from labs.tables import Shown

        rows = [{**row, "invariant": shown(row["invariant"])} for row in self.invariant_rows()]
        return Shown(pd.DataFrame(rows).set_index("invariant"))


def _fault_headers() -> dict[str, str]:
    """The fault table's column names in the edition's words."""
    return {
        "due_s": say("chaos.fault-table.due_s", "due_s"),
        "kind": say("chaos.fault-table.kind", "kind"),
        "target": say("chaos.fault-table.target", "target"),
        "struck_s": say("chaos.fault-table.struck_s", "struck_s"),
        "held_by": say("chaos.fault-table.held_by", "held_by"),
        "task": say("chaos.fault-table.task", "task"),
        "execution": say("chaos.fault-table.execution", "execution"),
        "on_RUNNING": say("chaos.fault-table.on_RUNNING", "on_RUNNING"),
        "lease_after": say("chaos.fault-table.lease_after", "lease_after"),
    }


def _fault_words() -> dict[Any, Any]:
    """The fault table's words among its values (`Strike.lease_after`, "missed", the
    RUNNING flag), in the edition's language."""
    return {
        **{value: LEASE_AFTER.shown(value) for value in LEASE_AFTER.keys},  # what a lease became
        "missed": say("chaos.fault-table.missed", "missed"),
        True: say("chaos.fault-table.yes", "True"),
        False: say("chaos.fault-table.no", "False"),
    }


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
    out(say("chaos.report.strikes", "  each fault strikes at its offset or later, in this "
            "order: once its worker is free and holds, between two batches, an export not "
            "struck yet (it asks for {workers} export(s) of its own when due)",
            workers=config.workers))


def print_summary(report: ChaosReport, out: Callable[[str], None]) -> None:
    """What the run did and found, after it."""
    out(say("chaos.report.summary", "summary"))
    injected = ", ".join(
        f"{k} {report.executed[k]}" + (say("chaos.report.missed", " (+{missed} missed)",
                                           missed=report.missed[k])
                                       if report.missed[k] else "") for k in report.kinds)
    out(say("chaos.report.injected", "  faults injected: {faults}", faults=injected))
    struck = ", ".join(f"{k} {n}" for k, n in sorted(report.struck_running.items()))
    out(say("chaos.report.struck-tasks", "  faults that struck a RUNNING task (held "
            "between two batches): {count} ({kinds}), on {tasks} different task(s)",
            count=report.struck, kinds=struck, tasks=len(report.struck_tasks)))
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
    if report.log_dir is not None:
        out(say("chaos.report.logs-kept", "  worker logs: {folder}", folder=report.log_dir))
    else:
        out(say("chaos.report.logs-removed", "  worker logs: removed (nothing to read in "
                "them; --keep-logs keeps them)"))
    out(say("chaos.report.violations", "  violations: {count}",
            count=len(report.violations)))
    for v in report.violations[:30]:
        out(f"    VIOLATION {v}")
