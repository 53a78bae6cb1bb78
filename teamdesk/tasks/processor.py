"""`process_task`: the BullMQ processor with the lease discipline of ch. 26 (P1–P9).

    claim a fresh lease, returning the claimed row (P2) → if it matched nothing, a cheap
    read says why: old run or COMPLETED is skipped (P1) → run the executor `EXECUTORS`
    names for the task's type, every write through `ctx.fence` (P3–P5, P10) → on
    LeaseLost return quietly (P6) → on other errors report with the lease, then re-raise
    so BullMQ decides (P7, P8, P9).

The claim's `id, run, status IN (WAITING, RUNNING)` condition already excludes old runs
and finished tasks, so claiming first and reading only on a miss is P1 in one round trip
on the common path. One connection from `ctx.ledger` serves the whole run.

Returning normally does not prove this execution produced the result: the ledger's
status, body and expiry are the truth (ch. 26 §4).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from bullmq.custom_errors import UnrecoverableError

from teamdesk import probes
from teamdesk.tasks.context import Executor, TaskContext
from teamdesk.tasks.errors import RejectReason, TaskRejected, retryable_error_text
from teamdesk.tasks.exports import run_export
from teamdesk.tasks.lease import Lease, LeaseLost, claim
from teamdesk.tasks.ledger import fetch_one
from teamdesk.tasks.queue import MAX_TASK_ATTEMPTS
from teamdesk.tasks.reminders import run_reminder

__all__ = ["EXECUTORS", "TaskContext", "executor_for", "parse_payload", "process_task"]

log = logging.getLogger("teamdesk.processor")

#: Task type (`background_tasks.type`) → its executor. Read-only: a type is given an
#: executor here, in the product, not by patching from outside.
EXECUTORS: Mapping[str, Executor] = MappingProxyType({
    "EXPORT": run_export,
    "REMINDER": run_reminder,
})


def executor_for(task_type: str) -> Executor:
    """The executor of `task_type`; a type without one is a permanent rejection (P7, P8):
    waiting will not give this version of the worker an executor for it."""
    try:
        return EXECUTORS[task_type]
    except KeyError:
        raise TaskRejected(RejectReason.UNKNOWN_TYPE, f"type {task_type!r}") from None


def parse_payload(data: Any) -> tuple[str, int]:
    """`{taskId: str, run: int}` or `UnrecoverableError`: a malformed job is not retried."""
    if not isinstance(data, dict):
        raise UnrecoverableError(f"malformed job payload: expected an object, got {data!r}")
    task_id, run = data.get("taskId"), data.get("run")
    if not isinstance(task_id, str) or not task_id or isinstance(run, bool) or not isinstance(
            run, int) or run < 0:
        raise UnrecoverableError(f"malformed job payload: {data!r}")
    return task_id, run


async def process_task(job: Any, token: str | None, ctx: TaskContext) -> str:
    """Execute one queue delivery of one task run. Returns a short outcome text.

    One connection is checked out for the whole run. The claim comes first and returns
    the row it claimed; only when it matched nothing does a cheap read say why (P1)."""
    task_id, run = parse_payload(job.data)
    attempt = job.attemptsMade + 1
    assert ctx.ledger is not None  # TaskContext fills it in
    async with ctx.ledger.connection() as conn:
        await probes.announce("claim.before", task_id=task_id, run=run, actor=ctx.actor)
        claimed = await claim(conn, task_id, run, attempts=attempt)  # P2
        if claimed is None:
            return await _not_claimed(conn, job, task_id, run)
        lease, task = claimed
        log.info("task.claimed task_id=%s run=%s execution_id=%s attempt=%s actor=%s",
                 task_id, run, lease.execution_id, attempt, ctx.actor)
        await probes.announce("claim.after", task_id=task_id, run=run,
                              execution_id=lease.execution_id, actor=ctx.actor)
        try:
            return await executor_for(task.type)(ctx, conn, job, lease, task)
        except LeaseLost as lost:
            # P6: first, before any other handling. A newer executor owns the task; this
            # one must neither fail it nor end its queue job.
            log.info("task.lease_lost task_id=%s run=%s execution_id=%s during=%s", task_id,
                     run, lease.execution_id, lost.during)
            return f"lease lost during {lost.during}"
        except Exception as err:
            if not await _report_failure(ctx, conn, lease, err, attempt):
                # P7, P9: the lease is gone (or the result is already COMPLETED): nothing
                # to report, and nothing to hand to the queue.
                return f"error not reported, lease no longer held: {type(err).__name__}"
            raise _for_queue(err) from err


async def _not_claimed(conn: Any, job: Any, task_id: str, run: int) -> str:
    """P1/P2: the claim matched nothing. An old run's message or a finished task touches
    nothing ("skipped"); a FAILED row of this run is "not claimed"; no row is an error."""
    state = await fetch_one(conn, "task_state", {"task_id": task_id})
    if state is None:
        log.error("task.missing task_id=%s run=%s job_id=%s", task_id, run, job.id)
        raise UnrecoverableError(f"task {task_id} does not exist")
    if run != state.run or state.status == "COMPLETED":
        log.info("task.skipped task_id=%s job_run=%s ledger_run=%s status=%s", task_id, run,
                 state.run, state.status)
        return f"skipped: ledger is run {state.run} {state.status}"
    log.info("task.not_claimed task_id=%s run=%s", task_id, run)
    return "not claimed"


async def _report_failure(ctx: TaskContext, conn: Any, lease: Lease, err: Exception,
                          attempt: int) -> bool:
    """P7: write FAILED (final) or WAITING with the lease. Returns False when that matched
    no row: an executor that lost its lease cannot even report its failure. If the run's
    connection broke (PostgreSQL restarted), the report takes a fresh one; if that fails
    too, the error goes to the queue and the retry's claim (P2) takes the row over."""
    final = isinstance(err, TaskRejected) or attempt >= MAX_TASK_ATTEMPTS
    text = (err.last_error if isinstance(err, TaskRejected)
            else retryable_error_text(attempt, MAX_TASK_ATTEMPTS, final))
    await probes.announce("error.before_write", task_id=lease.task_id, run=lease.run,
                          execution_id=lease.execution_id, actor=ctx.actor,
                          error=type(err).__name__)
    statement = "report_final" if final else "report_retryable"
    try:
        if conn.broken or conn.closed:
            assert ctx.ledger is not None
            async with ctx.ledger.fresh_connection() as fresh:
                await ctx.fence(fresh, lease, statement, during="error report",
                                last_error=text)
        else:
            await ctx.fence(conn, lease, statement, during="error report", last_error=text)
    except LeaseLost:
        # P9: the row left RUNNING under this lease — taken over, recovered, or completed by
        # this very execution before the error (a failed final report): not always "lost".
        log.info("task.error_unreported task_id=%s run=%s execution_id=%s error=%s "
                 "(lease no longer held)", lease.task_id, lease.run, lease.execution_id,
                 type(err).__name__)
        return False
    log.warning("task.error task_id=%s run=%s execution_id=%s attempt=%s final=%s error=%s: %s",
                lease.task_id, lease.run, lease.execution_id, attempt, str(final).lower(),
                type(err).__name__, err)
    return True


def _for_queue(err: Exception) -> Exception:
    if isinstance(err, TaskRejected):
        return UnrecoverableError(err.last_error)
    return err
