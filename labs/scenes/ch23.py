"""Scene helpers of `23-outbox.ipynb` (chapter 23, the transactional outbox).

What the notebook needs to *look at* a scene — which rows a scan would pick, the outbox
rows of a request as a table, what is left of a request that failed, which tickets an
export should contain — and the machinery of its exercises and scenes, which a learner
need not read to follow the chapter:

- Exercise A's judge (`judge_order`, exercise `23.order` of `labs.exercises`): the learner's
  steps for one WAITING row, run with the product's own add and mark (`Steps`:
  `dispatcher.add_job`, `dispatcher.mark_dispatched`) with Redis up and during a real
  outage of a Redis server of its own (D2, D3, D8);
- Exercise B's judge (`judge_recovery_test`, exercise `23.test`): the learner's test of
  "dispatch failed, then recovered" run twice, each time in a world with its own Redis
  server — handed the product's dispatcher it must pass (having really stopped Redis,
  dispatched again and seen the task completed), handed `MarkFirst` (a tick in Exercise
  A's question order, mark then add) it must fail by an assertion (O1, D3, D8);
- the tick loop of §5 (`Ticker`, the product's `DispatchLoop` with its events recorded,
  D8) and the fairness scene of §3 (`reminders_due_tomorrow`, `ascending_scan`, D1);
- the diagnosis cases `CASES` (`labs.cases`, exercises `case.<name>`): "waiting-dispatched"
  (Exercise C) and "orphan-job" (Exercise D), each staged by the real system;
- `window`: one scene's rows of the lab's history, for its swimlane.

The scenes themselves (the two wrong orders, the gates, the outage) stay in the cells.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import func, select

from labs import private_redis, statements, tables
from labs.cases import CaseSpec
from labs.exercises import TestRun, Verdict, exercise, failed, passed, run_test
from labs.history import History
from labs.i18n import say
from labs.lab import fresh_world
from labs.names import Names
from teamdesk.db.models import BackgroundTask, Priority, Ticket, TicketEvent, TicketStatus
from teamdesk.tasks import dispatcher
from teamdesk.tasks.dispatch_loop import DispatchLoop
from teamdesk.tasks.ledger import QUERIES, Ledger
from teamdesk.tasks.queue import task_job_id

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


# ------------------------------------------------------------ Exercise A: one row's step order

#: What the judge's exports ask for (any filter the demo team has rows for).
ORDER_FILTERS = {"status": ["OPEN"]}
T = 8.0  # seconds: the bound on every wait of the judges and scenes of this module


class Steps:
    """The two steps a dispatcher takes for one WAITING row, handed to a learner's
    function: the product's own calls, not re-implementations.

    - `await steps.add_job(row)` — `teamdesk.tasks.dispatcher.add_job`: the tick's D2 add
      (`add("execute", {taskId, run}, jobId=<id>-<run>, delay)`), bounded; raises when
      Redis is gone (D8);
    - `await steps.mark_dispatched(row)` — `teamdesk.tasks.dispatcher.mark_dispatched`:
      the tick's D3 statement `mark_dispatched` (`dispatched_at = now()` WHERE id, run,
      WAITING); returns how many rows it matched.

    On a failure there is nothing to call: an exception that leaves the function ends the
    tick's round (D8) and leaves the row as it is."""

    def __init__(self, queue: Any, settings: Any, conn: Any) -> None:
        self._queue, self._settings, self._conn = queue, settings, conn

    async def add_job(self, row: Any) -> None:
        await dispatcher.add_job(self._queue, self._settings, row)

    async def mark_dispatched(self, row: Any) -> int:
        return await dispatcher.mark_dispatched(self._conn, [row])


