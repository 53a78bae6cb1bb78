"""Pure pieces of `labs.chaos` (no services): the opt-in SIGSTOP kind leaves the default
schedules as they were, every fault kind is declared once and struck by a driver method of
its name, the invariant table groups typed violations by their invariant, the worker-log
parse, the counterexample entry point refuses what it does not know, a hold released
before it comes passes straight through, and the verdict's rule: conclusive only when
every kind scheduled struck a RUNNING task, on at least three different tasks."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time

import pytest

from labs import counterexample_worker
from labs.chaos import (
    ALL_KINDS,
    FAULT_KINDS,
    INVARIANTS,
    KINDS,
    ChaosConfig,
    Driver,
    Invariant,
    Violation,
    invariant_rows,
    make_schedule,
    run_chaos,
    worker_logs,
)
from labs.chaos.kinds import BREAKS_REDIS, action_line
from labs.chaos.report import ChaosReport, Strike
from labs.chaos.schedule import FaultEvent
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


def test_invariant_rows_group_the_checkers_violations():
    violations = [
        Violation(Invariant.FIXED_TEXT, "TABCDE",
                  "FAILED with a text that is not one of the fixed ones: 'Boom: raw'"),
        Violation(Invariant.CSV, "TABCDF",
                  "CSV differs from a fresh recomputation of {} (3 vs 2 lines)"),
        Violation(Invariant.UNCHANGED, "TABCDF",
                  "a COMPLETED row changed afterwards (result_csv_md5)"),
        Violation(Invariant.REMINDERS, None, "ticket 4: 2 notification(s) for 1 delivered "
                  "reminder(s)"),
        Violation(Invariant.TERMINAL, "TABCDG", "not terminal (RUNNING, progress 40)"),
        Violation(Invariant.RUN, None, "w1 exited 1 after SIGTERM; expected 0 or 3 (W4)"),
    ]
    rows = {r["invariant"]: r for r in invariant_rows(violations)}
    assert list(rows) == [inv.title for inv in INVARIANTS]
    assert {n: r["violations"] for n, r in rows.items() if r["violations"]} == {
        "every task terminal, no lease left": 1,
        "FAILED only with a fixed readable text": 1,
        "each CSV equals a fresh recomputation": 1,
        "each current reminder sent once, stale ones never": 1,
        "no COMPLETED row changed afterwards": 1,
        "the run itself (workers, settling)": 1,
    }
    assert rows["FAILED only with a fixed readable text"]["example"].startswith("TABCDE: ")
    assert rows["the run itself (workers, settling)"]["rules"] == "W4, D8"
    assert all(r["violations"] == 0 for r in invariant_rows([]))


def test_violations_are_grouped_by_their_invariant_not_their_words():
    """A changed COMPLETED reminder row names `reminder_revision` among its changed columns:
    it still counts under "no COMPLETED row changed afterwards" (words of another invariant
    in the text do not move it)."""
    v = Violation(Invariant.UNCHANGED, "TX", "a COMPLETED row changed afterwards "
                  "(reminder_revision, result_summary)")
    assert str(v) == "TX: a COMPLETED row changed afterwards (reminder_revision, result_summary)"
    rows = {r["invariant"]: r["violations"] for r in invariant_rows([v])}
    assert rows["no COMPLETED row changed afterwards"] == 1
    assert rows["each current reminder sent once, stale ones never"] == 0
    assert str(Violation(Invariant.RUN, None, "did not settle")) == "did not settle"


def test_every_fault_kind_is_declared_once_and_has_its_driver_method():
    """The kind table is the one description of a kind: each has a weight, a hold, an
    action, a description and a colour; the driver strikes it with the method of its name;
    the default and opt-in lists, and the Redis-breaking set, derive from it."""
    assert tuple(FAULT_KINDS) == ALL_KINDS and set(KINDS) <= set(ALL_KINDS)
    for name, kind in FAULT_KINDS.items():
        assert kind.name == name and kind.weight > 0, name
        assert 0 < kind.hold[0] <= kind.hold[1], name
        assert kind.action and kind.description and kind.colour.startswith("#"), name
        assert kind.target in ("process", "link", "server", "any"), name
        assert callable(getattr(Driver, name, None)), f"Driver has no method {name}"
        assert (name in KINDS) == kind.default, name
    assert BREAKS_REDIS == {"redis", "cut", "sigstop", "takeover"}
    assert len({k.colour for k in FAULT_KINDS.values()}) == len(FAULT_KINDS)
    with pytest.raises(ValueError, match="unknown fault kinds"):
        make_schedule(1, 2, 10.0, ("sigkill", "nope"))


def test_worker_log_lines_are_parsed_once_into_events_and_fields():
    """The workers' log format (`HH:MM:SS LEVEL event key=value ...`) read in one place:
    counts by event (a `task.failed` only when exhausted, W2; `task.error_unreported` is
    not `task.error`), the dispatcher's tick fields summed (D4, D6), other lines skipped."""
    log = "\n".join([
        "=== start #1 at 1.0",
        "10:00:01 INFO task.lease_lost task_id=T1 run=0 execution_id=e during=progress",
        "10:00:01 WARNING task.error task_id=T1 run=0 final=false error=OSError: x",
        "10:00:01 INFO task.error_unreported task_id=T1 run=0 error=OSError (lease no longer held)",
        "10:00:02 WARNING task.failed task_id=T2 run=0 exhausted=true error=X",
        "10:00:02 WARNING task.failed task_id=T3 run=0 exhausted=false error=X",
        "10:00:03 INFO dispatch.tick scanned=3 re_added=2 recovered_stale=1 ms=4",
        "10:00:04 INFO dispatch.tick scanned=0 recovered_stale=2 ms=1",
        "Traceback (most recent call last):",
    ])
    lines = list(worker_logs.parse(log))
    assert [ln.event for ln in lines][:2] == ["task.lease_lost", "task.error"]
    assert lines[0].second == 36001 and lines[0].fields["task_id"] == "T1"
    counts = worker_logs.counts(lines)
    assert counts["leases lost (P6: a newer executor owned the task)"] == 1
    assert counts["errors reported with the lease (P7)"] == 1
    assert counts["jobs the queue gave up on (failed listener, exhausted)"] == 1
    assert worker_logs.tick_sums(lines) == {"recovered_stale": 3, "re_added": 2,
                                            "failed_from_queue": 0}


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


