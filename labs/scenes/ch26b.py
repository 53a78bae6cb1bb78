"""Scene helpers of `notebooks/26b-takeover-race.ipynb` (ch. 26 §4): the learner's fence
and the learner's test, each judged by the real race.

The exercise asks for the condition of A's fenced writes — the `WHERE` every fenced
statement of `teamdesk/tasks/queries.sql` ends with (P3). `where_fence(text)`
(`labs.fences`, beside the old fences) turns the learner's text into a
`teamdesk.tasks.lease.Fence`: each fenced statement runs with its lease condition replaced
by theirs, and a write that matches no row raises `LeaseLost`, as the product's does.
`judge_fence(text)` then runs, in a world of its own:

1. **alone**: one executor with that fence exports — it must complete (a fence that
   refuses the lease holder itself is no fence, it is a wall);
2. **the takeover race** of §4.1–§4.5 with that fence for A only: A frozen after its
   read, the tickets change, B takes over with E2, A comes back late, B finishes — B's
   CSV (the changed titles) must be the one saved.

The book's Exercise A asks for a *test*: `judge_test(test_fn)` runs the learner's async test
twice, each time in a fresh world — against the product, where it must pass, and with the
status-only guard switched on for A (`lab.counterexample("status-only-guard", actor="A")`),
where it must fail: a test that cannot catch the bug is not a test. Each run is bounded (a
test that hangs is reported as hanging, not waited for) and must leave no gate held, pass or
fail (the book: `finally` releases the gates whether the assertions passed or not).
`takeover` is the recipe such a test follows, as the notebook's scenes use it (§4's second
pause).
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labs.exercises import TestRun, Verdict, exercise, failed, passed, run_test
from labs.fences import where_fence
from labs.i18n import say
from labs.races import Takeover
from labs.worlds import fresh_world, own_world, resolved
from teamdesk.db.models import Ticket
from teamdesk.tasks.queue import task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings

T = 8.0  # seconds: the bound on every wait of the judge


@dataclass
class FenceRuns:
    """What the two real runs found out about a fence."""

    alone_completed: bool = False
    #: "B" (the changed titles were saved), "A" (A's stale copy was) or "none".
    saved: str = "none"
    notes: list[str] = field(default_factory=list)

    def verdict(self, where: str) -> Verdict:
        facts = {"where": where, "alone_completed": self.alone_completed, "saved": self.saved}
        if self.alone_completed and self.saved == "B":
            return passed(say("ch26b.fence.holds", "your fence holds: the lease holder "
                              "writes, and after B took over A's late writes matched no row — B's "
                              "CSV was saved (P3, P5)"), *self.notes, **facts)
        if not self.alone_completed:
            return failed(say("ch26b.fence.refuses-holder", "your fence refused the lease "
                              "holder's own writes: an executor alone could not finish its "
                              "export"), *self.notes, **facts)
        if self.saved == "A":
            return failed(say("ch26b.fence.a-saved", "after B took over, A's CSV was saved: A's "
                              "late writes still matched a row"), *self.notes, **facts)
        return failed(say("ch26b.fence.none-saved", "after B took over, nobody's CSV was saved: "
                          "A's late writes still matched a row"), *self.notes, **facts)


async def _alone(lab: Lab, verdict: FenceRuns) -> None:
    task = await lab.request_export({"status": ["OPEN"]})
    await lab.start_worker("S", export_batch_size=1000)
    await lab.dispatch()
    done = await lab.wait_for("completed", actor="S", job_id=task_job_id(task.id, 0),
                              timeout=T)
    row = await lab.task(task.id)
    verdict.alone_completed = row.status.value == "COMPLETED"
    verdict.notes.append(say("ch26b.fence.alone", "alone: {result}", result=done["result"]))
    await lab.stop_worker("S")


async def _retitle_high(lab: Lab, prefix: str) -> None:
    """The HIGH tickets' titles change (`prefix` + title): a frozen A's copy is stale."""
    from sqlalchemy import update

    async with lab.sessions() as s, s.begin():
        await s.execute(update(Ticket).where(Ticket.team_id == lab.team,
                                             Ticket.priority == "HIGH")
                        .values(title=prefix + Ticket.title))


async def _saved_titles(lab: Lab, task_id: str) -> list[str]:
    """The titles in the CSV the task's ledger row saved."""
    row = await lab.task(task_id)
    return [r["title"] for r in csv.DictReader(io.StringIO(row.result_csv or ""))]


