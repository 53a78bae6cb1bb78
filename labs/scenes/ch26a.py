"""Scene helpers of `notebooks/26a-identities-and-retries.ipynb` (ch. 26 §1–3).

§3 follows one failure field by field, choosing `attemptsMade` ourselves: the book does it
with a `FakeJob` in its unit-level tests, and so do we (`teamdesk.testing.FakeJob`). The
processor, the lease and the ledger stay real; only the queue's job object is a stand-in, so
what the cell shows is the product's own classification of each attempt (P4, P7, I3). Its
exercise (`26a.budget`, judged by `judge_budget`) changes the budget the table used: a job
added with two attempts, run for real by a worker, then one dispatcher tick (Q1, P7, D4).
Exercise E (retry or reject) is judged the same way, through the real processor: exercise
`26a.kinds` of `labs.exercises`.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devkit.i18n import columns
from labs import fonts, learn
from labs.exercises import Verdict, exercise, failed, passed, whole_number
from labs.i18n import say
from labs.tables import pad
from labs.worlds import fresh_world, world_context
from teamdesk.tasks.errors import RejectReason, TaskRejected
from teamdesk.tasks.processor import TaskContext, process_task
from teamdesk.tasks.queue import MAX_TASK_ATTEMPTS
from teamdesk.testing import FakeJob

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings


def every_report(value: int) -> bool:
    """`fail_at` for a queue that has lost its connection: every report fails."""
    return True


async def raised_by(call: Awaitable[Any]) -> str:
    """Run one execution; the name of the exception it raised to the queue, "-" for none.
    The notebook shows *which* error reaches the queue (a temporary one is re-raised for
    BullMQ to retry, P7), so any exception is caught and named, not propagated."""
    try:
        await call
    except Exception as err:  # named in the table: that is the point
        return type(err).__name__
    return "-"


async def after_execution(lab: Lab, task_id: str, attempts_made: int, raised: str
                          ) -> dict[str, Any]:
    """One row of §3's table: the ledger row after an execution with `attempts_made`."""
    r = await lab.task(task_id)
    return dict(attemptsMade=attempts_made, attempts=r.attempts,
                final=attempts_made + 1 >= MAX_TASK_ATTEMPTS, status=r.status.value,
                progress=r.progress, lease=r.execution_id, result_csv=r.result_csv,
                raised=raised, last_error=r.last_error)


# ---------------------------------------------------------------- §3's exercise: another budget

#: The attempts a job of §3's exercise is added with: not the queue's default (Q1: 3),
#: and not the processor's own budget (`MAX_TASK_ATTEMPTS`).
JOB_BUDGET = 2
STATUSES = ("WAITING", "RUNNING", "COMPLETED", "FAILED")
T = 8.0  # seconds: the bound on every wait of the judge


@dataclass(frozen=True)
class BudgetRun:
    """What one real run of §3's exercise showed: a new export added with
    `attempts: JOB_BUDGET`, its read failing on every execution, a real worker."""

    #: Executions (claims) of the task until the queue gave up on the job.
    executions: int
    #: The ledger's status and `last_error` right then.
    status: str
    last_error: str | None
    #: The next dispatcher tick's report, and the ledger's status after it (D4).
    tick: str
    after_tick: str


async def budget_run(settings: Settings | None, stopped: list[str]) -> BudgetRun | None:
    """§3's exercise for real, in a world of its own with the lab's short backoff: a new
    export whose read fails on every execution (a fault at `export.after_read`), added
    with `attempts: JOB_BUDGET` in its job options and run by a real worker until the
    queue gives up (`failed`, exhausted); then one dispatcher tick (D4's failed branch).
    None, with a note in `stopped`, when a bounded wait ran out."""
    async with fresh_world("26a-budget-judge", stopped, settings=settings, tickets=40,
                           backoff_delay_ms=30) as lab:
        task = await lab.request_export({"status": ["OPEN"]}, user="ben")
        lab.fault("export.after_read", OSError("connection reset while reading"),
                  times=MAX_TASK_ATTEMPTS + 1, when=lambda ctx: ctx["task_id"] == task.id)
        await lab.start_worker("W")
        await lab.enqueue(task.id, attempts=JOB_BUDGET)
        await lab.wait_for("failed", task_id=task.id, where=lambda e: e["exhausted"],
                           timeout=T)
        row = await lab.task(task.id)
        executions = len(lab.history.of(task_id=task.id, type="ok", op="claim"))
        report = await lab.dispatch()
        return BudgetRun(executions, row.status.value, row.last_error, str(report),
                         (await lab.task(task.id)).status.value)
    return None