async def test_a_hold_released_before_it_comes_passes_straight_through(tmp_path):
    """A worker that read its arm just before the driver disarmed it still holds once
    (`labs.chaos.holds`); releasing that token at the disarm lets such a late hold go on
    at once. Else a worker of one job slot would stand idle until the strike ended, and
    no E2 could take the raced task over (P3, P5)."""
    from labs.chaos.holds import HOLD_POINT, Holds, install
    from teamdesk import probes

    holds = Holds(tmp_path)
    ctx = {"task_id": "T1", "run": 1, "execution_id": "e1"}
    remove = install(tmp_path, "w1")
    try:
        token = holds.arm("w1")
        holds.release("w1", token)  # what the driver does for a worker it did not choose
        await asyncio.wait_for(probes.announce(HOLD_POINT, **ctx), 2.0)
        assert holds.held("w1", token) is not None  # it did hold, and went on
        # Without the release the same hold waits: the next token is held until released.
        later = holds.arm("w1")
        waiting = asyncio.ensure_future(probes.announce(HOLD_POINT, **ctx))
        assert await holds.reached(["w1"], {"w1": later}, 2.0) is not None
        assert not waiting.done()
        holds.release("w1", later)
        await asyncio.wait_for(waiting, 2.0)
    finally:
        remove()


def _report(*struck: tuple[str, str], kinds: tuple[str, ...] = ("sigkill", "sigstop", "cut"),
            leases_lost: int = 1) -> ChaosReport:
    """A report of a run whose schedule has one fault of each of `kinds`, and whose
    strikes held `struck`: (kind, task) on a RUNNING task each, one per fault."""
    schedule = [FaultEvent(0.5 + i, kind, 0, 1.0) for i, kind in enumerate(kinds)]
    report = ChaosReport(config=ChaosConfig(seed=1), schedule=schedule)
    for kind, task in struck:
        i = next(i for i, ev in enumerate(schedule) if ev.kind == kind)
        report.strikes.append(Strike(1.0 + i, kind, "w1", "w1", task, f"e-{task}",
                                     on_running=True, fault=i, due=schedule[i].at))
        report.struck_running[kind] += 1
    report.leases_lost = leases_lost
    return report


