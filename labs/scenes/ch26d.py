"""Scene helpers of `notebooks/26d-manual-retry-and-recovery.ipynb` (ch. 26 §6–7).

What a learner need not read to follow the chapter: a ledger row printed field by field,
a run driven to FAILED by three transient errors (the set-up of Exercise B, shown once in
full in §6.1), and Exercise C's rounds — scan, wait, Retry, again — with their judge
(exercise `26d.rounds` of `labs.exercises`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from labs.cases import CaseSpec
from labs.exercises import Verdict, exercise, failed, first_line, passed, stopped_note, whole_number
from labs.faults import final_report_fails
from labs.fences import failed_listener, legacy_failed_listener
from labs.history import History
from labs.i18n import listing, say
from labs.names import Names
from labs.races import Takeover
from labs.tables import idle_s  # noqa: F401 (the notebooks' cells call chNN.idle_s)
from labs.worlds import fresh_world, register_cases, world_context
from teamdesk.tasks.queue import task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings

T = 8  # seconds: the bound on every wait here, as in the notebook

TRANSIENT = OSError("connection reset while reading")


def fields(row: dict[str, Any], columns: list[str], names: Names | None = None
           ) -> dict[str, Any]:
    """`columns` of one ledger row (`labs.tables.row`) as text a person reads: NULL for
    None, "(a time)" for a timestamp (their values vary), enum values, a lease by its name
    (E1, E2 — or "(a lease)"), long text cut at 42 characters. Assert on the row itself."""
    def show(v: Any) -> Any:
        if v is None:
            return "NULL"
        if isinstance(v, datetime):
            return say("ch26d.time", "(a time)")
        if hasattr(v, "value"):
            return v.value
        if isinstance(v, str) and len(v) == 36 and v.count("-") == 4:
            named = names.lease_of(v) if names is not None else v
            return named if named != v else say("ch26d.lease", "(a lease)")
        return v if not isinstance(v, str) or len(v) < 45 else v[:42] + "…"
    return {c: show(row[c]) for c in columns}


async def exhaust_run(lab: Lab, task_id: str, run: int = 0) -> None:
    """Dispatch `task_id` and let every attempt of `run` meet a transient read error until
    the queue's budget is used up: the processor writes FAILED with its lease (P7, Q1).
    The three expected worker failures are acknowledged. Needs a started worker."""
    lab.fault("export.after_read", TRANSIENT, times=3,
              when=lambda ctx: ctx["task_id"] == task_id)
    await lab.dispatch()
    ended = await lab.done_with(task_job_id(task_id, run), T)
    # done_with also returns on `completed`: a fault that missed must not pass quietly.
    assert ended["kind"] == "failed", f"run {run} of {task_id} was not exhausted: {ended}"


Round = tuple[str, int, int, str]  # (job id, job attemptsMade, ledger attempts, status)


async def one_round(lab: Lab, task_id: str, run: int) -> Round:
    """One dispatcher scan and the round it starts, to its end: FAILED when all three
    attempts meet the fault, COMPLETED otherwise (`Lab.done_with`)."""
    await lab.dispatch()
    await lab.done_with(task_job_id(task_id, run), T)
    r, job = await lab.task(task_id), await lab.job(task_id, run)
    return job.id, job.attemptsMade, r.attempts, r.status.value


async def rounds_with(lab: Lab, fails: int, memo: dict[int, list[Round]]) -> list[Round]:
    """Exercise C: a new export whose reads fail `fails` times in a row, run round after
    round — a scan, and Ben's Retry after each FAILED round (R2), three rounds at most.
    Remembered in `memo` per number, so a check cell run again starts nothing new."""
    if fails not in memo:
        t = await lab.request_export({"priority": ["LOW"], "status": ["PENDING"]}, user="ben")
        lab.fault("export.after_read", TRANSIENT, times=fails,
                  when=lambda ctx: ctx["task_id"] == t.id)
        with lab.expect_errors(source="worker failed", contains="connection reset"):
            rounds = [await one_round(lab, t.id, 0)]
            while rounds[-1][3] == "FAILED" and len(rounds) < 3:
                await lab.retry(t.id, user="ben")
                rounds.append(await one_round(lab, t.id, len(rounds)))
        memo[fails] = rounds
    return memo[fails]


def _round_lines(rounds: list[Round]) -> list[str]:
    """Exercise C's rounds, one line each, then the executions (claims) in all."""
    lines = [say("ch26d.rounds.round", "round {n}: job {job}, attemptsMade {made}, ledger "
                 "attempts {attempts}, {status}", n=n, job=jid, made=made, attempts=attempts,
                 status=status)
             for n, (jid, made, attempts, status) in enumerate(rounds, 1)]
    lines.append(say("ch26d.rounds.claims-in-all", "executions (claims) in all: {count}",
                     count=sum(r[1] for r in rounds)))
    return lines