def _budget_shown(run: BudgetRun) -> list[str]:
    """What the run showed, one line each."""
    return [say("ch26a.budget.ran", "the queue ran the job {n} time(s) and gave up (its "
                "attempts: {budget}); the ledger then said {status}: {last_error!r}",
                n=run.executions, budget=JOB_BUDGET, status=run.status,
                last_error=run.last_error),
            say("ch26a.budget.tick", "the next dispatcher tick: {report} → {status} (D4)",
                report=run.tick, status=run.after_tick)]


@exercise("26a.budget", answer=("my_executions", "my_status"),
          solution=("solution_executions", "solution_status"),
          wrong={"the table's last row": (3, "FAILED"), "the queue decides": (2, "FAILED")})
async def judge_budget(answer: Any, *, settings: Settings | None = None) -> Verdict:
    """§3's exercise: how many times an export added with `attempts: JOB_BUDGET` runs
    before the queue gives up, and the ledger's status then — compared with a real run
    (`budget_run`). Two budgets meet: the queue's, stamped on the job, decides how often
    the job is delivered (Q1); the processor's, `MAX_TASK_ATTEMPTS`, decides when an
    execution is final (P7)."""
    executions, status = whole_number(answer[0]), answer[1]
    if executions is None or executions < 1:
        return failed(say("ch26a.budget.count", "my_executions is a number of executions: "
                          "an int, 1 or more"))
    if status not in STATUSES:
        return failed(say("ch26a.budget.status", "my_status is one of {statuses}",
                          statuses=", ".join(STATUSES)))
    stopped: list[str] = []
    run = await budget_run(settings, stopped)
    if run is None:
        return failed(say("ch26a.budget.no-run", "the run did not finish:"), *stopped)
    facts = {"run": run, "executions": executions, "status": status}
    notes = []
    if executions != run.executions:
        notes.append(say("ch26a.budget.wrong-count", "✗ {n} execution(s): the queue delivers a "
                         "job as often as the job's own options say (Q1), and this job says "
                         "attempts: {budget}", n=executions, budget=JOB_BUDGET))
    if status != run.status:
        notes.append(say("ch26a.budget.wrong-status", "✗ {status}: after a failed execution "
                         "the processor writes WAITING or FAILED through its lease (P7), FAILED "
                         "only when attemptsMade + 1 reaches its own budget, MAX_TASK_ATTEMPTS "
                         "({max}), which the job's options do not change", status=status,
                         max=MAX_TASK_ATTEMPTS))
    if notes:
        return failed(say("ch26a.budget.not-yet", "not what happened:"), *notes,
                      *_budget_shown(run), **facts)
    return passed(say("ch26a.budget.holds", "two budgets: the queue gave up after the job's "
                      "{budget} attempts, while the processor, counting to {max}, had written "
                      "WAITING — only the dispatcher's next tick ended the task (Q1, P7, D4)",
                      budget=JOB_BUDGET, max=MAX_TASK_ATTEMPTS), *_budget_shown(run), **facts)