def test_conclusive_only_when_every_kind_struck_three_different_tasks():
    """P3, P6: a run is conclusive only when every kind on its schedule struck a RUNNING
    task, its strikes held at least three different tasks, and a lease was lost; else the
    verdict says inconclusive and why."""
    full = _report(("sigkill", "T1"), ("sigstop", "T2"), ("cut", "T3"))
    assert full.conclusive and full.verdict().startswith("conclusive: every kind")
    assert full.struck_tasks == {"T1", "T2", "T3"}

    # The SIGKILL struck nothing (its fault missed): three strikes are not enough.
    no_kill = _report(("sigstop", "T2"), ("cut", "T3"), kinds=("sigkill", "sigstop", "cut",
                                                                "cut"))
    no_kill.strikes.append(Strike(4.0, "cut", "w1", "w1", "T4", "e4", on_running=True,
                                  fault=3))
    no_kill.struck_running["cut"] += 1
    assert no_kill.struck == 3 and len(no_kill.struck_tasks) == 3
    assert not no_kill.conclusive and no_kill.kinds_not_struck == ["sigkill"]
    assert no_kill.verdict().startswith("inconclusive (sigkill struck no RUNNING task)")

    # Every kind struck, but the cut and the SIGSTOP the same task: it counts once.
    same = _report(("sigkill", "T1"), ("sigstop", "T2"), ("cut", "T2"))
    assert same.struck == 3 and same.struck_tasks == {"T1", "T2"}
    assert not same.conclusive
    assert "inconclusive (2 different task(s) struck, fewer than 3)" in same.verdict()

    # No lease lost, or nothing scheduled: nothing about leases was shown.
    assert "no lease was lost" in _report(("sigkill", "T1"), ("sigstop", "T2"),
                                          ("cut", "T3"), leases_lost=0).verdict()
    assert not _report(kinds=()).conclusive


def test_a_fault_that_never_struck_is_missed_in_the_fault_table():
    """One row per scheduled fault, due and struck; a fault without a strike says so."""
    report = _report(("sigkill", "T1"), ("cut", "T3"))
    rows = report.fault_rows()
    assert [(r["kind"], r["due_s"], r["task"], r["lease_after"]) for r in rows] == [
        ("sigkill", 0.5, "T1", ""), ("sigstop", 1.5, "", "missed"), ("cut", 2.5, "T3", "")]
    assert rows[1]["struck_s"] is None and rows[0]["target"] == "w1"
    assert "sigstop struck no RUNNING task" in report.verdict()


def test_the_run_log_speaks_the_editions_language(monkeypatch):
    """The chaos narration (schedule, verdict, invariant names, log counts) is Chinese in
    the Chinese edition; the English stays as it was; identifiers stay English: the kinds,
    the invariant rows the notebook compares, "VIOLATION"."""
    schedule = make_schedule(11, 3, 12.0)
    english = [e.describe() for e in schedule]
    for name, kind in FAULT_KINDS.items():  # the action is declared once, said twice
        assert action_line(name, 0.5) == f"{kind.action} 0.50 s", name
    assert all(worker_logs.shown(label) == label for label in worker_logs.LOG_COUNTS)
    report = _report(("sigkill", "T1"), ("sigstop", "T2"), ("cut", "T3"))
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    chinese = [e.describe() for e in schedule]
    assert chinese[0] == "+  0.50 s  sigterm w3    SIGTERM，0.85 秒后重启" != english[0]
    assert report.verdict().startswith("足以下结论（conclusive）: ")
    assert "没有失去任何租约" in _report(("sigkill", "T1"), leases_lost=0).verdict()
    table = report.invariant_table()
    assert "没有结果写在较新的租约之上" in table.index
    assert "no result written over a newer lease" in [r["invariant"]
                                                      for r in report.invariant_rows()]
    assert all(not worker_logs.shown(label).isascii() for label in worker_logs.LOG_COUNTS)


#: A call that prints or records a line of the run, by the place of its text, which must
#: come from `say`.
_SPEAKS = {"out": 0, "note": 0, "violate": 0, "append": 0, "extend": 0, "Violation": 2,
           "bad": 1}