async def _lab_with_worker(lab: Lab) -> dict[str, Any]:
    """Exercise C's context outside the notebook: the lab with worker W started (as the
    cell before the exercise starts it) and a memo of its own."""
    await lab.start_worker("W")
    return {"lab": lab, "memo": {}}


@exercise("26d.rounds", answer="my_fails", solution="solution_fails",
          context=world_context("26d-rounds-judge", _lab_with_worker, backoff_delay_ms=30),
          wrong={"every read fails in round 1 only": 2, "round 2 completes": 3,
                 "out of range": 9})
async def judge_rounds(fails: Any, *, lab: Lab, memo: dict[int, list[Round]] | None = None
                       ) -> Verdict:
    """Exercise C: a new export whose first `fails` reads fail, run round after round in
    `lab` (`rounds_with`: a scan, Ben's Retry after each FAILED round); it holds when the
    task completed in its third round — so it ran more than three times: attempts=3 is a
    per-run budget, and Retry grants a new one (I3, Q1, R2). `memo` keeps the rounds per
    N, so a check cell run again starts nothing new."""
    fails = whole_number(fails)
    if fails is None or not 0 <= fails <= 8:
        return failed(say("ch26d.rounds.range", "my_fails is how many reads in a row fail: an "
                          "int from 0 to 8"))
    try:
        rounds = await rounds_with(lab, fails, memo if memo is not None else {})
    except (AssertionError, TimeoutError) as err:  # a bounded wait ran out
        return failed(say("ch26d.rounds.no-run", "the rounds did not finish:"),
                      stopped_note(err))
    statuses = [r[3] for r in rounds]
    facts = {"rounds": rounds, "executions": sum(r[1] for r in rounds)}
    notes = _round_lines(rounds)
    if statuses == ["FAILED", "FAILED", "COMPLETED"]:
        return passed(say("ch26d.third.holds", "the task needed three rounds and ran more than "
                          "three times: attempts=3 is a per-run budget, and Retry grants a new "
                          "one (I3, Q1, R2)."), *notes, **facts)
    return failed(say("ch26d.rounds.not-third", "the task ended in round {n}, not in the "
                      "third: find an N that needs three rounds", n=len(rounds)),
                  *notes, **facts)


# ---------------------------------------------------------------- the late failed callback

class LateCallback:
    """ch. 26 §7's retired `failed` callback, live on one worker of this lab: the same
    listener `labs.chaos` runs in its counterexample worker processes
    (`labs.fences.legacy_failed_listener`, contract W2 broken on purpose).
    When the queue gives up on a job it sets the task FAILED by `task_id + run`, with no
    lease. Added with the worker's own `on("failed", …)` beside the product's listeners,
    on this worker only; the product is not changed. Its write is held until `release()`
    — the book's *late* callback — and lands in the lab's history (lane "old callback"),
    so the swimlane shows it after the new claim."""

    def __init__(self, lab: Lab, actor: str, body: Callback | None = None) -> None:
        worker = lab.workers[actor]
        self.lab, self.actor = lab, actor
        self._go = asyncio.Event()
        self._landed = asyncio.Event()
        #: Each write as it landed: task_id, run, last_error, rows (the rows it changed);
        #: for a `body` of one's own: task_id, run, error (what the body raised, or None).
        self.writes: list[dict[str, Any]] = []
        assert worker.ctx.ledger is not None
        if body is None:
            listener = legacy_failed_listener(worker.ctx.ledger, hold=self._go.wait,
                                              on_write=self._landed_write)
        else:
            listener = _own_listener(worker.ctx.ledger, body, hold=self._go.wait,
                                     on_done=self._landed_own)
        worker.worker.on("failed", listener)
        lab.add_cleanup(self._go.set)  # a held write is let go (and lands) before the drop

    def release(self) -> None:
        """Let the held write go (the callback arrives now)."""
        self._go.set()

    async def landed(self, timeout: float = T) -> dict[str, Any]:
        """The write, once it landed (bounded)."""
        await asyncio.wait_for(self._landed.wait(), timeout)
        return self.writes[-1]

    def _landed_write(self, write: dict[str, Any]) -> None:
        self.writes.append(write)
        self.lab.history.add(actor="old callback", type="ok" if write["rows"] else "info",
                             op="failed callback", task_id=write["task_id"], run=write["run"],
                             detail=say("ch26d.callback.wrote", "FAILED by task_id + run, no "
                                        "lease: {rows} row", rows=write["rows"]))
        self._landed.set()

    def _landed_own(self, done: dict[str, Any]) -> None:
        self.writes.append(done)
        self._landed.set()