def identities(round_1: Any, round_2: Any, job_0: Any, job_1: Any) -> str:
    """§1's table, as text to print: the three identities of one task in its two rounds,
    with what each is (I1, I2, I3)."""
    rows = [
        (say("ch26a.identity.label.task-id", "task id"), round_1.id, round_2.id,
         say("ch26a.identity.task-id", "the ledger row: one for the task's whole life")),
        (say("ch26a.identity.label.run", "run"), round_1.run, round_2.run,
         say("ch26a.identity.run", "the round; the page shows \"round run+1\"")),
        (say("ch26a.identity.label.job-id", "queue job id"), job_0.id, job_1.id,
         say("ch26a.identity.job-id", "task_job_id(id, run): a manual retry opens a new one")),
        (say("ch26a.identity.label.attempts-made", "job attemptsMade"), job_0.attemptsMade,
         job_1.attemptsMade, say("ch26a.identity.attempts-made", "kept by BullMQ, per job")),
        (say("ch26a.identity.label.attempts", "ledger attempts"), round_1.attempts,
         round_2.attempts, say("ch26a.identity.attempts", "attemptsMade + 1 of that job")),
        (say("ch26a.identity.label.status", "status"), round_1.status.value,
         round_2.status.value, ""),
    ]
    # Row labels and round headings are words (the edition's); values stay identifiers.
    wide = max(17, *(columns(name) + 1 for name, *_ in rows))
    lines = [pad("", wide) + pad(say("ch26a.identity.round", "round {n}", n=1), 11)
             + pad(say("ch26a.identity.round", "round {n}", n=2), 11)]
    lines += [f"{pad(name, wide)}{pad(one, 11)}{pad(two, 11)}{note}"
              for name, one, two, note in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- Exercise E: retry or reject

#: Exercise E's situations: what goes wrong during an export, and whether it stays wrong
#: on the next attempt (the judge's world: a passing problem strikes the first attempt
#: only, a lasting one every attempt). What a rejection would say does not matter: a
#: rejection is final whatever its reason (P7, P8).
SITUATIONS: dict[str, tuple[bool, RejectReason]] = {
    "the database connection dropped while a batch was read": (False,
                                                               RejectReason.INVALID_FILTERS),
    "Redis timed out while the progress was reported": (False, RejectReason.INVALID_FILTERS),
    "the export's owner is no longer a member of the team": (True, RejectReason.ACCESS_LOST),
    "the filters name a status that does not exist": (True, RejectReason.INVALID_FILTERS),
}
CHOICES = ("retry", "reject")


def _situations_shown() -> dict[str, str]:
    """The situations in the edition's words (shown beside the learner's choice)."""
    return {
        "the database connection dropped while a batch was read": say(
            "ch26a.situation.connection", "the database connection dropped while a batch was "
            "read"),
        "Redis timed out while the progress was reported": say(
            "ch26a.situation.redis-timeout", "Redis timed out while the progress was reported"),
        "the export's owner is no longer a member of the team": say(
            "ch26a.situation.owner-gone", "the export's owner is no longer a member of the team"),
        "the filters name a status that does not exist": say(
            "ch26a.situation.bad-status", "the filters name a status that does not exist"),
    }


class ScriptedJob(FakeJob):
    """A stand-in job whose first progress report raises `error` (None: nothing goes
    wrong): the exception reaches the processor from inside the executor, as a problem
    met while exporting would."""

    def __init__(self, task_id: str, attempts_made: int, error: BaseException | None) -> None:
        super().__init__(task_id, attempts_made=attempts_made)
        self.error = error

    async def updateProgress(self, value: int) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        await super().updateProgress(value)


def _raised(situation: str, choice: str) -> BaseException:
    """What an executor that chose `choice` raises for `situation`: a temporary error the
    queue retries, or `TaskRejected`, which ends the task (P7)."""
    if choice == "retry":
        return ConnectionError(situation)
    return TaskRejected(SITUATIONS[situation][1], situation)


async def _outcome(lab: Lab, ctx: TaskContext, situation: str, choice: str
                   ) -> tuple[str, int]:
    """A new export executed with the learner's choice for `situation`, attempt after
    attempt as the queue would (attemptsMade 0, 1, 2) while the ledger says WAITING:
    the final status and how many executions it took."""
    stays = SITUATIONS[situation][0]
    task = await lab.request_export({"status": ["OPEN"]}, user="ben")
    status, executions = "WAITING", 0
    for attempts_made in range(MAX_TASK_ATTEMPTS):
        strikes = stays or attempts_made == 0
        job = ScriptedJob(task.id, attempts_made,
                          _raised(situation, choice) if strikes else None)
        await raised_by(process_task(job, None, ctx))
        executions += 1
        status = (await lab.task(task.id)).status.value
        if status != "WAITING":
            break
    return status, executions


async def _lab_and_executor(lab: Lab) -> dict[str, Any]:
    """The exercise's context outside the notebook: a lab with the notebook's short backoff
    (`lab=`) and executor A's context (`ctx=`), as §3 makes them."""
    return {"lab": lab, "ctx": TaskContext(settings=lab.settings, actor="A")}


@exercise("26a.kinds", answer="my_kinds", solution="solution_kinds",
          context=world_context("26a-kinds-judge", _lab_and_executor, tickets=60,
                                backoff_delay_ms=30),
          wrong={"reject everything": dict.fromkeys(SITUATIONS, "reject")})
async def judge_kinds(choices: Any, *, lab: Lab, ctx: TaskContext) -> Verdict:
    """Exercise E: each situation run through the real processor with the learner's
    choice; it holds when every task ended the way it should — finished after a passing
    problem, FAILED at once for a lasting one — else what each choice cost (P7)."""
    if not isinstance(choices, dict) or set(choices) != set(SITUATIONS):
        return failed(say("ch26a.kinds.not-a-map", "my_kinds must map each situation above to "
                          "\"retry\" or \"reject\""))
    lines, right, shown = [], 0, _situations_shown()
    outcomes: dict[str, tuple[str, str, int] | None] = {}
    for situation, choice in choices.items():
        # "retry" or "reject", in either of the edition's languages (`learn.same`).
        choice = next((c for c in CHOICES if learn.same(choice, c)), choice)
        if choice not in CHOICES:
            outcomes[situation] = None
            lines.append(say("ch26a.kind.unknown", "? {situation}: write \"retry\" or "
                             "\"reject\"", situation=shown[situation]))
            continue
        status, runs = await _outcome(lab, ctx, situation, choice)
        outcomes[situation] = (choice, status, runs)
        stays = SITUATIONS[situation][0]
        if not stays and status == "COMPLETED":
            right += 1
            lines.append(say("ch26a.kind.finished", "✓ {situation}: {choice} → COMPLETED on "
                             "attempt {runs}", situation=shown[situation], choice=choice,
                             runs=runs))
        elif stays and status == "FAILED" and runs == 1:
            right += 1
            lines.append(say("ch26a.kind.rejected", "✓ {situation}: {choice} → FAILED at "
                             "once, a clear reason kept", situation=shown[situation],
                             choice=choice))
        elif not stays:
            lines.append(say("ch26a.kind.should-retry", "✗ {situation}: {choice} → {status} "
                             "after {runs} execution(s); the problem had passed, a retry would "
                             "have finished the export", situation=shown[situation],
                             choice=choice, status=status, runs=runs))
        else:
            lines.append(say("ch26a.kind.should-reject", "✗ {situation}: {choice} → {status} "
                             "only after {runs} executions: each retry met the same problem (and "
                             "the user waited)", situation=shown[situation], choice=choice,
                             status=status, runs=runs))
    facts = {"right": right, "total": len(SITUATIONS), "outcomes": outcomes}
    if right == len(SITUATIONS):
        return passed(say("ch26a.kinds.passed", "every task ended the way it should (P7)"),
                      *lines, **facts)
    return failed(say("ch26a.kinds.score", "{right} of {total} right", right=right,
                      total=len(SITUATIONS)), *lines, **facts)


# ---------------------------------------------------------------- §2: the backoff, measured

def attempt_times(lab: Lab, job_id: str) -> list[dict[str, Any]]:
    """Each attempt of one queue job, from the lab's worker events: when it started (the
    worker's `active`) and when it failed (`failed`), in seconds since the first start, and
    the wait before it (from the previous failure to this start: the backoff, Q1)."""
    starts = [e["t"] for e in lab.recorder.of("active", job_id=job_id)]
    fails = [e["t"] for e in lab.recorder.of("failed", job_id=job_id)]
    t0 = starts[0] if starts else 0.0
    rows = []
    for n, start in enumerate(starts):
        rows.append({"attempt": n + 1, "started": round(start - t0, 3),
                     "failed": round(fails[n] - t0, 3) if n < len(fails) else None,
                     "waited": round(start - fails[n - 1], 3) if n else None})
    return rows


def plot_attempts(rows: list[dict[str, Any]], *, title: str) -> Any:
    """A small timeline of `attempt_times`: one mark per attempt, the waits between them
    drawn as arrows with their length, so "2 s, then 4 s" can be read off the axis."""
    fig = fonts.figure("AttemptsFigure", figsize=(8, 2.2), dpi=100)  # Chinese labels too
    ax = fig.subplots()
    for r in rows:
        ax.plot([r["started"]], [0], "o", color="tab:blue")
        ax.annotate(say("ch26a.plot.attempt", "attempt {n}", n=r["attempt"]),
                    (r["started"], 0), (0, 10),
                    textcoords="offset points", ha="center")
        if r["failed"] is not None:
            ax.plot([r["failed"]], [0], "x", color="tab:red")
    for prev, r in itertools.pairwise(rows):
        ax.annotate("", (r["started"], -0.5), (prev["failed"], -0.5),
                    arrowprops={"arrowstyle": "<->", "color": "grey"})
        ax.text((prev["failed"] + r["started"]) / 2, -0.45,
                say("ch26a.plot.backoff", "backoff {waited:.1f} s", waited=r["waited"]),
                ha="center", va="bottom", color="grey")
    ax.set_ylim(-1, 1)
    ax.set_yticks([])
    ax.set_xlabel(say("ch26a.plot.xlabel", "seconds since attempt 1 started (o: start, "
                      "x: failed)"))
    ax.set_title(title)
    fig.tight_layout()
    return fig