def test_the_run_log_is_said_not_written_in_english():
    """Every line `labs.chaos` prints or records for the learner (`out`, `note`, a note,
    finding or the checker's violation) goes through `labs.i18n.say`: an f-string or a literal with
    English words in such a call is a line the Chinese edition would show in English.
    Only layout is written directly (an indent, a time stamp, the `VIOLATION` tag)."""
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "labs" / "chaos"
    found, checked = [], 0
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node, "func", None)
            name = getattr(name, "attr", getattr(name, "id", None))
            if not isinstance(node, ast.Call) or len(node.args) <= _SPEAKS.get(name, 99):
                continue
            checked += 1
            arg = node.args[_SPEAKS[name]]
            words = (arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                     else "".join(v.value for v in arg.values if isinstance(v, ast.Constant))
                     if isinstance(arg, ast.JoinedStr) else "")
            if re.search(r"[A-Za-z]{3,}", words.replace("VIOLATION", "")):
                found.append(f"{path.name}:{node.lineno}: {words.strip()[:60]!r}")
    assert checked > 100, checked  # the calls above are still found by these names
    assert not found, "say it through labs.i18n.say:\n" + "\n".join(found)


async def test_a_fault_waiting_on_its_own_worker_restarts_it_when_it_exited_by_itself(
        monkeypatch):
    """The supervisor restarts a worker that exited by itself only when no fault holds its
    lock; a fault that holds it (here: w1 started while Redis was down and exited 2) must
    restart it itself, or it waits its whole bound for a hold that cannot come and counts
    as MISSED — seen once with seed 2."""
    from types import SimpleNamespace

    from labs.chaos.holds import Held

    class Proc:  # a worker process that has exited by itself while starting
        name, pid, started_up, alive = "w1", 1, False, False
        p = SimpleNamespace(returncode=2)

        def tail(self, n):
            return "teamdesk: cannot start the worker, Redis is not reachable"

        def start(self):
            self.alive, self.pid = True, 2

    class Holds:  # the restarted process is the one that holds
        def arm(self, name, task_id=None, exclude=()):
            return 1

        async def reached(self, names, tokens, timeout):
            await asyncio.sleep(0)
            return Held("w1", 1, "T1", 0, "e1") if proc.alive else None

        def release(self, name, token): ...
        def disarm(self, name, token): ...

    async def no_export(*args):
        return 1

    monkeypatch.setattr("labs.chaos.driver.create", no_export)
    report = ChaosReport(config=ChaosConfig(seed=2, workers=1), schedule=[])
    report.expected = object()
    lines: list[str] = []
    driver = Driver(Settings(), report.config, report, lines.append, None, None)
    proc, driver.holds, driver.locks = Proc(), Holds(), [asyncio.Lock()]
    driver.procs = [proc]

    async def running(task_id):
        return ("RUNNING", "e1")

    driver.lease = running
    held = await driver._wait_hold([0], deadline=time.monotonic() + 5, owned=True)
    assert held is not None and held.task_id == "T1" and proc.alive
    assert any("exited by itself while starting (exit 2)" in line for line in lines), lines
    assert report.findings


async def test_the_final_sigterm_is_judged_by_w4():
    """W4: on the final SIGTERM a worker exits 0; a worker still starting, or one that ran
    out its drain timeout with nothing RUNNING (the bullmq port's close), is a finding;
    any other exit code is a violation of the run."""
    from labs.chaos import settle

    class Proc:
        def __init__(self, name, code, started_up=True):
            self.name, self.code, self.started_up = name, code, started_up

        async def stop(self, timeout):
            return self.code

        def tail(self, n):
            return "last line"

    report = ChaosReport(config=ChaosConfig(seed=1), schedule=[])
    report.settled = True
    driver = Driver(Settings(), report.config, report, lambda line: None, None, None)
    driver.procs = [Proc("w1", 0), Proc("w2", 1, started_up=False), Proc("w3", 3),
                    Proc("w4", -9)]
    await settle.final_stop(driver)
    assert [f.split(" ", 1)[0] for f in report.findings] == ["w2", "w3"]
    assert [v.text.split(" ", 1)[0] for v in report.violations] == ["w4"]