@dataclass
class OrderRuns:
    """What the real runs found out about a learner's step order: with Redis up (`calm`),
    with Redis stopped during the steps (`storm`), and after Redis came back (one real tick
    and a worker). `lost` is the D3 failure: marked dispatched with no job. `stopped` holds
    the note of a run that ended early (`labs.lab.fresh_world`)."""

    calm: list[str] = field(default_factory=list)
    storm: list[str] = field(default_factory=list)
    calm_ok: bool = False
    storm_ok: bool = False
    lost: bool = False
    stopped: list[str] = field(default_factory=list)

    def verdict(self) -> Verdict:
        notes = [*(say("ch23.redis-up", "Redis up: {note}", note=s) for s in self.calm),
                 *(say("ch23.redis-stopped", "Redis stopped during your steps, then back: {note}",
                       note=s) for s in self.storm),
                 *self.stopped]
        facts = {"calm": list(self.calm), "storm": list(self.storm), "calm_ok": self.calm_ok,
                 "storm_ok": self.storm_ok, "lost": self.lost}
        if self.calm_ok and self.storm_ok:
            return passed(say("ch23.your-order-holds", "Your order holds: enqueued exactly once "
                              "and completed with Redis up; with Redis down nothing was lost and "
                              "the next tick after recovery took the row (D2, D3, D8)."),
                          *notes, **facts)
        return failed(say("ch23.not-yet", "Not yet:"), *notes, **facts)


async def _one_row(lab: Lab, conn: Any, task_id: str) -> Any:
    """The row as the product's scan (D1) hands it to a tick."""
    rows = [r for r in await dispatcher.scan(conn, lab.settings) if r.id == task_id]
    if not rows:
        raise AssertionError(f"the scan did not pick {task_id}")
    return rows[0]


async def _run_steps(fn: Any, row: Any, steps: Steps) -> str | None:
    """Run the learner's function for one row; the error's one-line form, or None."""
    try:
        await asyncio.wait_for(fn(row, steps), 2 * T)
    except Exception as err:  # the learner's exception is what a tick would end on (D8)
        return f"{type(err).__name__}"
    return None


async def _completions(lab: Lab, task_id: str) -> int:
    return sum(1 for e in lab.recorder.events if e["kind"] == "completed"
               and e.get("task_id") == task_id and "exported" in str(e.get("result")))


async def _mark_anyway(row: Any, steps: Steps) -> None:
    """A plausible wrong order: add first, but mark in `finally` — the same loss as marking
    first when the add fails (D3)."""
    try:
        await steps.add_job(row)
    finally:
        await steps.mark_dispatched(row)


async def _add_only(row: Any, steps: Steps) -> None:
    """A plausible wrong order: it survives the outage but never marks, so every scan takes
    the row again as never dispatched (D3)."""
    await steps.add_job(row)


@exercise("23.order", answer="my_dispatch_one", solution="solution_dispatch_one",
          wrong={"add, then mark in finally": _mark_anyway, "add, never mark": _add_only})
async def judge_order(fn: Any, *, settings: Any = None) -> Verdict:
    """Run a learner's `async def fn(row, steps)` (the steps of one WAITING row) against
    the real system, in a lab world of its own with its own Redis server:

    1. **Redis up**: a new export, scanned by the product's scan; `fn` runs; its job must
       be in the queue and its row marked (D2, D3); then a real worker completes it, once.
    2. **Redis stopped for real** (`private_redis.outage`) while `fn` runs for a second
       export; then Redis comes back (empty), one real dispatcher tick runs and a worker
       is started. The row must not be lost: a row marked dispatched with no job is
       skipped by the scan for 30 s (D1, D3); a row left unmarked is taken by that tick
       and completed."""
    if not inspect.iscoroutinefunction(fn):
        return failed(say("ch23.write-async-def", "write it as `async def my_dispatch_one(row, "
                          "steps): ...` (the steps are awaited)"))
    runs = OrderRuns()
    async with fresh_world("23-order-judge", runs.stopped, settings=settings, tickets=10,
                           private_redis=True) as lab:
        async with Ledger(lab.settings.database_url).connection() as conn:
            steps = Steps(lab.queue, lab.settings, conn)
            await _calm(lab, conn, fn, steps, runs)
            await _storm(lab, conn, fn, steps, runs)
    return runs.verdict()


