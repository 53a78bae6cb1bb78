"""The old code a lab runs instead of the product's, by name: one registry for a lab's
executors (`Lab.counterexample`) and for worker processes (`labs.counterexample_worker`,
`labs.chaos --counterexample`), and the fences built from a learner's code.

    fence = ForgotRowCount(effects=[])            # a plain `Fence`, like `leased_update`
    entry = lookup("status-only-guard")           # unknown names fail here, and only here
    lab.use_fence(where_fence("id = %(task_id)s AND run = %(run)s AND …"), actor="A")

Every old fence is a `teamdesk.tasks.lease.Fence`: called exactly as the product's
`leased_update` (P3), it runs the old statement or the old check instead, and appends one
line per write it let through or redirected to its own `effects` list — the only channel
it reports through besides its log line. A lab reads those lines
(`labs.counterexamples.Switch.effects`); a worker process has only the log.

The registry, `COUNTEREXAMPLES`: name → `Counterexample`, the rules it breaks and the parts
it runs instead of the product's — a fence (`create_task_worker(fence=...)`, P3), a
reminder effect-writing step (`reminder_effects=`, P10), or a listener added to a worker
process's task worker (`Seams(on_worker=...)`, W1's worker):

- `forgot-row-count` — the old reminder code of ch. 26 §5: at its end it still updated
  under E1's condition, but never checked how many rows that changed. The fenced UPDATE
  keeps its lease condition; a 0-row result is ignored, and the executor carries on as if
  it had written (breaks P3, P10).
- `separate-effects` — the book's whole old reminder (ch. 26 §5): its notification, event
  and version bump are separate writes, the notification's unique constraint only skips a
  duplicate (`ON CONFLICT DO NOTHING`, our reading of the book's "the notification's unique
  constraint blocks the duplicate row"), and the completion's row count is ignored as in
  `forgot-row-count`. A redelivery then adds a second event and a second version bump
  (the book: the ticket's version and the system event may still be added once more;
  breaks P3, P10, P12).
- `status-only-guard` — the guard the lease replaced: `WHERE id AND run AND status =
  'RUNNING'`, without `execution_id`. Any executor of the run passes while *somebody* is
  RUNNING (breaks P3, P5).
- `lease-less-export` — the export's writes as they were before the lease: progress and
  the final CSV by `task_id + run`, without `execution_id` or `status = 'RUNNING'`, and no
  row count looked at (the book, ch. 26 §4: the final CSV write carries lease + RUNNING
  too, so an old result cannot overwrite a new one unconditionally; without them, it can).
  An old execution E1 that wakes up after E2 took the task over writes its CSV over E2's
  newer lease or result (breaks P3, P5; `task_id + run` is not a lease, W2).
- `legacy-failed-listener` — the old `failed` callback that ch. 26 §7 retired (W2): when
  the queue gives up on a job it sets the task FAILED by `task_id + run`, with the error's
  own text, and no lease. The event carries no `execution_id`, so this write can overwrite
  a rejection's fixed text (P8), or fail a task that a newer executor now owns (W3). It is
  a listener, not a fence: worker processes add it (`add_legacy_listener`); in a lab,
  `labs.scenes.ch26d.LateCallback` adds it to one worker, its write held.

All their SQL is the harness's (`labs/queries.sql`); nothing here rewrites the product's
statements except `where_fence`, which replaces exactly the lease condition of a fenced
statement with the learner's. The product is not changed, and none of its names is rebound.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from labs.i18n import listing, say
from labs.statements import LAB_QUERIES
from teamdesk.tasks.lease import FENCED, Fence, Lease, LeaseLost, leased_update
from teamdesk.tasks.ledger import QUERIES, Ledger, execute
from teamdesk.tasks.reminder_effects import ReminderEffects
from teamdesk.tasks.runner import WorkerHook
from teamdesk.tasks.worker import TaskWorker, is_exhausted

# The old fences log under the product's logger name, so a lab attributes their lines to
# its own executors (`labs.routing`); the retired listener keeps a name of its own, as it
# runs beside the product's listeners and is not the executor's.
log = logging.getLogger("teamdesk.counterexample")
listener_log = logging.getLogger("labs.counterexample")



class Effect(str):
    """One write an old fence let through or redirected: the English line as data (what
    cells and tests compare, in either edition), which can also say itself in the
    edition's words (`shown`, for a line a cell prints). `said(lang)` is the line's one
    `say` call, so its English is written once."""

    def __new__(cls, said: Callable[..., str]) -> Effect:
        line = super().__new__(cls, said(lang="en"))
        line._said = said
        return line

    def shown(self) -> str:
        """The line in the edition's words."""
        return self._said()


