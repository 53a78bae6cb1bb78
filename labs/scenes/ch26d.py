"""Scene helpers of `notebooks/26d-manual-retry-and-recovery.ipynb` (ch. 26 §6–7).

What a learner need not read to follow the chapter: a ledger row printed field by field,
a run driven to FAILED by three transient errors (the set-up of Exercise B, shown once in
full in §6.1), and Exercise C's rounds — scan, wait, Retry, again — with their judge.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from labs.names import Names
from teamdesk.tasks.queue import task_job_id

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
            return "(a time)"
        if hasattr(v, "value"):
            return v.value
        if isinstance(v, str) and len(v) == 36 and v.count("-") == 4:
            named = names.lease_of(v) if names is not None else v
            return named if named != v else "(a lease)"
        return v if not isinstance(v, str) or len(v) < 45 else v[:42] + "…"
    return {c: show(row[c]) for c in columns}


async def exhaust_run(lab: Any, task_id: str, run: int = 0) -> None:
    """Dispatch `task_id` and let every attempt of `run` meet a transient read error until
    the queue's budget is used up: the processor writes FAILED with its lease (P7, Q1).
    The three expected worker failures are acknowledged. Needs a started worker."""
    job_id = task_job_id(task_id, run)
    lab.fault("export.after_read", TRANSIENT, times=3,
              when=lambda ctx: ctx["task_id"] == task_id)
    with lab.expect_errors(source="worker failed", job_id=job_id):
        await lab.dispatch()
        await lab.wait_for("failed", job_id=job_id, where=lambda e: e["exhausted"],
                           timeout=T)


Round = tuple[str, int, int, str]  # (job id, job attemptsMade, ledger attempts, status)


async def one_round(lab: Any, task_id: str, run: int, fails_left: int) -> Round:
    """One dispatcher scan and the round it starts, to its end: FAILED when all three
    attempts meet the fault (`fails_left` ≥ 3), COMPLETED otherwise."""
    await lab.dispatch()
    job_id = task_job_id(task_id, run)
    if fails_left >= 3:  # this round's three attempts all meet the fault
        await lab.wait_for("failed", job_id=job_id, where=lambda e: e["exhausted"], timeout=T)
    else:
        await lab.wait_for("completed", job_id=job_id, timeout=T)
    r, job = await lab.task(task_id), await lab.job(task_id, run)
    return job.id, job.attemptsMade, r.attempts, r.status.value


async def rounds_with(lab: Any, fails: int, memo: dict[int, list[Round]]) -> list[Round]:
    """Exercise C: a new export whose reads fail `fails` times in a row, run round after
    round — a scan, and Ben's Retry after each FAILED round (R2), three rounds at most.
    Remembered in `memo` per number, so a check cell run again starts nothing new."""
    if fails not in memo:
        t = await lab.request_export({"priority": ["LOW"], "status": ["PENDING"]}, user="ben")
        lab.fault("export.after_read", TRANSIENT, times=fails,
                  when=lambda ctx: ctx["task_id"] == t.id)
        with lab.expect_errors(source="worker failed", contains="connection reset"):
            rounds = [await one_round(lab, t.id, 0, fails)]
            while rounds[-1][3] == "FAILED" and len(rounds) < 3:
                await lab.retry(t.id, user="ben")
                run = len(rounds)
                rounds.append(await one_round(lab, t.id, run, fails - 3 * run))
        memo[fails] = rounds
    return memo[fails]


def show_rounds(rounds: list[Round]) -> None:
    """Exercise C's table: each round's job, attemptsMade, ledger attempts and status,
    then the executions (claims) in all."""
    print(f"{'job':<11}{'attemptsMade':<14}{'ledger attempts':<17}status")
    for jid, made, attempts, status in rounds:
        print(f"{jid:<11}{made:<14}{attempts:<17}{status}")
    print("executions (claims) in all:", sum(r[1] for r in rounds))


THIRD_HOLDS = ("the task needed three rounds and ran more than three times: attempts=3 is a "
               "per-run budget, and Retry grants a new one (I3, Q1, R2).")


def third_round(rounds: list[Round]) -> bool | str:
    """Exercise C's judge: the task completed in its third round (I3, Q1, R2)."""
    statuses = [r[3] for r in rounds]
    return statuses == ["FAILED", "FAILED", "COMPLETED"] or f"the rounds ended {statuses}"