async def _calm(lab: Lab, conn: Any, fn: Any, steps: Steps, found: OrderRuns) -> None:
    calm = await lab.request_export(ORDER_FILTERS)
    error = await _run_steps(fn, await _one_row(lab, conn, calm.id), steps)
    row, job = await lab.task(calm.id), await lab.job(calm.id)
    note = found.calm.append
    if error:
        note(say("ch23.your-steps-raised", "your steps raised {error} although Redis was up",
                 error=error))
    if job is None:
        note(say("ch23.no-job-queue", "no job in the queue: the row was never enqueued (D2)"))
    if row.dispatched_at is None:
        note(say("ch23.dispatched-not-marked", "dispatched_at was not marked: every scan takes "
                 "the row again as never dispatched, first in line (D3)"))
    if job is None or error:
        return
    await lab.start_worker("J")
    try:
        await lab.wait_for("completed", task_id=calm.id, timeout=T)
    finally:
        await lab.stop_worker("J")
    done, runs = await lab.task(calm.id), await _completions(lab, calm.id)
    note(say("ch23.calm-ran", "one job (<task>-{run}); the worker ran it {runs} time(s); the "
             "task is {status}", run=row.run, runs=runs, status=done.status.value))
    found.calm_ok = (row.dispatched_at is not None and runs == 1
                     and done.status.value == "COMPLETED")


async def _storm(lab: Lab, conn: Any, fn: Any, steps: Steps, found: OrderRuns) -> None:
    storm = await lab.request_export(ORDER_FILTERS)
    row = await _one_row(lab, conn, storm.id)
    async with private_redis.outage(lab):
        error = await _run_steps(fn, row, steps)
        during = await lab.task(storm.id)
    note = found.storm.append
    outcome = (say("ch23.storm.raised", "raised {error}", error=error) if error
               else say("ch23.storm.returned", "returned"))
    mark = (say("ch23.storm.mark-set", "set") if during.dispatched_at
            else say("ch23.storm.mark-null", "NULL"))
    note(say("ch23.storm.during", "your steps {outcome}; the row: WAITING, dispatched_at "
             "{mark}, no job", outcome=outcome, mark=mark))
    report = await lab.dispatch()  # Redis is back, empty: the first tick after recovery
    job = await lab.job(storm.id)
    if during.dispatched_at is not None and job is None:
        found.lost = True
        note(say("ch23.storm.lost", "LOST: the first tick after recovery scanned {scanned} row(s) "
                 "and skipped it — it says 'checked' with no job behind it, so the scan leaves it "
                 "for 30 s (D1, D3); read as 'sent', never again", scanned=report.scanned))
        return
    if job is None:
        note(say("ch23.storm.not-enqueued", "the first tick after recovery did not enqueue it"))
        return
    await lab.start_worker("J")
    try:
        await lab.wait_for("completed", task_id=storm.id, timeout=T)
    finally:
        await lab.stop_worker("J")
    done, runs = await lab.task(storm.id), await _completions(lab, storm.id)
    note(say("ch23.storm.ran", "the first tick after recovery enqueued it (added={added}); "
             "the worker ran it {runs} time(s); the task is {status}",
             added=report.added, runs=runs, status=done.status.value))
    found.storm_ok = runs == 1 and done.status.value == "COMPLETED"


# ------------------------------------------------------------ Exercise B: the learner's test

async def mark_then_add(row: Any, steps: Steps) -> None:
    """Exercise A's question order, D3 broken: mark the row dispatched, then add its job."""
    await steps.mark_dispatched(row)
    await steps.add_job(row)