#: What an old fence changed: one line per write it let through or redirected.
Effects = list[Effect]


# ---------------------------------------------------------------- the old fences


@dataclass(frozen=True, eq=False)
class ForgotRowCount:
    """`forgot-row-count` (and the completion of `separate-effects`): the product's fenced
    statement, its 0-row result ignored (P3, P10 broken)."""

    effects: Effects = field(default_factory=list)

    async def __call__(self, conn: Any, lease: Lease, statement: str | None = None, *,
                       during: str = "write", **values: Any) -> None:
        try:
            await leased_update(conn, lease, statement, during=during, **values)
        except LeaseLost:
            # The bug: the row count is not looked at, so nothing stops the caller.
            self.effects.append(Effect(lambda lang=None: say(
                "fences.effect.carried-on", "{during}: 0 rows matched, carried on",
                lang=lang, during=during)))
            log.warning("counterexample.row_count_ignored task_id=%s execution_id=%s during=%s",
                        lease.task_id, lease.execution_id, during)


@dataclass(frozen=True, eq=False)
class StatusOnlyGuard:
    """`status-only-guard`: the write passes for whoever holds the run now — in effect
    `WHERE id AND run AND status = 'RUNNING'`, without `execution_id` (P3, P5 broken)."""

    effects: Effects = field(default_factory=list)

    async def __call__(self, conn: Any, lease: Lease, statement: str | None = None, *,
                       during: str = "write", **values: Any) -> None:
        if isinstance(conn, psycopg.AsyncConnection):
            # Whoever holds the run now: written under that lease (labs/queries.sql).
            cur = await conn.execute(LAB_QUERIES["run_holder"],
                                     {"task_id": lease.task_id, "run": lease.run})
            holder = await cur.fetchone()
            if holder is not None and holder[0] != lease.execution_id:
                holder_id, own_id = holder[0][:8], lease.execution_id[:8]
                self.effects.append(Effect(lambda lang=None: say(
                    "fences.effect.under-holder", "{during}: written under {holder}'s lease, "
                    "not {own}", lang=lang, during=during, holder=holder_id, own=own_id)))
                lease = Lease(lease.task_id, lease.run, holder[0])
        await leased_update(conn, lease, statement, during=during, **values)


# The export's writes before the lease (labs/queries.sql): by task id + run, whatever the
# status (P3, P5 broken on purpose), in place of the product's statement of that name.
_LEASELESS = {"progress": "leaseless_progress", "export_result": "leaseless_export_result"}


@dataclass(frozen=True, eq=False)
class LeaselessExport:
    """`lease-less-export`: the export's progress and result written by `task_id + run`
    only, the row count ignored; any other write is the product's (P3, P5 broken)."""

    effects: Effects = field(default_factory=list)

    async def __call__(self, conn: Any, lease: Lease, statement: str | None = None, *,
                       during: str = "write", **values: Any) -> None:
        if statement not in _LEASELESS or not isinstance(conn, psycopg.AsyncConnection):
            return await leased_update(conn, lease, statement, during=during, **values)
        params = {**values, "task_id": lease.task_id, "run": lease.run}
        rows = (await conn.execute(LAB_QUERIES[_LEASELESS[statement]], params)).rowcount
        self.effects.append(Effect(lambda lang=None: say(
            "fences.effect.by-task-and-run", "{during}: by task id + run, {rows} row(s)",
            lang=lang, during=during, rows=rows)))
        log.warning("counterexample.leaseless_write task_id=%s run=%s execution_id=%s "
                    "during=%s rows=%s", lease.task_id, lease.run, lease.execution_id, during,
                    rows)


@dataclass(frozen=True, eq=False)
class SeparateEffects:
    """A `teamdesk.tasks.reminder_effects.ReminderEffects`: the book's old effects (ch. 26
    §5), one statement each (labs/queries.sql), a duplicate notification skipped while the
    event and the version are written again (P10, P12 broken)."""

    effects: Effects = field(default_factory=list)

    async def __call__(self, conn: Any, *, ticket_id: int, team_id: str, revision: int,
                       recipient_id: str, message: str) -> None:
        values = {"ticket_id": ticket_id, "team_id": team_id, "revision": revision,
                  "recipient_id": recipient_id, "message": message}
        notified = (await conn.execute(LAB_QUERIES["old_notification"], values)).rowcount
        await conn.execute(LAB_QUERIES["old_event"], values)
        await conn.execute(LAB_QUERIES["old_version"], values)
        if notified != 1:
            self.effects.append(Effect(lambda lang=None: say(
                "fences.effect.duplicate-skipped", "notification: a duplicate, skipped by "
                "the unique constraint; event and version written again", lang=lang)))
            log.warning("counterexample.duplicate_notification_skipped ticket_id=%s "
                        "revision=%s", ticket_id, revision)