#: A `failed` callback of one's own (Exercise F): `body(conn, event)` on a connection of
#: its own, `event` what the queue's failed event carries — task_id, run, error,
#: exhausted; no execution_id (W2).
Callback = Callable[[Any, dict[str, Any]], Awaitable[None]]


def _own_listener(ledger: Any, body: Callback, *, hold: Callable[[], Awaitable[Any]],
                  on_done: Callable[[dict[str, Any]], None]) -> Any:
    """A `failed` listener (`labs.fences.failed_listener`) that runs `body`; what `body`
    raised is recorded, never raised into the worker."""

    async def act(conn: Any, event: dict[str, Any]) -> dict[str, Any]:
        raised = None
        try:
            await body(conn, dict(event))
        except Exception as e:  # the learner's code: a step of learning, not a crash
            raised = first_line(e)
        return {"task_id": event["task_id"], "run": event["run"], "error": raised}

    return failed_listener(ledger, act, hold=hold, on_done=on_done)


def task_history(lab: Lab, task_id: str) -> History:
    """The lab's history rows of one task only (for a swimlane of one scene)."""
    h = History(lab.history.start)
    h.rows = [r for r in lab.history.rows if r["task_id"] == task_id]
    return h


async def _a_fails(lab: Lab, filters: dict[str, Any], *, legacy: bool,
                   body: Callback | None = None) -> tuple[str, LateCallback | None]:
    """The first half of `late_failure`: up to the two scans that re-add run 0."""
    await lab.stop_worker("A")
    await lab.stop_worker("B")
    task = await lab.request_export(filters, user="ben")
    job_id = task_job_id(task.id, 0)

    def mine(ctx: dict[str, Any]) -> bool:
        return ctx["task_id"] == task.id

    lab.fault("export.after_read", OSError("read failed"), actor="A", when=mine)
    lab.fault("error.before_write", ConnectionError("ledger briefly unreachable"), actor="A",
              when=mine)
    with lab.expect_errors(source="worker failed", job_id=job_id):
        await lab.start_worker("A")
        late = LateCallback(lab, "A", body) if legacy or body is not None else None
        await lab.enqueue(task.id, attempts=1)
        await lab.wait_for("failed", actor="A", job_id=job_id, timeout=T)
    assert await lab.queue.remove(job_id) == 1  # record loss
    await lab.stop_worker("A")
    await lab.age(task.id, 121)
    await lab.dispatch()  # D6: back to WAITING
    await lab.dispatch()  # D4: no job: added again
    return task.id, late


async def late_failure(lab: Lab, *, legacy: bool, filters: dict[str, Any]
                       ) -> tuple[str, Any, dict[str, Any], LateCallback | None]:
    """The book's §7 test 2 up to B's claim, in one call: a new export; A's read fails and
    its error report fails too, so the queue (attempts = 1) fails the job while the ledger
    is RUNNING under A's lease; the record is lost, A's process goes, two scans recover
    and re-add run 0 (D6, D4), and B claims — held at `claim.after`. Returns the task id,
    B's gate, its context (B's `execution_id`) and, when `legacy`, the retired listener A
    carried (`LateCallback`, not released yet). Workers A and B of an earlier scene are
    stopped first, so A takes the job."""
    task_id, late = await _a_fails(lab, filters, legacy=legacy)
    claim_b = lab.gate("claim.after", actor="B", when=lambda c: c["task_id"] == task_id)
    await lab.start_worker("B")
    b = await claim_b.reached(T)
    return task_id, claim_b, b, late