class MarkFirst:
    """A dispatcher whose tick marks before it adds: the product's scan (D1), then for each
    row the product's own two steps (`Steps`) in Exercise A's question order
    (`mark_then_add`). Called as `lab.dispatch` is — `await dispatch(queue=None)` returns a
    `DispatchReport`, a failing tick raises — and recorded in the lab's history the same
    way, so Exercise B's judge can hand a learner's test either one. It does not reconcile
    (D4): every scanned row is added, as a row without a job would be."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    async def __call__(self, *, queue: Any = None) -> dispatcher.DispatchReport:
        lab = self.lab

        async def tick() -> dispatcher.DispatchReport:
            async with Ledger(lab.settings.database_url).connection() as conn:
                rows = await dispatcher.scan(conn, lab.settings)
                report = dispatcher.DispatchReport(scanned=len(rows))
                steps = Steps(queue or lab.queue, lab.settings, conn)
                for row in rows:
                    await mark_then_add(row, steps)
                    report.added += 1
            return report

        return await lab.recorded_dispatch(tick, detail="marks first")


#: Exercise B's two dispatchers: the product's (`lab.dispatch`), and one that marks first.
RECOVERY_WORLDS = ("product", "mark-first")
#: Seconds one run of a learner's test may take before it is reported as hanging.
RECOVERY_BOUND = 30.0


def _recovery_world(world: str) -> str:
    """A world's label in the edition's words."""
    if world == "product":
        return say("ch23.b.world.product", "the product's dispatcher")
    return say("ch23.b.world.mark-first", "a dispatcher that marks before it adds")


def _practised(lab: Lab) -> dict[str, bool]:
    """What the learner's test did in the product's world, read from the lab's history: it
    really stopped this world's Redis; after Redis was back a tick added a job; after that
    a worker completed a job."""
    rows = lab.history.rows
    faults = [(i, r["detail"]) for i, r in enumerate(rows) if r["op"] == "fault"]
    stopped = any(d.startswith("redis stopped") for _, d in faults)
    back = max((i for i, d in faults if d.startswith("redis started")), default=len(rows))
    added = next((i for i, r in enumerate(rows) if i > back and r["actor"] == "dispatcher"
                  and r["type"] == "ok" and r["op"] == "dispatch"
                  and (m := re.search(r"\badded=(\d+)", r["detail"])) and int(m[1]) > 0),
                 None)
    completed = added is not None and any(r["type"] == "ok" and r["op"] == "job"
                                          for r in rows[added:])
    return {"redis_stopped": stopped, "redispatched": added is not None,
            "completed": completed}


async def _run_recovery_test(test_fn: Any, world: str, *, settings: Any, bound: float
                             ) -> tuple[TestRun, dict[str, bool]]:
    """One run of the learner's test in a world of its own with its own Redis server,
    handed the world's dispatcher; how it ended, and what it practised."""
    from labs.lab import Lab

    run = TestRun(_recovery_world(world))
    # A name per world: in a kernel, opening a lab closes an open one of the same name.
    lab = await Lab.open(f"23-test-judge-{world}", settings=settings, tickets=40,
                         private_redis=True)
    try:
        dispatch = lab.dispatch if world == "product" else MarkFirst(lab)
        await run_test(run, test_fn(lab, dispatch), bound=bound)
        return run, _practised(lab)
    finally:
        await lab.close(check=False)


def _recovery_verdict(product: TestRun, bug: TestRun, practised: dict[str, bool]) -> Verdict:
    """Exercise B's verdict: the test practises what the chapter's test leaves open (a real
    outage, a tick after the recovery, a completed task) and passes on the product's
    dispatcher, and it fails, by an assertion, on the one that marks first."""
    runs = (str(product), str(bug))
    facts = {"product": product, "mark_first": bug, **practised}
    if product.outcome != "passed":
        return failed(say("ch23.b.product-fails", "with the product's dispatcher your test does "
                          "not pass: a test must pass where the rule holds"), *runs, **facts)
    if not practised["redis_stopped"]:
        return failed(say("ch23.b.never-stopped", "your test never really stopped Redis: the "
                          "chapter's test already fakes a failing add. Stop this world's own "
                          "server: `async with private_redis.outage(lab): ...`"), *runs, **facts)
    if not practised["redispatched"]:
        return failed(say("ch23.b.no-redispatch", "your test ends before the recovery: once Redis "
                          "is back, dispatch again — the first tick after the outage must enqueue "
                          "the task"), *runs, **facts)
    if not practised["completed"]:
        return failed(say("ch23.b.not-completed", "after the recovery no worker completed the "
                          "task: start one and wait (bounded) until the task completes"),
                      *runs, **facts)
    if bug.outcome == "passed":
        return failed(say("ch23.b.passes-mark-first", "your test passes with a dispatcher that "
                          "marks before it adds too: it cannot catch Exercise A's wrong order — "
                          "what must dispatched_at be while the add fails?"), *runs, **facts)
    if bug.outcome != "failed":
        return failed(say("ch23.b.not-by-assertion", "with the dispatcher that marks first your "
                          "test did not fail by an assertion: it must catch the bug by what it "
                          "asserts about the row and the queue, not by a wait that runs out"),
                      *runs, **facts)
    return passed(say("ch23.b.is-a-test", "your test is a test: it really stops Redis, passes with "
                      "the product's dispatcher and catches the one that marks before it adds "
                      "(O1, D3, D8)"), *runs, **facts)


