"""Scene helpers of `notebooks/26a-identities-and-retries.ipynb` (ch. 26 §1–3).

§3 follows one failure field by field, choosing `attemptsMade` ourselves: the book does it
with a `FakeJob` in its unit-level tests, we with `StandInJob`. The processor, the lease
and the ledger stay real; only the queue's job object is a stand-in, so what the cell shows
is the product's own classification of each attempt (P4, P7, I3).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from teamdesk.tasks.processor import TaskContext, process_task
from teamdesk.tasks.queue import MAX_TASK_ATTEMPTS, task_job_id


class StandInJob:
    """A stand-in for a BullMQ job (the book's FakeJob, ch. 26 §8). The processor only reads
    `id`, `data`, `attemptsMade`, `opts` and calls `updateProgress`; here that call fails
    when `fail_at(value)` says so, as a broken queue connection would (the book's opening:
    the *progress report to the queue* fails). `reported` keeps the values that got
    through."""

    def __init__(self, task_id: str, run: int = 0, attempts_made: int = 0,
                 fail_at: Callable[[int], bool] | None = None) -> None:
        self.id = task_job_id(task_id, run)
        self.data = {"taskId": task_id, "run": run}
        self.attemptsMade = attempts_made
        self.opts = {"attempts": MAX_TASK_ATTEMPTS}
        self.fail_at = fail_at or (lambda value: False)
        self.reported: list[int] = []

    async def updateProgress(self, value: int) -> None:  # BullMQ spells it so
        if self.fail_at(value):
            raise ConnectionError(f"queue progress report failed at {value}")
        self.reported.append(value)


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


async def after_execution(lab: Any, task_id: str, attempts_made: int, raised: str
                          ) -> dict[str, Any]:
    """One row of §3's table: the ledger row after an execution with `attempts_made`."""
    r = await lab.task(task_id)
    return dict(attemptsMade=attempts_made, attempts=r.attempts,
                final=attempts_made + 1 >= MAX_TASK_ATTEMPTS, status=r.status.value,
                progress=r.progress, lease=r.execution_id, result_csv=r.result_csv,
                raised=raised, last_error=r.last_error)


async def execution_status(lab: Any, ctx: TaskContext, attempts_made: int,
                           tried: dict[int, str]) -> str:
    """The exercise of §3: a *new* export, one stand-in execution with `attempts_made`
    whose queue reports all fail; the ledger status it leaves (WAITING or FAILED, P7).
    Remembered in `tried` per number, so a check cell run again executes nothing new."""
    if attempts_made not in tried:
        t = await lab.request_export({"status": ["OPEN"]}, user="ben")
        job = StandInJob(t.id, attempts_made=attempts_made, fail_at=every_report)
        await raised_by(process_task(job, None, ctx))
        tried[attempts_made] = (await lab.task(t.id)).status.value
    return tried[attempts_made]


def identities(round_1: Any, round_2: Any, job_0: Any, job_1: Any) -> str:
    """§1's table, as text to print: the three identities of one task in its two rounds,
    with what each is (I1, I2, I3)."""
    rows = [
        ("task id", round_1.id, round_2.id, "the ledger row: one for the task's whole life"),
        ("run", round_1.run, round_2.run, 'the round; the page shows "round run+1"'),
        ("queue job id", job_0.id, job_1.id,
         "task_job_id(id, run): a manual retry opens a new one"),
        ("job attemptsMade", job_0.attemptsMade, job_1.attemptsMade, "kept by BullMQ, per job"),
        ("ledger attempts", round_1.attempts, round_2.attempts, "attemptsMade + 1 of that job"),
        ("status", round_1.status.value, round_2.status.value, ""),
    ]
    lines = [f"{'':<17}{'round 1':<11}{'round 2':<11}"]
    lines += [f"{name:<17}{one!s:<11}{two!s:<11}{note}" for name, one, two, note in rows]
    return "\n".join(lines)