# ---------------------------------------------------------------- diagnosis cases (§7)
# Each stage runs the real system into the case's state (workers, gates, faults, the
# dispatcher; never a hand-written ledger row) and returns the task id. A case starts
# from a quiet world: the lab's running workers are stopped first, so only the case's
# own executors take its job; it leaves none of them running but the hung one of
# "running-long" (held at its gate until a later case lets it go, or the lab closes).
# The notebook names each case's answer by its letter (my_cause_a, solution_rule_c …):
# `answer` and `solution` tell `check("case.<name>", …)` and the suite those names.

async def _quiet(lab: Lab) -> None:
    """Stop the lab's workers; an executor a gate still holds (a case's frozen one) is let
    go first, so stopping its worker does not wait for it."""
    from labs.gates import Gate

    for g in list(lab.crew.gates):
        if isinstance(g, Gate) and g.is_reached and not g.is_released:
            g.close()
    await lab.stop_workers()


async def _stage_fault_a(lab: Lab) -> str:
    """Fault A, the takeover race (`labs.races.Takeover`): A (1 s lock, no renewal) freezes
    after its read; B's stall check takes the job over and claims E2; A comes back, its
    progress write matches 0 rows (LeaseLost) and it returns quietly, without reporting
    100; B completes (P3, P6)."""
    from labs.lab import STUCK

    await _quiet(lab)
    task = await lab.request_export({"status": ["OPEN"], "priority": ["NORMAL"]}, user="ben")
    async with Takeover(lab, task.id, deliver="dispatch", timeout=T,
                        a_opts={**STUCK, "stalled_interval_ms": 3_600_000}) as race:
        await race.a_claims_and_freezes()
        await race.b_takes_over()
        await race.a_returns_late()
        await race.b_finishes()
    await _quiet(lab)
    return task.id


async def _stage_fault_b(lab: Lab) -> str:
    """Fault B, staged as 26a's contrast stages it (`labs.faults.final_report_fails`): the
    export's result UPDATE commits, then the last report to the queue,
    `update_progress(100)`, fails; the worker is W. Here it is evidence to diagnose."""
    await _quiet(lab)
    staged = await final_report_fails(lab, {"status": ["OPEN"], "priority": ["HIGH"]},
                                      timeout=T)
    # P9: the job completes; had it not, this would be other evidence under the same answer.
    assert staged.ended["kind"] == "completed", staged.ended
    await _quiet(lab)
    return staged.task_id


async def _stage_running_long(lab: Lab) -> str:
    """RUNNING far beyond the lock: A hangs after its first read (held at a gate; its
    process is alive and still renews the queue's lock, so the queue says active); its
    row looks ten minutes old (the clock compressed, D6); and the dispatcher's scan fails
    before it reaches the recovery (a Redis add error on another task ends the round,
    D8). So nothing has recovered it: that needs the 2-minute threshold *and* a scan that
    gets that far. A stays held until a later case, a scan and the lab's close."""
    await _quiet(lab)
    task = await lab.request_export({"status": ["CLOSED"], "priority": ["LOW"]}, user="ben")
    frozen = lab.gate("export.after_read", actor="A", when=lambda c: c["task_id"] == task.id)
    await lab.start_worker("A")
    await lab.dispatch()
    await frozen.reached(T)
    await lab.age(task.id, 600)
    other = await lab.request_export({"status": ["OPEN"], "priority": ["LOW"]}, user="ben")
    lab.fault("dispatch.before_add", ConnectionError("Redis unreachable"),
              when=lambda c: c["task_id"] == other.id)
    try:
        await lab.dispatch()
    except ConnectionError:
        pass  # D8: the round ended before the recovery step
    return task.id