class _Offline:
    """The chapter's stand-in queue: `getJob` finds nothing, `add` fails as an offline Redis."""

    async def getJob(self, job_id: str) -> None:  # bullmq's camelCase API
        return None

    async def add(self, name: str, data: Any, opts: dict[str, Any]) -> Any:
        raise ConnectionError("Redis offline")

    async def remove(self, job_id: str, opts: dict[str, Any] | None = None) -> int:
        return 0


async def _the_chapters_test(lab: Any, dispatch: Any) -> None:
    """A plausible wrong answer: the chapter's test as it stands — the stand-in queue handed
    to the dispatcher; the tick raises and the task is still WAITING."""
    x = await lab.request_export({"status": ["OPEN"]})
    try:
        await dispatch(queue=_Offline())
        raised = False
    except ConnectionError:
        raised = True
    assert raised
    assert (await lab.task(x.id)).status == "WAITING"


async def _never_after(lab: Any, dispatch: Any) -> None:
    """A plausible wrong answer: a real outage and the right check of the row — and nothing
    after Redis is back."""
    x = await lab.request_export({"status": ["OPEN"]})
    async with private_redis.outage(lab):
        with contextlib.suppress(Exception):
            await dispatch()
        during = await lab.task(x.id)
    assert (during.status, during.dispatched_at) == ("WAITING", None)


async def _only_the_ending(lab: Any, dispatch: Any) -> None:
    """A plausible wrong answer: a real outage, a tick after it, a completed task — and no
    look at the row while the add failed: with the dispatcher that marks first, only the
    wait for the completion runs out."""
    x = await lab.request_export({"status": ["OPEN"]})
    async with private_redis.outage(lab):
        with contextlib.suppress(Exception):
            await dispatch()
    await dispatch()
    await lab.start_worker("W")
    await lab.wait_for("completed", task_id=x.id, timeout=3)
    assert (await lab.task(x.id)).status == "COMPLETED"


@exercise("23.test", answer="my_test", solution="solution_test",
          wrong={"the chapter's test as it stands": _the_chapters_test,
                 "nothing after the recovery": _never_after,
                 "no look at the row during the outage": _only_the_ending})
async def judge_recovery_test(test_fn: Any, *, settings: Any = None,
                              bound: float = RECOVERY_BOUND) -> Verdict:
    """Exercise B: run `test_fn(lab, dispatch)` twice, each time in a world of its own with
    its own Redis server (`private_redis`): handed the product's dispatcher
    (`lab.dispatch`), it must pass — and really stop Redis, dispatch again after the
    outage and see the task completed; handed `MarkFirst`, it must fail by an assertion
    (O1, D3, D8). Each run is bounded by `bound` seconds."""
    if not inspect.iscoroutinefunction(test_fn):
        return failed(say("ch23.b.write-async-def", "write it as `async def my_test(lab, "
                          "dispatch): ...` (the dispatcher under test is awaited)"))
    from devkit import services

    settings = await asyncio.to_thread(services.resolve_settings, settings)
    # The two worlds share nothing (own database, own prefix, own Redis): side by side.
    (product, practised), (bug, _) = await asyncio.gather(*(
        _run_recovery_test(test_fn, world, settings=settings, bound=bound)
        for world in RECOVERY_WORLDS))
    return _recovery_verdict(product, bug, practised)


# ------------------------------------------------------------ §5: the tick loop (D8)

class Ticker:
    """The product's `DispatchLoop` ticking a lab's dispatcher (D8), every `tick_s`
    seconds instead of 3 s, with every loop event it reports (`tick.start`, `tick.done`,
    `tick.fault`, `tick.skipped`) kept in `events` and in the lab's history, so a cell can
    wait for one (`await ticker.wait("tick.skipped")`) instead of sleeping. Its ticks run
    as the lab's dispatcher: the lab's gates catch them and its log keeps their lines.
    `lab.close()` stops it."""

    def __init__(self, lab: Lab, *, tick_s: float = 0.2) -> None:
        self.lab = lab
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.running = 0
        #: The most ticks ever running at once (D8: 1).
        self.max_running = 0
        self._changed = asyncio.Event()
        self.loop = DispatchLoop(lab.queue, lab.settings.replace(dispatch_tick_s=tick_s),
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
}


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