# ---------------------------------------------------------------- the retired listener


#: What a `failed_listener` does once the queue gave up on a job: `act(conn, event)` on a
#: connection of its own; `event` is what the queue's failed event carries — task_id,
#: run, error, exhausted; no execution_id (W2). What it returns goes to `on_done`.
FailedAct = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]


def failed_listener(ledger: Ledger, act: FailedAct, *,
                    hold: Callable[[], Awaitable[Any]] | None = None,
                    on_done: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """A worker's `failed` listener that, once the queue gave up on a job (exhausted) and
    after `hold` (the book's *late* callback, released once a newer executor has
    claimed), runs `act` on a connection of its own (`ledger.fresh_connection`, outside
    the pool the worker's jobs use); `on_done` hears what it returned."""
    pending: set[asyncio.Future] = set()

    def on_failed(job: Any, err: BaseException) -> None:
        if not is_exhausted(job, err):
            return
        data = job.data if isinstance(job.data, dict) else {}
        event = {"task_id": data.get("taskId"), "run": data.get("run"),
                 "error": f"{type(err).__name__}: {err}", "exhausted": True}

        async def run() -> None:
            if hold is not None:
                await hold()
            async with ledger.fresh_connection() as conn:
                done = await act(conn, dict(event))
            if on_done is not None:
                on_done(done)

        fut = asyncio.ensure_future(run())
        pending.add(fut)
        fut.add_done_callback(finished)

    def finished(fut: asyncio.Future) -> None:
        # An error of `act` (the old write) goes to the loop's handler now — a lab books it
        # (`labs.errors`) — rather than whenever the future is collected, if ever.
        pending.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            fut.get_loop().call_exception_handler({
                "message": "the failed listener's write raised", "exception": fut.exception(),
                "future": fut})

    return on_failed


async def _legacy_failed_write(conn: Any, event: dict[str, Any]) -> dict[str, Any]:
    values = {"task_id": event["task_id"], "run": event["run"],
              "last_error": event["error"][:500]}
    result = await conn.execute(LAB_QUERIES["legacy_failed"], values)
    listener_log.warning("counterexample.legacy_failed_write task_id=%s run=%s rows=%s",
                         values["task_id"], values["run"], result.rowcount)
    return {**values, "rows": result.rowcount}


def legacy_failed_listener(ledger: Ledger, *, hold: Callable[[], Awaitable[Any]] | None = None,
                           on_write: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """The retired listener (`failed_listener`): on exhaustion, FAILED by task id + run (no
    lease, raw text). In-process (a notebook, `labs.scenes.ch26d.LateCallback`) its write
    waits for `hold`, and `on_write` hears of each write (`task_id`, `run`, `rows`,
    `last_error`) when it landed; without them (the counterexample worker process) it
    writes at once."""
    return failed_listener(ledger, _legacy_failed_write, hold=hold, on_done=on_write)


def add_legacy_listener(worker: TaskWorker) -> None:
    """A `teamdesk.tasks.runner.WorkerHook`: the retired listener beside the W2 ones."""
    assert worker.ctx.ledger is not None
    worker.worker.on("failed", legacy_failed_listener(worker.ctx.ledger))
    listener_log.warning("counterexample.installed legacy-failed-listener")


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Counterexample:
    """One entry of `COUNTEREXAMPLES`: what it breaks, and what it runs instead of the
    product's parts. The fence and the effects step are built per use, each given the
    list it reports into (one list per switch in a lab, one per worker process)."""

    #: The rules it breaks, in a line (for the lab's printout).
    breaks: str
    #: Builds its fence (`Fence`) from an `Effects` list; None keeps `leased_update`.
    fence: Callable[[Effects], Fence] | None = None
    #: Builds its reminder effect-writing step (`ReminderEffects`); None keeps the product's.
    reminder_effects: Callable[[Effects], ReminderEffects] | None = None
    #: A listener of its own for a worker process's task worker (`Seams(on_worker=...)`).
    on_worker: WorkerHook | None = None

    @property
    def listener_only(self) -> bool:
        """True when it is a listener and no fence: a lab's executors cannot switch it on
        per write (a lab adds it to one worker instead, `ch26d.LateCallback`)."""
        return self.fence is None and self.reminder_effects is None


#: name → the old code it runs: every counterexample, in a lab and in a worker process.
COUNTEREXAMPLES: dict[str, Counterexample] = {
    "forgot-row-count": Counterexample(
        "a fenced UPDATE that matched 0 rows is ignored (breaks P3, P10)",
        fence=ForgotRowCount),
    "separate-effects": Counterexample(
        "the book's old reminder: notification (duplicates skipped), event and version as "
        "separate writes, the completion's row count ignored (breaks P3, P10, P12)",
        fence=ForgotRowCount, reminder_effects=SeparateEffects),
    "status-only-guard": Counterexample(
        "the fence checks id, run and RUNNING, not execution_id (breaks P3, P5)",
        fence=StatusOnlyGuard),
    "lease-less-export": Counterexample(
        "the export's progress and result written by task_id + run, no lease, row count "
        "ignored (breaks P3, P5)", fence=LeaselessExport),
    "legacy-failed-listener": Counterexample(
        "the retired failed listener: FAILED by task_id + run with the raw error text, no "
        "lease (breaks W2, W3, P8)", on_worker=add_legacy_listener),
}
#: Every valid counterexample name.
NAMES: tuple[str, ...] = tuple(COUNTEREXAMPLES)


def lookup(name: str) -> Counterexample:
    """The registry's entry for `name`; an unknown name fails here, naming the valid ones."""
    entry = COUNTEREXAMPLES.get(name)
    if entry is None:
        raise ValueError(say("fences.unknown", "unknown counterexample {name!r}; choose one "
                             "of {names}", name=name, names=listing(NAMES)))
    return entry


# ---------------------------------------------------------------- the learner's fences

#: The lease condition each fenced statement ends with (P3), the part a learner rewrites.
LEASE_CONDITION = re.compile(r"id = %\(task_id\)s AND run = %\(run\)s AND execution_id = "
                             r"%\(execution_id\)s\s+AND status = 'RUNNING'")
#: The parameters a condition may use: the lease's.
LEASE_PARAMS = frozenset({"task_id", "run", "execution_id"})


def where_fence(where: str) -> Fence:
    """A `Fence` whose fenced statements use the condition `where` instead of the
    product's lease condition (notebook 26b's exercise). `where` may name `%(task_id)s`,
    `%(run)s` and `%(execution_id)s` (the lease the executor holds) and the table's
    columns. A write that matches no row raises `LeaseLost`, as the product's does."""
    if not isinstance(where, str) or not where.strip():
        raise ValueError(say("fences.where.string", "write the condition as a string, "
                             "e.g. \"id = %(task_id)s AND …\""))
    text = " ".join(where.split())
    if ";" in text:
        raise ValueError(say("fences.where.one", "one condition, without ';'"))
    unknown = set(re.findall(r"%\((\w+)\)s", text)) - LEASE_PARAMS
    if unknown:
        raise ValueError(say("fences.where.unknown-parameter", "unknown parameter(s) {unknown}; "
                             "the lease has %(task_id)s, %(run)s and %(execution_id)s",
                             unknown=', '.join(sorted(unknown))))

    async def fence(conn: Any, lease: Lease, statement: str | None = None, *,
                    during: str = "write", **values: Any) -> None:
        if not isinstance(conn, psycopg.AsyncConnection) or statement not in FENCED:
            return await leased_update(conn, lease, statement, during=during, **values)
        sql, n = LEASE_CONDITION.subn(lambda _: f"({text})", QUERIES[statement])
        if n != 1:  # pragma: no cover - guarded by test_every_fenced_statement_has_it
            raise RuntimeError(f"{statement} has no lease condition to replace")
        cur = await conn.execute(sql, {**values, **lease.params()})
        if cur.rowcount != 1:
            raise LeaseLost(lease, during)

    return fence


#: The learner's commit gate (notebook 26c's exercise): called inside the reminder's
#: transaction right after the completion UPDATE (fenced by the lease and RUNNING) with the
#: number of rows it matched and the executor's lease. Returning lets the transaction
#: commit; raising rolls it back.
CommitGate = Callable[[int, Lease], None]


def gate_fence(gate: CommitGate) -> Fence:
    """A `Fence` whose reminder completion is decided by `gate`: the fenced
    `reminder_completion` statement runs as in the product (P10), and its row count goes
    to `gate` instead of `leased_update`'s own check. Every other fenced write (an
    export's, an error report) keeps the product's fence. For `Lab.use_fence`."""

    async def fence(conn: Any, lease: Lease, statement: str | None = None, *,
                    during: str = "write", **values: Any) -> None:
        if statement != "reminder_completion" or not isinstance(conn, psycopg.AsyncConnection):
            return await leased_update(conn, lease, statement, during=during, **values)
        cursor = await execute(conn, statement, {**values, **lease.params()})
        gate(cursor.rowcount, lease)

    return fence
