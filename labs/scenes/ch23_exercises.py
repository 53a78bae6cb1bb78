"""Chapter 23's two written exercises and their judges, beside the chapter's scenes
(`labs.scenes.ch23`, which re-exports what the notebook calls):

- Exercise A (`judge_order`): the learner's two steps for one WAITING row, run with the
  product's own add and mark (`Steps`) through a calm tick and a real Redis outage (D3).
- Exercise B (`judge_recovery_test`): the learner's strengthened "dispatch failed, then
  recovered" test, run twice, each time in a world with its own Redis: it must pass with
  the product's dispatcher and fail with one that marks first (`MarkFirst`; O1, D3, D8).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labs import private_redis
from labs.exercises import TestRun, Verdict, exercise, failed, passed, run_test
from labs.i18n import say
from labs.worlds import fresh_world, own_world, resolved
from teamdesk.tasks import dispatcher
from teamdesk.tasks.ledger import Ledger

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings


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

    def __init__(self, queue: Any, settings: Settings, conn: Any) -> None:
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
    the note of a run that ended early (`labs.worlds.fresh_world`)."""

    calm: list[str] = field(default_factory=list)
    storm: list[str] = field(default_factory=list)
    calm_ok: bool = False
    storm_ok: bool = False
    lost: bool = False
    stopped: list[str] = field(default_factory=list)

    def verdict(self) -> Verdict:
        notes = [*(say("ch23.order.calm-note", "Redis up: {note}", note=s) for s in self.calm),
                 *(say("ch23.order.storm-note",
                       "Redis stopped during your steps, then back: {note}",
                       note=s) for s in self.storm),
                 *self.stopped]
        facts = {"calm": list(self.calm), "storm": list(self.storm), "calm_ok": self.calm_ok,
                 "storm_ok": self.storm_ok, "lost": self.lost}
        if self.calm_ok and self.storm_ok:
            return passed(say("ch23.order.holds", "Your order holds: enqueued exactly once "
                              "and completed with Redis up; with Redis down nothing was lost and "
                              "the next tick after recovery took the row (D2, D3, D8)."),
                          *notes, **facts)
        return failed(say("ch23.order.not-yet", "Not yet:"), *notes, **facts)


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


async def _ran(lab: Lab, task_id: str) -> tuple[str, int]:
    """A worker J runs the task's job until it completed (bounded): the task's status
    then, and how many times an execution exported it."""
    await lab.start_worker("J")
    try:
        await lab.wait_for("completed", task_id=task_id, timeout=T)
    finally:
        await lab.stop_worker("J")
    runs = sum(1 for e in lab.recorder.events if e["kind"] == "completed"
               and e.get("task_id") == task_id and "exported" in str(e.get("result")))
    return (await lab.task(task_id)).status.value, runs


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
async def judge_order(fn: Any, *, settings: Settings | None = None) -> Verdict:
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
        return failed(say("ch23.order.not-async", "write it as `async def my_dispatch_one(row, "
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
        note(say("ch23.calm.raised", "your steps raised {error} although Redis was up",
                 error=error))
    if job is None:
        note(say("ch23.calm.no-job", "no job in the queue: the row was never enqueued (D2)"))
    if row.dispatched_at is None:
        note(say("ch23.calm.unmarked", "dispatched_at was not marked: every scan takes "
                 "the row again as never dispatched, first in line (D3)"))
    if job is None or error:
        return
    status, runs = await _ran(lab, calm.id)
    note(say("ch23.calm.ran", "one job (<task>-{run}); the worker ran it {runs} time(s); the "
             "task is {status}", run=row.run, runs=runs, status=status))
    found.calm_ok = row.dispatched_at is not None and runs == 1 and status == "COMPLETED"


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
    status, runs = await _ran(lab, storm.id)
    note(say("ch23.storm.ran", "the first tick after recovery enqueued it (added={added}); "
             "the worker ran it {runs} time(s); the task is {status}",
             added=report.added, runs=runs, status=status))
    found.storm_ok = runs == 1 and status == "COMPLETED"


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


#: What a learner's test is handed to tick with: `lab.dispatch` or a `MarkFirst`.
Dispatch = Callable[..., Awaitable[dispatcher.DispatchReport]]
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


async def _run_recovery_test(test_fn: Any, world: str, *, settings: Settings, bound: float
                             ) -> tuple[TestRun, dict[str, bool]]:
    """One run of the learner's test in a world of its own with its own Redis server,
    handed the world's dispatcher; how it ended, and what it practised."""
    run = TestRun(_recovery_world(world))
    async with own_world(f"23-test-judge-{world}", settings=settings, tickets=40,
                         private_redis=True) as lab:
        dispatch = lab.dispatch if world == "product" else MarkFirst(lab)
        await run_test(run, test_fn(lab, dispatch), bound=bound)
        return run, _practised(lab)


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


async def _the_chapters_test(lab: Lab, dispatch: Dispatch) -> None:
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


async def _never_after(lab: Lab, dispatch: Dispatch) -> None:
    """A plausible wrong answer: a real outage and the right check of the row — and nothing
    after Redis is back."""
    x = await lab.request_export({"status": ["OPEN"]})
    async with private_redis.outage(lab):
        with contextlib.suppress(Exception):
            await dispatch()
        during = await lab.task(x.id)
    assert (during.status, during.dispatched_at) == ("WAITING", None)


async def _only_the_ending(lab: Lab, dispatch: Dispatch) -> None:
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
async def judge_recovery_test(test_fn: Any, *, settings: Settings | None = None,
                              bound: float = RECOVERY_BOUND) -> Verdict:
    """Exercise B: run `test_fn(lab, dispatch)` twice, each time in a world of its own with
    its own Redis server (`private_redis`): handed the product's dispatcher
    (`lab.dispatch`), it must pass — and really stop Redis, dispatch again after the
    outage and see the task completed; handed `MarkFirst`, it must fail by an assertion
    (O1, D3, D8). Each run is bounded by `bound` seconds."""
    if not inspect.iscoroutinefunction(test_fn):
        return failed(say("ch23.b.not-async", "write it as `async def my_test(lab, "
                          "dispatch): ...` (the dispatcher under test is awaited)"))
    settings = await resolved(settings)
    # The two worlds share nothing (own database, own prefix, own Redis): side by side.
    (product, practised), (bug, _) = await asyncio.gather(*(
        _run_recovery_test(test_fn, world, settings=settings, bound=bound)
        for world in RECOVERY_WORLDS))
    return _recovery_verdict(product, bug, practised)