CASES = {
    "fault-a": CaseSpec(
        name="fault-a",
        answer=("my_cause_a", "my_rule_a"),
        solution=("solution_cause_a", "solution_rule_a"),
        title="{book}: the old executor returned, but never reported 100",
        book="Fault A",
        stage=_stage_fault_a,
        choices={
            "takeover": "taken over by a newer claim",
            "new-run-failed": "the new run failed",
            "redis-lost": "Redis lost the report",
            "crashed": "the old executor crashed",
            "old-run": "a delivery of an older run",
        },
        cause="takeover",
        refutes={
            "new-run-failed": "nothing failed: the row is COMPLETED with a result, and the log "
                              "shows B's task.completed",
            "redis-lost": "the result is in the ledger, not in Redis: COMPLETED at 100 with its "
                          "CSV, so there is nothing to run again",
            "crashed": "A did not crash: its last line is task.lease_lost during progress, "
                       "right after B's claim — its write matched no row",
            "old-run": "every line is of run 0: A and B claimed the same run, one after the "
                       "other",
        },
        rules=frozenset({"P3", "P6", "P2"}),
        why="the lease decides who may write: E1's progress write matched nothing, so A "
            "raised LeaseLost and returned without failing the task or reporting 100 (P3, "
            "P6); B's run is the one that completed. Never write E1 back.",
    ),
    "fault-b": CaseSpec(
        name="fault-b",
        answer=("my_cause_b", "my_rule_b"),
        solution=("solution_cause_b", "solution_rule_b"),
        title="{book}: the report to the queue raised an error, yet the page says COMPLETED",
        book="Fault B",
        stage=_stage_fault_b,
        choices={
            "report-failed": "only the final report failed",
            "partial-csv": "a partial CSV was saved",
            "overwritten": "a newer execution overwrote it",
            "needs-retry": "the run failed; it needs a Retry",
            "dispatcher": "the dispatcher completed it",
        },
        cause="report-failed",
        refutes={
            "partial-csv": "a result is written once, with its summary and expiry, by the "
                           "completion UPDATE (P5): there is no half-written CSV to save",
            "overwritten": "there was one execution only: the log shows a single claim, by W, "
                           "and that same execution completed",
            "needs-retry": "nothing says the run failed: the row is COMPLETED with a CSV and an "
                           "expiry, and the job is completed too; only its progress is behind",
            "dispatcher": "the task.completed line is the worker's; the dispatcher never writes "
                          "COMPLETED, it only re-adds or fails a run",
        },
        rules=frozenset({"P9", "P5"}),
        why="look at result_csv, the summary and the expiry: the completion UPDATE "
            "committed them (P5); the error after it met a COMPLETED row, so the error "
            "path matched 0 rows and returned (P9). The queue's progress is simply behind.",
    ),
    "running-long": CaseSpec(
        name="running-long",
        answer=("my_cause_c", "my_rule_c"),
        solution=("solution_cause_c", "solution_rule_c"),
        title="A task RUNNING far beyond its lock",
        stage=_stage_running_long,
        choices={
            "frozen-no-scan": "a dead executor, not recovered yet",
            "slow-export": "a slow but live export",
            "newer-lease": "a newer execution at work",
            "listener-will-fail-it": "the failed listener will fail it",
            "needs-retry": "only a manual Retry can move it",
        },
        cause="frozen-no-scan",
        refutes={
            "slow-export": "a live export moves its row batch by batch; this one's progress is "
                           "0 and its updated_at has not moved for ten minutes",
            "newer-lease": "there is one claim only, A's, and the row's execution_id is A's",
            "listener-will-fail-it": "the queue has not failed the job — it is still active — "
                                     "and the failed listener only logs, it never writes the "
                                     "ledger (W2)",
            "needs-retry": "Retry is for a FAILED task; this one is RUNNING, and the "
                           "dispatcher's stale recovery is there to bring it back (D6)",
        },
        rules=frozenset({"D6", "W3", "D8"}),
        why="updated_at has not moved for ten minutes, so nothing is advancing it; the "
            "queue's active says nothing about progress. Recovery is the dispatcher's: "
            "after 120 s without progress, and only in a scan that reaches it (D6, W3) — "
            "this one failed on another task first (D8).",
    ),
}
register_cases(CASES)


