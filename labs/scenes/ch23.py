"""Scene helpers of `23-outbox.ipynb` (chapter 23, the transactional outbox).

What the notebook needs to *look at* a scene — which rows a scan would pick, the outbox
rows of a request as a table, what is left of a request that failed, which tickets an
export should contain — and the machinery of its exercises and scenes, which a learner
need not read to follow the chapter:

- the judges of Exercises A and B (`judge_order`, exercise `23.order`; `judge_recovery_test`,
  exercise `23.test`, with `Steps` and `MarkFirst`), kept in `labs.scenes.ch23_exercises`
  and reached from here, as the notebook calls them;
- the tick loop of §5 (`Ticker`, the product's `DispatchLoop` with its events recorded,
  D8) and the fairness scene of §3 (`reminders_due_tomorrow`, `ascending_scan`, D1);
- the diagnosis cases `CASES` (`labs.cases`, exercises `case.<name>`): "waiting-dispatched"
  (Exercise C), "orphan-job" (Exercise D) and "running-unrecovered" (Exercise E), each
  staged by the real system;
- `window`: one scene's rows of the lab's history, for its swimlane.

The scenes themselves (the two wrong orders, the gates, the outage) stay in the cells.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import func, select

from labs import faults, statements, tables
from labs.cases import CaseSpec
from labs.history import History
from labs.names import Names

# Chapter 23's exercises and their judges (`ch23_exercises`), reached by the notebook here.
from labs.scenes.ch23_exercises import (  # noqa: F401
    ORDER_FILTERS,
    MarkFirst,
    Steps,
    T,
    judge_order,
    judge_recovery_test,
    mark_then_add,
)
from labs.tables import idle_s  # noqa: F401 (the notebooks' cells call chNN.idle_s)
from labs.worlds import register_cases
from teamdesk.db.models import BackgroundTask, Priority, Ticket, TicketEvent, TicketStatus
from teamdesk.tasks.dispatch_loop import DispatchLoop
from teamdesk.tasks.ledger import QUERIES
from teamdesk.tasks.queue import create_task_queue, task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab


async def scan_preview(lab: Lab, names: Names, *, limit: int | None = None,
                       later: float = 0) -> list[str]:
    """Which rows the dispatcher's scan (D1) would pick now, or `later` seconds from now,
    by name, without enqueueing anything: the product's own `scan` statement, with
    `limit` in place of the batch size (100). The scan compares in the database's clock,
    which cannot be moved; so for `later` every WAITING row's clocks move back instead,
    in a transaction that is rolled back (nothing is written)."""
    params = {"limit": lab.settings.dispatch_batch_size if limit is None else limit,
              "age_s": float(lab.settings.redispatch_age_s)}
    async with lab.sessions() as s:
        try:
            if later:
                await statements.run(s, "waiting_seconds_earlier", {"later_s": float(later)})
            conn = await s.connection()
            rows = await conn.exec_driver_sql(QUERIES["scan"], params)
            return [names.of(r.id) for r in rows]
        finally:
            await s.rollback()


async def outbox_rows(lab: Lab, names: Names, ticket: Ticket,
                      tasks: list[BackgroundTask]) -> pd.DataFrame:
    """The outbox rows a request wrote (O2, O3): one row per task with the fields the
    chapter names — type, status, run, dispatched_at, ticket, owner, revision, run_at
    (compared with the ticket's due date) and scope."""
    rows = []
    for task in tasks:
        t = await lab.task(task.id)
        rows.append({
            "task": names.of(t.id), "type": t.type.value, "status": t.status.value,
            "run": t.run, "dispatched_at": t.dispatched_at, "ticket_id": t.ticket_id,
            "owner_id": t.owner_id, "revision": t.reminder_revision,
            "run_at": "= due_at" if t.run_at == ticket.due_at else "now",
            "scope": t.scope.value})
    df = pd.DataFrame(rows).astype({"ticket_id": "Int64", "revision": "Int64"})
    return tables.show(df)


async def event_kinds(lab: Lab, ticket_id: int) -> list[str]:
    """The kinds of a ticket's history events, oldest first."""
    async with lab.sessions() as s:
        return list((await s.scalars(select(TicketEvent.kind).where(
            TicketEvent.ticket_id == ticket_id).order_by(TicketEvent.id))).all())


async def rows_left(lab: Lab, ticket_id: int, task_id: str) -> int:
    """How many rows of one request exist: its ticket, the ticket's events and its
    reminder task. 0 after a rolled-back request (O1: the intent shares the business
    transaction's fate)."""
    async with lab.sessions() as s:
        left = await s.scalar(select(func.count()).select_from(BackgroundTask).where(
            BackgroundTask.id == task_id))
        left += await s.scalar(select(func.count()).select_from(Ticket).where(
            Ticket.id == ticket_id))
        left += await s.scalar(select(func.count()).select_from(TicketEvent).where(
            TicketEvent.ticket_id == ticket_id))
    return left


async def matching_ticket_ids(lab: Lab, status: TicketStatus,
                              priority: Priority) -> list[int]:
    """The ids of the team's live tickets with this status and priority, in id order: what
    an export with these filters must contain (X1), counted independently of the
    exporter's own query."""
    async with lab.sessions() as s:
        return list((await s.scalars(select(Ticket.id).where(
            Ticket.team_id == lab.team, Ticket.status == status, Ticket.priority == priority,
            Ticket.deleted_at.is_(None)).order_by(Ticket.id))).all())


# ------------------------------------------------------------ §5: the tick loop (D8)

class Ticker:
    """The product's `DispatchLoop` ticking a lab's dispatcher (D8), every `tick_s`
    seconds instead of 3 s, with every loop event it reports (`tick.start`, `tick.done`,
    `tick.fault`, `tick.skipped`) kept in `events` and in the lab's history, so a cell can
    wait for one (`await ticker.wait("tick.skipped")`) instead of sleeping. Its ticks run
    as the lab's dispatcher: the lab's gates catch them and its log keeps their lines.
    `queue` replaces the lab's queue (one built on a cut proxy: a dispatcher that cannot
    reach Redis while everyone else can). `lab.close()` stops it."""

    def __init__(self, lab: Lab, *, tick_s: float = 0.2, queue: Any = None) -> None:
        self.lab = lab
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.running = 0
        #: The most ticks ever running at once (D8: 1).
        self.max_running = 0
        self._changed = asyncio.Event()
        self.loop = DispatchLoop(queue or lab.queue, lab.settings.replace(dispatch_tick_s=tick_s),
                                 listener=self._on)

    def _on(self, event: str, info: dict[str, Any]) -> None:
        if event == "tick.start":
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        elif event in ("tick.done", "tick.fault"):
            self.running -= 1
        self.events.append((event, info))
        kind = {"tick.start": "invoke", "tick.done": "ok", "tick.fault": "fail"}.get(event,
                                                                                     "info")
        detail = info.get("report") or info.get("error") or ""
        self.lab.history.add(actor="dispatch loop", type=kind, op=event,
                             detail=f"tick {info.get('tick', '')} {detail}".strip())
        self._changed.set()

    def start(self) -> None:
        """Start the loop (its first tick at once), as the lab's dispatcher."""
        with self.lab.routes.acting_as("dispatcher"):
            self.loop.start()
        self.lab.add_cleanup(self.stop)

    async def stop(self) -> None:
        await self.loop.stop(timeout=T)

    def mark(self) -> int:
        """The number of events so far: `wait(..., since=mark)` looks only after it."""
        return len(self.events)

    async def wait(self, event: str, *, since: int = 0, timeout: float = T,
                   where: Any = None) -> dict[str, Any]:
        """The first `event` at or after position `since` (bounded by `timeout`)."""
        async def found() -> dict[str, Any]:
            while True:
                for kind, info in self.events[since:]:
                    if kind == event and (where is None or where(info)):
                        return info
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(found(), timeout)

    def counts(self) -> dict[str, int]:
        """How many ticks started, finished, failed and were skipped so far."""
        return {k.removeprefix("tick."): sum(1 for e, _ in self.events if e == k)
                for k in ("tick.start", "tick.done", "tick.fault", "tick.skipped")}


def window(lab: Lab, start: int, end: int | None = None) -> History:
    """The lab's history rows from position `start` (to `end`) as a history of their own,
    for a swimlane of one scene (`window(lab, mark).plot(...)`)."""
    part = History(start=lab.history.start)
    part.rows = [_dispatcher_gate(r) for r in lab.history.rows[start:end]]
    return part


def _dispatcher_gate(row: dict[str, Any]) -> dict[str, Any]:
    """A gate at a `dispatch.*` probe holds the dispatcher, whose probes carry no actor:
    put its pause and release in the dispatcher's lane instead of an unnamed one."""
    if row["actor"] == "?" and row["op"] == "gate" and " at dispatch." in row["detail"]:
        return {**row, "actor": "dispatcher", "process": "dispatcher"}
    return row


# ------------------------------------------------------------ diagnosis cases (labs.cases)

async def _stage_waiting_dispatched(lab: Lab) -> str:
    """The book's Exercise C: a reminder due tomorrow, dispatched by a real tick — WAITING with
    `dispatched_at` set, its job delayed until tomorrow (D1, D2)."""
    due = datetime.now(UTC) + timedelta(days=1)
    _ticket, task = await lab.create_ticket("Call the supplier back", actor="eve", due_at=due)
    await lab.dispatch()
    return task.id


async def _stage_orphan_job(lab: Lab) -> str:
    """A job of an older run, staged for real: the lab's workers are stopped; worker C,
    started with an export limit of 1, rejects an export of many tickets for good (X1, P8:
    FAILED, its job `<task>-0` failed); the limit is raised (C again, with the product's
    limit), Ben retries (R2: run 1), a tick adds `<task>-1` and C completes it. The failed
    record of run 0 is still in the queue (Q1 keeps failed jobs a week)."""
    task = await lab.request_export({"status": ["OPEN"], "priority": ["LOW"]})
    old_job = task_job_id(task.id, 0)
    await lab.stop_workers()  # only C, with its limit, may take run 0
    await lab.start_worker("C", export_limit=1)
    try:
        with lab.expect_errors(source="worker failed", job_id=old_job):
            await lab.dispatch()
            await lab.wait_for("failed", job_id=old_job, timeout=T)
        await lab.start_worker("C")  # the limit raised: C again, with the product's
        await lab.retry(task.id, user="ben")
        await lab.dispatch()
        await lab.wait_for("completed", job_id=task_job_id(task.id, 1), timeout=T)
    finally:
        await lab.stop_worker("C")
    return task.id


async def _stage_running_unrecovered(lab: Lab) -> str:
    """Chapter 23 §6's warning, staged for real: with an old RUNNING row, check whether the
    scans succeed, rather than only wait two minutes. The lab's workers are stopped;
    worker S claims an export and goes silent after its first read (a gate, left held: the
    lab's close lets it go); its row is aged ten minutes (clock compression, D6). Then the
    dispatcher's own way to Redis is cut (a `RedisProxy`: the workers and the board keep
    theirs), a second export waits to be enqueued, and the product's `DispatchLoop` runs on
    the cut queue: every tick has that add to try, raises, is logged as `dispatch.fault`,
    and never reaches its tail (D8), where the stale recovery is (D6). The loop stops after
    its second fault; the dispatcher's lines are part of the evidence (`log_also`): the
    fault lines cannot name the RUNNING task, since each tick fails on the other row's
    job before it ever looks at RUNNING rows."""
    await lab.stop_workers()
    task = await lab.request_export({"status": ["OPEN"]})  # a first batch to read
    silent = lab.gate("export.after_read", actor="S", when=lambda c: c["task_id"] == task.id)
    await lab.start_worker("S")
    await lab.dispatch()  # the last tick that gets through: it adds the export
    await silent.reached(T)
    await lab.age(task.id, 600)  # S has been silent for ten minutes
    proxy = await faults.RedisProxy.start(lab)
    cut_off = create_task_queue(proxy.settings)  # the dispatcher's own way to Redis ...
    await proxy.cut()  # ... is cut: connection refused
    await lab.request_export({"status": ["PENDING"], "priority": ["LOW"]})  # work for an add
    ticker = Ticker(lab, tick_s=0.2, queue=cut_off)
    ticker.start()
    try:
        await ticker.wait("tick.fault", where=lambda info: info["tick"] >= 2)
    finally:
        await ticker.stop()
        await asyncio.wait_for(cut_off.close(), T)
    return task.id


CASES = {
    "waiting-dispatched": CaseSpec(
        name="waiting-dispatched",
        title="WAITING, dispatched_at set: is it stuck?",
        stage=_stage_waiting_dispatched,
        choices={
            "stuck": "lost by the dispatcher",
            "delayed": "enqueued, waiting for its time",
            "mark-first": "marked, then the add failed",
            "worker-died": "claimed by a worker that died",
            "scan-failing": "no scan reaches it any more",
        },
        cause="delayed", rules=frozenset({"D1", "D2", "D4"}),
        refutes={
            "stuck": "the board shows its job in the queue, under this run's job id and in "
                     "state delayed: nothing was lost",
            "mark-first": "the add did not fail: the job is in the queue. And dispatched_at is "
                          "written only after a successful add (D3)",
            "worker-died": "no worker ever claimed it: the row is WAITING without an "
                           "execution_id, and no log line names the task",
            "scan-failing": "dispatched_at is only moments old: a scan re-checked this very row "
                            "just now",
        },
        why="the scan has no run_at <= now condition, so tomorrow's reminder is enqueued "
            "today as a delayed job; every 30 s a scan re-checks it and only refreshes "
            "dispatched_at while the job is queued (D1, D2, D4). Worry only when the job is "
            "missing and the scans are failing.",
    ),
    "orphan-job": CaseSpec(
        name="orphan-job",
        title="A failed job of a task that is COMPLETED",
        stage=_stage_orphan_job,
        choices={
            "ledger-lies": "the ledger is wrong",
            "old-run": "a leftover of an earlier run",
            "duplicate": "a duplicate of the current run",
            "listener": "the failed listener forgot the ledger",
            "d4-missed": "the dispatcher missed a failure",
        },
        cause="old-run", rules=frozenset({"R2", "R3", "I2", "Q1"}),
        refutes={
            "ledger-lies": "the row holds a CSV, a summary and an expiry, and the log shows "
                           "run 1 completing: the ledger records a finished run",
            "duplicate": "the failed job's id ends in -0, the run before the ledger's run 1; "
                         "a duplicate of run 1 would carry -1",
            "listener": "the failed job belongs to run 0, and run 0 did end FAILED (the log's "
                        "task.error final=true) before run 1 began",
            "d4-missed": "the dispatcher judges the ledger's current run, and run 1's job "
                         "completed; a failed record of an older run is no reason to fail it",
        },
        # The notebook's second case beside the first: its own names (Exercise D).
        answer=("my_cause_d", "my_rule_d"), solution=("solution_cause_d", "solution_rule_d"),
        why="a manual retry opens run + 1, whose job id <task>-1 is new (I2, R2); the "
            "failed record of <task>-0 stays for removeOnFail's week (Q1) and, if it were "
            "ever delivered, P1 would skip the old run (R3). The board calls it an orphan "
            "job: nothing in the ledger's current run points at it.",
    ),
    "running-unrecovered": CaseSpec(
        name="running-unrecovered",
        title="RUNNING for ten minutes, and no recovery",
        stage=_stage_running_unrecovered,
        choices={
            "still-working": "a slow export, still at work",
            "not-due": "recovery is not due yet",
            "taken-over": "another executor took it over",
            "queue-gave-up": "the queue gave up on it",
            "ticks-failing": "no tick reaches its tail",
        },
        cause="ticks-failing", rules=frozenset({"D8", "D6"}),
        refutes={
            "still-working": "its progress is 0 and its updated_at has not moved for ten "
                             "minutes, though every batch an export reads moves it (D6): "
                             "nothing is working on this row",
            "not-due": "the stale-running age is 120 s and this row has been silent for ten "
                       "minutes: any tick that got to its recovery step would have taken it "
                       "back",
            "taken-over": "the log names one claim only, and the row still carries that "
                          "claim's execution_id: nobody took it over",
            "queue-gave-up": "the board shows the job active, not failed; and even a failed "
                             "job leaves a RUNNING row alone until the stale recovery has "
                             "cleared its lease (D4)",
        },
        # The notebook's third case: its own names (Exercise E).
        answer=("my_cause_e", "my_rule_e"), solution=("solution_cause_e", "solution_rule_e"),
        # Every tick since the claim is a dispatch.fault: show the dispatcher's lines too.
        log_also=("dispatch.",),
        why="the stale recovery (D6) is the tail of a tick, and since the claim every tick "
            "raised in its dispatch step (dispatch.fault: this dispatcher cannot reach "
            "Redis), so none got that far (D8). Waiting longer will not help: mend the "
            "scans, and the first tick that gets through puts the row back to WAITING.",
    ),
}
register_cases(CASES)


# ------------------------------------------------------------ §3: the scan's fairness (D1)

async def reminders_due_tomorrow(lab: Lab, n: int) -> list[BackgroundTask]:
    """`n` tickets due tomorrow, each with its REMINDER task (O3), all dispatched by real
    ticks (as delayed jobs, D2) and then aged 31 s or more (clock compression): every one
    of them is due for the 30 s re-check (D1) when the next row arrives. The first is
    aged a second more than the second, and so on, so the scans' order among them is
    fixed (a tick marks its rows with one `now()`: ties)."""
    due = datetime.now(UTC) + timedelta(days=1)
    tasks = [(await lab.create_ticket(f"Follow-up {i}", actor="eve", due_at=due))[1]
             for i in range(1, n + 1)]
    while (await lab.dispatch()).scanned:  # the scan of `dispatch_batch_size` rows each
        pass
    for i, task in enumerate(tasks):
        await lab.age(task.id, 31 + len(tasks) - i)
    return tasks


async def ascending_scan(lab: Lab, names: Names) -> list[str]:
    """Which rows a scan ordered `dispatched_at ASC, run_at ASC` — without `NULLS FIRST` —
    would pick now, by name: the counterfactual of the book's fairness argument (a read,
    nothing enqueued)."""
    async with lab.sessions() as s:
        rows = await statements.run(s, "scan_without_nulls_first", {
            "age_s": float(lab.settings.redispatch_age_s),
            "limit": lab.settings.dispatch_batch_size})
        return [names.of(r.id) for r in rows]