async def _race(lab: Lab, verdict: FenceRuns) -> None:
    """§4.1–§4.5 with the learner's fence for A (`labs.races.Takeover`): A frozen after its
    read, the HIGH tickets retitled, B takes over, A comes back late, B finishes."""
    task = await lab.request_export({"priority": ["HIGH"]})
    async with Takeover(lab, task.id, timeout=T) as race:
        await race.a_claims_and_freezes()
        await _retitle_high(lab, "B-era: ")
        await race.b_takes_over()
        # With a loose fence B's writes may be refused too: both executors' errors are part
        # of what this run shows, not failures of the lab.
        with lab.expect_errors(actor="A"), lab.expect_errors(actor="B"):
            await race.a_returns_late()
            done = await race.b_finishes()
    verdict.notes.append(say("ch26b.fence.race", "race: B says {result!r}", result=done["result"]))
    titles = await _saved_titles(lab, task.id)
    if titles:
        verdict.saved = "B" if all(t.startswith("B-era: ") for t in titles) else "A"


@exercise("26b.fence", answer="my_where", solution="solution_where", wrong={"a wall": "false"})
async def judge_fence(where: Any, *, settings: Settings | None = None) -> Verdict:
    """Run the two real runs of the module docstring with `where` as A's fence, in a lab
    world of its own (P3, P5)."""
    try:
        fence = where_fence(where)
    except ValueError as err:
        return failed(str(err))
    runs = FenceRuns()
    async with fresh_world("26b-fence-judge", runs.notes, settings=settings,
                           tickets=40) as lab:
        lab.use_fence(fence, actor="S")
        lab.use_fence(fence, actor="A")
        await _alone(lab, runs)
        if runs.alone_completed:
            await _race(lab, runs)
    return runs.verdict(" ".join(str(where).split()))


# ---------------------------------------------------------------- the recipe, as a scene


async def takeover(lab: Lab, a_point: str, *, a_opts: dict[str, Any]) -> tuple[int, list[str]]:
    """The takeover race of §4.1–§4.7 as one run (`labs.races.Takeover`), A frozen at
    `a_point` (P2, P3, P5, P6): A claims and freezes; the HIGH tickets are retitled
    `new: …`; B takes over (a real `stalled`) and is held after its claim; A comes back
    late and the row must still be B's snapshot, with no 100 reported; B finishes and its
    CSV is the one saved; a late duplicate is skipped (P1). Returns (rows B saved, A's
    writes that failed on the lease). The gates are released whatever happened."""
    from labs import tables

    t = await lab.request_export({"priority": ["HIGH"]})
    async with Takeover(lab, t.id, a_point=a_point, a_opts=a_opts, timeout=T) as race:
        a_ctx = await race.a_claims_and_freezes()
        await _retitle_high(lab, "new: ")           # A's copy is now out of date
        b_ctx = await race.b_takes_over()
        before = await tables.row(lab, t.id)
        assert before["execution_id"] == b_ctx["execution_id"] != a_ctx["execution_id"]
        await race.a_returns_late()                  # the queue's lock is B's now
        assert await tables.row(lab, t.id) == before
        assert (await lab.job(t.id)).progress != 100
        await race.b_finishes()
    saved = await _saved_titles(lab, t.id)
    assert (await lab.task(t.id)).status.value == "COMPLETED" and saved
    assert all(x.startswith("new: ") for x in saved)
    rerun = await lab.enqueue(t.id, jobId=f"{race.job_id}-again")
    late = await lab.wait_for("completed", job_id=rerun.id, timeout=T)
    assert late["result"].startswith("skipped")
    return len(saved), [r["op"] for r in lab.history.of(actor="A", type="fail", task_id=t.id)]


def plot_title() -> str:
    """The title of §4.6's swimlane plot, in the edition's words."""
    return say("ch26b.plot.title", "ch. 26 §4 takeover race: A (E1) frozen, B (E2) takes over")