# ---------------------------------------------------------------- Exercise F: the callback

#: Exercise F's two scenes: when the late callback lands.
CALLBACK_SCENES = ("after B's claim", "before any claim")


def _scenes_shown() -> dict[str, str]:
    """The two scenes in the edition's words (what a verdict prints)."""
    return {"after B's claim": say("ch26d.scene.after-claim", "after B's claim"),
            "before any claim": say("ch26d.scene.before-claim", "before any claim")}


def _callback_verdict(scenes: dict[str, tuple[str, str, str | None]], notes: list[str]
                      ) -> Verdict:
    """Exercise F's verdict from what the two scenes said: scene → (how the ledger ended,
    B's result, what the callback raised or None)."""
    lines, shown = [], _scenes_shown()
    for name, (status, result, raised) in scenes.items():
        extra = (say("ch26d.callback.raised", ", your callback raised {raised}", raised=raised)
                 if raised else "")
        lines.append(say("ch26d.callback.landed", "landed {scene}: the ledger ends {status}, B "
                         "said {result!r}{extra}", scene=shown.get(name, name), status=status,
                         result=result, extra=extra))
    lines += notes
    facts = {"scenes": dict(scenes)}
    if any(raised for _, _, raised in scenes.values()):
        return failed(say("ch26d.callback.crashed", "your callback raised an error "
                          "(below): a listener must not crash"), *lines, **facts)
    broken = [name for name, (status, _, _) in scenes.items() if status != "COMPLETED"]
    if broken or len(scenes) != len(CALLBACK_SCENES):
        where = (listing([shown.get(b, b) for b in broken], conjunction=True)
                 or say("ch26d.callback.before-end", "before the end"))
        return failed(say("ch26d.callback.broke", "your callback failed a newer execution's "
                          "run: landing {where}", where=where),
                      *lines, **facts)
    return passed(say("ch26d.callback.passed", "your callback never failed a newer execution: "
                      "in both scenes B's run completed (W2, W3)"),
                  *lines, **facts)


async def _callback_scene(lab: Lab, body: Callback, scene: str,
                          scenes: dict[str, tuple[str, str, str | None]]) -> None:
    task_id, late = await _a_fails(lab, {"priority": ["HIGH"]}, legacy=False, body=body)
    assert late is not None
    job_id = task_job_id(task_id, 0)
    if scene == CALLBACK_SCENES[0]:
        claim_b = lab.gate("claim.after", actor="B", when=lambda c: c["task_id"] == task_id)
        await lab.start_worker("B")
        await claim_b.reached(T)
        late.release()
        landed = await late.landed(T)
        claim_b.release()
    else:
        late.release()
        landed = await late.landed(T)
        await lab.start_worker("B")
    done = await lab.wait_for("completed", actor="B", job_id=job_id, timeout=T)
    status = (await lab.task(task_id)).status.value
    scenes[scene] = (status, str(done["result"]), landed["error"])


# The plausible wrong callbacks (a look-up of the current execution_id, the dispatcher's
# own condition) are SQL, which lives outside the harness's Python: tests/labs keeps them.
@exercise("26d.callback", answer="my_on_failed", solution="solution_on_failed")
async def judge_callback(body: Any, *, settings: Settings | None = None) -> Verdict:
    """Exercise F: run `body` as A's `failed` callback in a lab world of its own, in the
    book's §7 test 2 (A fails, the record is lost, two scans re-add run 0; `_a_fails`),
    landing late twice: after B has claimed E2, and after the re-add but before any claim.
    A callback that never fails a newer execution lets B complete both (W2, W3)."""
    import inspect

    if not inspect.iscoroutinefunction(body):
        return failed(say("ch26d.callback.not-async", "my_on_failed must be an async function: "
                          "async def my_on_failed(conn, event): …"))
    scenes: dict[str, tuple[str, str, str | None]] = {}
    notes: list[str] = []
    async with fresh_world("26d-callback-judge", notes, settings=settings) as lab:
        with lab.expect_errors(source="worker failed"):  # A's job fails on purpose, each scene
            for scene in CALLBACK_SCENES:
                await _callback_scene(lab, body, scene, scenes)
    return _callback_verdict(scenes, notes)
