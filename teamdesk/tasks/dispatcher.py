"""The outbox dispatcher: scan the ledger, reconcile with the queue, add, mark (D1–D8).

One call of `dispatch_tasks` is one *tick* of the book (ch. 23 §3–6), one scan round:

1. **Scan** (D1) at most `dispatch_batch_size` WAITING rows that were never dispatched or
   whose last enqueue check is older than `redispatch_age_s`, never-dispatched first, then
   the longest-unchecked, then by `run_at`. There is no `run_at <= now` condition:
   tomorrow's reminder is enqueued today as a delayed job.
2. **Reconcile and enqueue** (D4, D2) each row against its queue job `task_job_id(id, run)`
   (I2): look the job up, read its state, and add / refresh / re-add / fail it — for the
   whole scan at once on a bullmq queue (one round trip reads every row's state). Our
   decision for a record in no state at all (`unknown`, e.g. after partial key loss): like
   `completed`, remove it and add again — a plain add would be swallowed as a duplicate.
3. **Mark** (D3) `dispatched_at = now` WHERE `id, run, status = WAITING` — only for rows
   whose add or refresh succeeded, only *after* it succeeded. Zero rows matched is fine
   (the job may already have completed the task); a COMPLETED row is never turned back.
   The D4 failures are written by a statement of their own after the mark.
4. **Recover** (D6) RUNNING rows whose `updated_at` has not moved for
   `stale_running_age_s`: back to WAITING, same run, lease and `dispatched_at` cleared —
   except the third stall of the same run, which ends FAILED (D9).
5. **Purge** (D7) the CSV of exports past `expires_at`; the row stays. Download checks
   expiry itself (X2), so a late purge never serves an expired file.

A tick that raises ends that round (D8): the rows after the failing one and the recovery
and purge steps of that tick do not run; the rows whose add already succeeded are still
marked. Every Redis call is bounded by `settings.redis_timeout_s`, so a tick against a
dead or hung Redis raises within seconds instead of the Python bullmq port's silent
~350 s of retries (ARCHITECTURE.md, "Python bullmq quirks").

Every time comparison is made in the database's clock (`now()` in `queries.sql`, D6 made
precise): `updated_at` and `dispatched_at` are stamped there, so a dispatcher host whose
clock is off neither recovers live tasks nor delays recovery. Tests and labs compress the
clock by ageing rows, not by passing another `now`. The SQL runs on one connection per
tick, checked out of the `Ledger` (a pool check per checkout would cost a round trip).

Duplicate dispatch is the normal case, not an accident (D5): two dispatchers, or a
re-check after 30 s, may look at the same task; the fixed job id de-duplicates only while
the job record exists, and correctness comes from the executor's lease (P1–P3). Their
multi-row UPDATEs (mark, fail from queue, recovery + purge) meet the same rows, so each
locks its rows in id order before updating them and runs as a transaction of its own:
dispatchers never deadlock each other (D8; the argument is in `queries.sql`).

`dispatch_loop.DispatchLoop` (the worker process's tick) runs ticks about every
`dispatch_tick_s` (jittered), never two at once (D8); a tick whose scan came back full
runs further scan rounds at once, within `dispatch_budget_s`, before the recovery and
purge tail. D4's decision table is `reconcile.decide`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import psycopg

from teamdesk import probes
from teamdesk.config import Settings
from teamdesk.tasks.ledger import Ledger, execute, fetch_all, fetch_one
from teamdesk.tasks.queue import JOB_NAME, can_look_up_in_bulk, job_states, task_job_id
from teamdesk.tasks.reconcile import Decision, decide

log = logging.getLogger("teamdesk.dispatcher")

#: The fixed, readable `last_error` of a task the queue gave up on while no executor held
#: it (D4 failed branch, W3). No driver text, no stack trace (P8).
QUEUE_FAILED_ERROR = ("Failed: the queue gave up on this round and no executor holds it. "
                      "Use Retry to start a new round.")

#: D9: the recovery that would be the third of the same run fails the task instead.
MAX_STALE_RECOVERIES = 3

#: The fixed, readable `last_error` of a run that stalled `MAX_STALE_RECOVERIES` times (D9).
STALLED_ERROR = ("Failed: this round stalled three times (no progress for the stale-running "
                 "age each time). Use Retry to start a new round.")

#: How many rows of one scan are reconciled at the same time. Each row's own steps stay in
#: order (look up → add → mark); only different rows overlap, which hides Redis round-trip
#: latency. 1 reproduces the book's strictly sequential loop.
DEFAULT_CONCURRENCY = 8


class QueueTimeout(TimeoutError):
    """A Redis call of the dispatcher got no answer within `settings.redis_timeout_s`.

    Raised instead of a bare `asyncio.TimeoutError` (whose message is empty) so the
    dispatch fault line says which call timed out (D8)."""


class DispatchQueue(Protocol):
    """What the dispatcher needs from the queue: bullmq's `Queue` in production; the book's
    "Redis offline" fake in one test (ch. 23 §7)."""

    async def getJob(self, job_id: str) -> Any: ...  # bullmq's camelCase API

    async def add(self, name: str, data: Any, opts: dict[str, Any]) -> Any: ...

    def remove(self, job_id: str, opts: dict[str, Any] = ...) -> Awaitable[Any]: ...


@dataclass
class DispatchReport:
    """What one tick (or one scan round of it) did; `str()` is the one-line log form."""

    #: WAITING rows the scans returned (D1).
    scanned: int = 0
    #: No job existed: added (D2, D4).
    added: int = 0
    #: The job was already queued (waiting/delayed/active/…): `dispatched_at` refreshed (D4).
    refreshed: int = 0
    #: The job record was completed (or orphaned) while the ledger is still WAITING: the old
    #: record was removed and the job added again (D4, inferred).
    re_added: int = 0
    #: Queue said failed, ledger WAITING without a lease: set FAILED (D4, W3).
    failed_from_queue: int = 0
    #: RUNNING rows without progress for `stale_running_age_s`, back to WAITING (D6).
    recovered_stale: int = 0
    #: Expired export CSVs cleared (D7).
    purged: int = 0
    #: RUNNING rows stale for the third time in the same run, set FAILED (D9).
    failed_stalled: int = 0
    #: Scans of this tick: more than one when scans came back full (D8 catch-up).
    rounds: int = 1
    #: The tick's budget ended its rounds while the last scan was still full: the next
    #: tick follows at once (D8).
    backlog: bool = False
    #: A catch-up round that did not run: another process's dispatcher is catching up on
    #: the same backlog (D8, D5).
    yielded: bool = False

    def __str__(self) -> str:
        """`scanned=… added=… … failed_stalled=…`: every count, always; then how the tick
        ran (`rounds`, `backlog`, `yielded`) only when it was not one plain round — the
        book's tick is one round, and a line for one reads as the book's."""
        plain = {"rounds": 1, "backlog": False, "yielded": False}
        return " ".join(
            f"{f.name}={str(v).lower() if isinstance(v, bool) else v}"
            for f in fields(self)
            if (v := getattr(self, f.name)) != plain.get(f.name, object()))

    def add(self, other: DispatchReport) -> None:
        """Count `other` (a later round or the tail of the same tick) into this report."""
        for f in fields(self):
            if f.name not in ("rounds", "backlog", "yielded"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True)
class _Row:
    id: str
    run: int
    execution_id: str | None
    #: D2's `max(0, run_at - now)`, computed by the database in its own clock.
    delay_ms: int


async def scan(conn: psycopg.AsyncConnection, settings: Settings) -> list[_Row]:
    """The D1 scan (statement `scan`): never-dispatched rows first (by `run_at`), then
    rows whose last check is older than `redispatch_age_s` in the database's clock
    (longest-unchecked first), at most `dispatch_batch_size`. Two index-bounded halves in
    one round trip: the old single `dispatched_at IS NULL OR dispatched_at < cutoff`
    query walked every WAITING entry when nothing was due (9.3 ms at 1M rows)."""
    rows = await fetch_all(conn, "scan", {"limit": settings.dispatch_batch_size,
                                          "age_s": float(settings.redispatch_age_s)})
    return [_Row(r.id, r.run, r.execution_id, r.delay_ms) for r in rows]


async def dispatch_tasks(
    queue: DispatchQueue,
    settings: Settings,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    ledger: Ledger | None = None,
    recover: bool = True,
    catch_up: bool = False,
) -> DispatchReport:
    """Run one dispatcher scan round (D1–D5) and, unless `recover` is False, the tick's
    tail (D6, D7, D9); return what it did. One call is what a tick of the book does: one
    scan of at most `dispatch_batch_size` rows. `DispatchLoop` (the worker process's tick)
    runs further rounds after a full scan with `recover=False`, then the tail once; those
    catch-up rounds pass `catch_up=True`: the round runs only while it holds the catch-up
    advisory lock (statement `catch_up_lock`, tried, never waited for), else it returns
    at once with `yielded` — another process is already working through that backlog, and
    two doing it in step would add every row twice (D5: harmless, but half the speed).

    The SQL runs on one connection from `ledger` (default: one fresh connection to
    `settings.database_url` for this call). There is no `now`: every time comparison is
    made in the database's clock (D6 made precise); age rows to move a task's clock.
    Raises on the first Redis or database error (D8): a Redis call that does not answer
    within `settings.redis_timeout_s` raises `QueueTimeout`.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    started = time.perf_counter()
    report = DispatchReport()
    tick = _Tick(queue, settings)
    ledger = ledger or Ledger(settings.database_url or "")
    async with ledger.connection() as conn, _catching_up(conn, catch_up) as alone:
        if not alone:
            report.scanned, report.yielded = 0, True
            log.debug("dispatch.round yielded=true")
            return report
        # D1: autocommit reads. No row lock is held across the Redis calls: an executor's
        # claim (P2) must never wait for the dispatcher.
        rows = await scan(conn, settings)
        report.scanned = len(rows)

        outcomes, error = await tick.reconcile(rows, concurrency)

        # D3: mark only the rows whose add/refresh succeeded, after it succeeded, with the
        # id + run + WAITING condition. D4: fail what the queue gave up on, conditionally.
        try:
            await _write_outcomes(conn, outcomes, report)
        except Exception as write_error:
            if error is None:
                raise
            # The Redis error is the tick's real cause; keep it, note the second one.
            error.add_note(f"marking the rows already enqueued failed too: {write_error!r}")
        if error is not None:
            raise error  # D8: the round ends here; recovery and purge wait for a later tick

        if recover:
            (report.failed_stalled, report.recovered_stale,
             report.purged) = await recover_and_purge(conn, settings)

    ms = round((time.perf_counter() - started) * 1000)
    if recover:
        log.info("dispatch.tick %s ms=%d", report, ms)
    else:  # one round of a loop's tick, which logs the whole tick in one line
        log.debug("dispatch.round %s ms=%d", report, ms)
    return report


@contextlib.asynccontextmanager
async def _catching_up(conn: psycopg.AsyncConnection, catch_up: bool
                       ) -> AsyncIterator[bool]:
    """For a catch-up round: hold the catch-up advisory lock for the round (True), or
    say that another dispatcher holds it (False). Other rounds: always True, no lock."""
    if not catch_up:
        yield True
        return
    if not (await fetch_one(conn, "catch_up_lock")).got:
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(psycopg.Error):  # a broken session has lost the lock
            await fetch_one(conn, "catch_up_unlock")


async def dispatch_tail(settings: Settings, *, ledger: Ledger | None = None
                        ) -> DispatchReport:
    """The tick's tail alone (D6, D9, D7: `recover_and_purge`), on one connection of
    `ledger` (default: a fresh one); for `DispatchLoop`, which runs it once after its
    scan rounds. The report counts only the tail (`scanned` 0)."""
    report = DispatchReport()
    ledger = ledger or Ledger(settings.database_url or "")
    async with ledger.connection() as conn:
        (report.failed_stalled, report.recovered_stale,
         report.purged) = await recover_and_purge(conn, settings)
    return report


async def recover_and_purge(conn: psycopg.AsyncConnection,
                            settings: Settings) -> tuple[int, int, int]:
    """The tick's tail in one statement, all in the database's clock; returns
    (failed_stalled, recovered_stale, purged).

    D6: RUNNING rows whose `updated_at` is older than `stale_running_age_s` go back to
    WAITING with `execution_id` and `dispatched_at` cleared, same run (not run+1), and
    their per-run recovery count goes up. Clearing the lease fences the old executor: its
    next leased write matches 0 rows (P3, P12); clearing `dispatched_at` puts the row
    first in the next scan. `updated_at` is advanced by the table's trigger, and export
    batch progress advances it too, so a slow but live export is not taken away.

    D9: a row that is stale again after `MAX_STALE_RECOVERIES - 1` recoveries of the same
    run ends FAILED with `STALLED_ERROR` instead. Without it a task whose steps keep
    outlasting the threshold cycles claim → recovery → LeaseLost → re-add forever with a
    fresh attempt budget.

    D7: clear `result_csv` of EXPORT rows past `expires_at`; keep the row (and its
    summary) so the user still sees what happened."""
    row = await fetch_one(conn, "recover_and_purge", {
        "age_s": float(settings.stale_running_age_s),
        "max_recoveries": MAX_STALE_RECOVERIES - 1, "stalled_error": STALLED_ERROR})
    return row.failed_stalled, row.recovered_stale, row.purged


#: The decisions after which a row's `dispatched_at` is marked (D3), each with the count
#: of the report it goes to.
_MARKED = {Decision.ADD: "added", Decision.REFRESH: "refreshed", Decision.RE_ADD: "re_added"}


async def _write_outcomes(conn: psycopg.AsyncConnection,
                          outcomes: Sequence[tuple[_Row, Decision]],
                          report: DispatchReport) -> None:
    """Write what the Redis side decided and did: D3's mark, D4's conditional fail."""
    marked = [row for row, d in outcomes if d in _MARKED]
    failing = [row for row, d in outcomes if d is Decision.FAIL]
    for _row, d in outcomes:
        if d in _MARKED:
            setattr(report, _MARKED[d], getattr(report, _MARKED[d]) + 1)
    # Two statements, each its own autocommit transaction (D8): each locks its rows in id
    # order, and the mark's locks are released before the fail's are taken. In one
    # transaction the two sorted sets would be locked one after the other — not one order,
    # so two dispatchers could deadlock. Nothing needs them atomic: the sets are disjoint
    # and each write is conditional on its own (D3, D4).
    if marked:
        await mark_dispatched(conn, marked)
    if failing:
        # D4 failed branch: only a WAITING row of that run whose lease is empty. A
        # RUNNING row is never failed from the queue's word (its lease may belong to
        # a live executor); D6 must first recover it, and a later tick decides.
        result = await execute(conn, "fail_from_queue", {
            "ids": [r.id for r in failing], "runs": [r.run for r in failing],
            "last_error": QUEUE_FAILED_ERROR})
        report.failed_from_queue = result.rowcount


class _Tick:
    """The Redis side of one tick: reconcile each scanned row with its queue job."""

    def __init__(self, queue: DispatchQueue, settings: Settings) -> None:
        self.queue = queue
        self.settings = settings

    async def reconcile(self, rows: Sequence[_Row], concurrency: int
                        ) -> tuple[list[tuple[_Row, Decision]], BaseException | None]:
        """Reconcile rows in scan order; on the first error no further row is started (D8).
        Returns the outcomes of the rows that succeeded and the error.

        With a bullmq queue on Redis one round trip reads every row's job state
        (`queue.job_states`) instead of `getJob` + `getState` per row; then the
        rows without a job are added one by one (each after its own `dispatch.before_add`)
        and the rare completed/orphaned records take the per-job remove + add. Both paths
        ask `reconcile.decide` (D4's table) for each row. Other queues (the
        book's offline fake) take `reconcile_one` per row, `concurrency` rows at a time."""
        if not rows:
            return [], None
        if not can_look_up_in_bulk(self.queue):
            return await self._each(rows, concurrency, self.reconcile_one)
        job_ids = [task_job_id(r.id, r.run) for r in rows]
        try:
            states = await self._bounded(_many("getJob", job_ids),
                                         job_states(self.queue, job_ids))  # type: ignore[arg-type]
        except Exception as err:
            return [], err
        outcomes: list[tuple[_Row, Decision]] = []
        to_add: list[_Row] = []
        to_re_add: list[_Row] = []
        for row, state in zip(rows, states, strict=True):
            decision = decide(state, leased=row.execution_id is not None)
            if decision is Decision.ADD:
                to_add.append(row)
            elif decision is Decision.RE_ADD:
                to_re_add.append(row)
            else:
                outcomes.append((row, decision))
        # D2, one add per row after its own `dispatch.before_add`, up to `concurrency` at
        # a time: a probe holding one row must not hold back the adds of the others (a
        # single addBulk after all the probes would).
        outcomes_added, error = await self._each(to_add, concurrency, self._add_new)
        outcomes.extend(outcomes_added)
        if error is None and to_re_add:
            more, error = await self._each(to_re_add, concurrency, self._re_add)
            outcomes.extend(more)
        return outcomes, error

    async def _each(self, rows: Sequence[_Row], concurrency: int,
                    one: Callable[[_Row], Awaitable[Decision]]
                    ) -> tuple[list[tuple[_Row, Decision]], BaseException | None]:
        """`one(row)` for each row, up to `concurrency` rows at a time, in scan order. On
        the first error no further row is started (D8); rows already in flight finish
        (their Redis calls are bounded)."""
        outcomes: list[tuple[_Row, Decision]] = []
        errors: list[Exception] = []
        pending = iter(rows)

        async def lane() -> None:
            for row in pending:  # shared iterator: each row is taken by exactly one lane
                if errors:
                    return
                try:
                    outcomes.append((row, await one(row)))
                except Exception as err:
                    errors.append(err)
                    return

        await asyncio.gather(*(lane() for _ in range(min(concurrency, len(rows)))))
        if not errors:
            return outcomes, None
        first = errors[0]
        if len(errors) > 1:
            first.add_note(f"{len(errors) - 1} more row(s) failed in the same tick")
        return outcomes, first

    async def reconcile_one(self, row: _Row) -> Decision:
        """D4 for one row, with the per-job calls a queue without bulk reads offers."""
        job_id = task_job_id(row.id, row.run)
        job = await self._bounded(f"getJob({job_id})", self.queue.getJob(job_id))
        state = (None if job is None
                 else await self._bounded(f"getState({job_id})", job.getState()))
        decision = decide(state, leased=row.execution_id is not None)
        if decision is Decision.ADD:
            return await self._add_new(row)
        if decision is Decision.RE_ADD:
            return await self._re_add(row)
        return decision

    async def _add_new(self, row: _Row) -> Decision:
        """D4: no job → add (D2)."""
        await self._add(row, task_job_id(row.id, row.run))
        return Decision.ADD

    async def _re_add(self, row: _Row) -> Decision:
        """D4 (inferred): remove the completed or orphaned record, then add again."""
        job_id = task_job_id(row.id, row.run)
        removed = await self._bounded(f"remove({job_id})", self.queue.remove(job_id))
        if not removed:
            # removeJob refuses a locked job: a worker holds it right now (another
            # dispatcher re-added it and it was picked up), so it is queued after all.
            return Decision.REFRESH
        await self._add(row, job_id)
        return Decision.RE_ADD

    async def _add(self, row: _Row, job_id: str) -> None:
        """D2: `add("execute", {taskId, run}, jobId=task_job_id, delay=max(0, run_at-now))`.
        A future `run_at` becomes a delayed job now (D1: no `run_at <= now` condition).
        The delay was computed by the scan in whole milliseconds, in the database's clock
        (the one `run_at` is written in), as the book's `Math.max(0, runAt - Date.now())`."""
        await add_job(self.queue, self.settings, row, job_id=job_id)

    async def _bounded(self, what: str, call: Awaitable[Any]) -> Any:
        """Every Redis call of the dispatcher is bounded (ch. 23, D8)."""
        return await _bounded(self.settings, what, call)


async def _bounded(settings: Settings, what: str, call: Awaitable[Any]) -> Any:
    """Await a Redis call of the dispatcher within `settings.redis_timeout_s` (D8)."""
    timeout = settings.redis_timeout_s
    try:
        return await asyncio.wait_for(call, timeout)
    except TimeoutError:
        raise QueueTimeout(f"Redis did not answer {what} within {timeout:g} s") from None


async def add_job(queue: DispatchQueue, settings: Settings, row: _Row, *,
                  job_id: str | None = None) -> None:
    """D2, one row's enqueue exactly as the tick does it: `dispatch.before_add`, then
    `add("execute", {taskId, run}, jobId=task_job_id(id, run), delay)`, bounded by
    `redis_timeout_s` (raises on a Redis error, D8). The tick's own step, public so a lab
    can hand it to a learner who writes the step order of one row (ch. 23 练习 A)."""
    job_id = job_id or task_job_id(row.id, row.run)
    await probes.announce("dispatch.before_add", task_id=row.id, run=row.run)
    await _bounded(settings, f"add({job_id})",
                   queue.add(JOB_NAME, {"taskId": row.id, "run": row.run},
                             {"jobId": job_id, "delay": row.delay_ms}))


async def mark_dispatched(conn: psycopg.AsyncConnection, rows: Sequence[_Row]) -> int:
    """D3, the tick's mark (statement `mark_dispatched`): `dispatched_at = now()` WHERE
    `id, run, status = WAITING`, for rows whose add or refresh succeeded; returns how many
    rows matched. Zero for a pair is fine — the job may have completed the task already;
    the status condition keeps COMPLETED/RUNNING/FAILED rows untouched. Public for the
    same lab exercise as `add_job`; the tick calls it only *after* the add (D3)."""
    result = await execute(conn, "mark_dispatched", {"ids": [r.id for r in rows],
                                                     "runs": [r.run for r in rows]})
    return result.rowcount


def _many(call: str, job_ids: Sequence[str]) -> str:
    """How a bulk Redis call is named in a `QueueTimeout` (the job ids it was about)."""
    more = f" and {len(job_ids) - 1} more" if len(job_ids) > 1 else ""
    return f"{call}({job_ids[0]}{more})"