def story_lines() -> dict[str, str]:
    """§4.6's story of the race as lines, each in the edition's words; the notebook pairs
    every key with the history row it must match, in order (P2, P3, P6). Actors, ops and
    lease names stay as the history writes them."""
    return {
        "a-claims": say("ch26b.story.a-claims", "A claims the task"),
        "a-frozen": say("ch26b.story.a-frozen", "A is frozen after its read"),
        "b-sees-stalled": say("ch26b.story.b-sees-stalled", "B sees the stalled job"),
        "b-claims": say("ch26b.story.b-claims", "B claims the task"),
        "a-wakes": say("ch26b.story.a-wakes", "A wakes up"),
        "a-progress-0": say("ch26b.story.a-progress-0", "A's progress write: 0 rows"),
        "b-result-1": say("ch26b.story.b-result-1", "B's result write: 1 row"),
        "queue-completes-b": say("ch26b.story.queue-completes-b",
                                 "the queue completes B's job"),
    }


# ---------------------------------------------------------------- Exercise A: the learner's test

#: A learner's test: an async function of one lab world.
LabTest = Callable[["Lab"], Awaitable[Any]]
#: The two worlds a test is run in: (label, counterexample switched on for A or None).
WORLDS = (("the product", None), ("the status-only guard for A", "status-only-guard"))
#: Seconds one run of a learner's test may take before it is reported as hanging.
BOUND = 30.0


def _worlds_shown() -> dict[str, str]:
    """The worlds' labels in the edition's words (shown, not compared)."""
    return {"the product": say("ch26b.world.product", "the product"),
            "the status-only guard for A": say("ch26b.world.guard", "the status-only guard for A")}


def _test_verdict(product: TestRun, guard: TestRun) -> Verdict:
    """Exercise A's verdict: it holds when the test passes on the product, fails by an
    assertion on the status-only guard, and releases its gates both times."""
    runs = (str(product), str(guard))
    facts = {"product": product, "guard": guard}
    if product.outcome != "passed":
        return failed(say("ch26b.test.fails-on-product",
                          "on the product your test does not pass: a "
                          "test must pass where the rule holds"),
                      *runs, **facts)
    if guard.outcome == "passed":
        return failed(say("ch26b.test.passes-on-guard", "your test passes on the status-only guard "
                          "too: a test that cannot catch the bug is not a test"),
                      *runs, **facts)
    if guard.outcome != "failed":
        return failed(say("ch26b.test.guard-not-by-assertion",
                          "on the guard your test did not fail by an "
                          "assertion: it must catch the bug by what it asserts about the row, not "
                          "by a wait that runs out"), *runs, **facts)
    if product.held or guard.held:
        return failed(say("ch26b.test.gate-left-held",
                          "your test left a gate held: release every gate "
                          "in finally"),
                      *runs, **facts)
    return passed(say("ch26b.test.holds", "your test is a test: it passes on the product and "
                      "catches the status-only guard (P3, P5, P6)"), *runs, **facts)


async def _run_once(test_fn: LabTest, world: str, bug: str | None, *, settings: Settings,
                    bound: float) -> TestRun:
    from labs.gates import Gate

    run = TestRun(_worlds_shown()[world])
    async with own_world(f"26b-test-judge-{'guard' if bug else 'product'}",
                         settings=settings, tickets=40) as lab:
        if bug is not None:
            lab.counterexample(bug, actor="A")
        await run_test(run, test_fn(lab), bound=bound)
        run.held = [f"{g.point} for {g.actor or 'anyone'}" for g in lab.gates
                    if isinstance(g, Gate) and not g.is_released]
    return run


@exercise("26b.test", answer="my_test", solution="solution_test")
async def judge_test(test_fn: Any, *, settings: Settings | None = None,
                     bound: float = BOUND) -> Verdict:
    """Exercise A: run `test_fn(lab)` in a fresh world on the product, then in another with
    the status-only guard on for A (P3, P5); each run bounded by `bound` seconds and
    checked for gates left held."""
    if not asyncio.iscoroutinefunction(test_fn):
        return failed(say("ch26b.test.not-async", "pass the test function itself: an `async "
                          "def` taking the lab"))
    settings = await resolved(settings)
    # The two worlds share nothing (own database, own prefix, own gates): run side by side.
    product, guard = await asyncio.gather(*(
        _run_once(test_fn, world, bug, settings=settings, bound=bound) for world, bug in WORLDS))
    return _test_verdict(product, guard)
