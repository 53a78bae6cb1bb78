"""The invariant checker: reads the ledger and the side effects after a run (changes
nothing) and returns typed `Violation`s, each naming the `Invariant` it breaks — so the
invariant table groups by `.invariant`, never by reading the text back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from labs import statements
from labs.chaos.holds import Crossing
from labs.chaos.plan import EXPORT_TEAM, REMINDER_TEAM
from labs.chaos.workload import Expected, fingerprint
from labs.history import short
from labs.i18n import say
from teamdesk.db.models import BackgroundTask, TaskStatus, TaskType, Ticket
from teamdesk.services import exports as export_services
from teamdesk.tasks.dispatcher import QUEUE_FAILED_ERROR
from teamdesk.tasks.errors import RejectReason, TaskRejected, retryable_error_text
from teamdesk.tasks.exports import to_csv
from teamdesk.tasks.queue import MAX_TASK_ATTEMPTS

#: Every rejection text a FAILED task may carry (P8).
REJECT_TEXTS = {TaskRejected(r).last_error for r in RejectReason}
#: Every `last_error` a FAILED task may carry (P7, P8, D4).
FIXED_FAILED_TEXTS = REJECT_TEXTS | {QUEUE_FAILED_ERROR} | {
    retryable_error_text(a, MAX_TASK_ATTEMPTS, True) for a in range(1, MAX_TASK_ATTEMPTS + 1)}


class Invariant(Enum):
    """What must hold after any chaos run, with the rules each stands for."""

    #: The ledger holds exactly the tasks the services created, all still run 0.
    NOTHING_LOST = ("nothing lost, no run+1", "O1, D6")
    #: Every task COMPLETED (progress 100) or FAILED, none with a lease left.
    TERMINAL = ("every task terminal, no lease left", "W3, P6, D6")
    #: FAILED only with a fixed readable text; rejected only when authorization changed.
    FIXED_TEXT = ("FAILED only with a fixed readable text", "P7, P8, R1")
    #: Each COMPLETED export's CSV equals a fresh recomputation over unchanged tickets.
    CSV = ("each CSV equals a fresh recomputation", "P5, P12, X1")
    #: Each current reminder revision delivered exactly once; superseded/closed never.
    REMINDERS = ("each current reminder sent once, stale ones never", "P10, M1, O3")
    #: No COMPLETED row changed after it was first seen.
    UNCHANGED = ("no COMPLETED row changed afterwards", "P1, D3, P12")
    #: Every result was written by the execution that held the newest claim then: never
    #: over a newer execution's lease or result (`task_id + run` is not a lease).
    CLOBBER = ("no result written over a newer lease", "P3, P5, W2")
    #: The run itself: workers exit as W4 says, no dispatcher fault of its own, settled.
    RUN = ("the run itself (workers, settling)", "W4, D8")

    def __init__(self, title: str, rules: str) -> None:
        #: The name the invariant table shows.
        self.title = title
        #: The contract ids it checks.
        self.rules = rules


#: The invariants in the table's order.
INVARIANTS: tuple[Invariant, ...] = tuple(Invariant)


@dataclass(frozen=True)
class Violation:
    """One thing the checker (or the run) found broken."""

    #: The invariant it breaks.
    invariant: Invariant
    #: The task it is about, or None (a ticket, a worker, the run).
    task_id: str | None
    #: What is wrong, readable; without the task id, which `str()` puts in front.
    text: str

    def __str__(self) -> str:
        return f"{self.task_id}: {self.text}" if self.task_id else self.text


def invariant_rows(violations: Sequence[Violation]) -> list[dict[str, Any]]:
    """One row per invariant, in `INVARIANTS` order: invariant, rules, violations, example
    (the first violation's line)."""
    groups: dict[Invariant, list[Violation]] = {inv: [] for inv in INVARIANTS}
    for v in violations:
        groups[v.invariant].append(v)
    return [{"invariant": inv.title, "rules": inv.rules, "violations": len(groups[inv]),
             "example": str(groups[inv][0])[:90] if groups[inv] else ""}
            for inv in INVARIANTS]


def _snapshot_columns() -> list[Any]:
    """Every column of the ledger, with the CSV as its md5 (a snapshot stays small)."""
    t = BackgroundTask
    return [func.md5(t.result_csv).label("result_csv_md5") if c.name == "result_csv" else c
            for c in t.__table__.columns]


SNAPSHOT_NAMES = [("result_csv_md5" if c.name == "result_csv" else c.name)
                  for c in BackgroundTask.__table__.columns]


async def completed_rows(sessions: async_sessionmaker[AsyncSession],
                         skip: set[str] | None = None) -> dict[str, tuple]:
    """COMPLETED rows (all columns, the CSV as md5) for "never changed afterwards";
    `skip`: ids already snapshotted."""
    stmt = select(*_snapshot_columns()).where(BackgroundTask.status == TaskStatus.COMPLETED)
    if skip:
        stmt = stmt.where(BackgroundTask.id.not_in(list(skip)))
    async with sessions() as s:
        rows = (await s.execute(stmt)).all()
    return {r[0]: tuple(r) for r in rows}


def clobbered(history: Sequence[Crossing]) -> dict[str, str]:
    """Tasks a result was written for by an execution whose lease a newer claim had
    replaced (P3, P5, W2): task id → what happened. `history` is the crossings the
    workers recorded (`labs.chaos.holds`): each claim (a new lease) and each result
    write, with its execution id and wall time.

    Walked in time order, the newest claim of a task run is the lease that may write;
    a result written by any other execution went over a newer lease (it was still
    RUNNING) or a newer result (already COMPLETED). With the product's fence this
    cannot happen: a write of a replaced lease matches 0 rows (LeaseLost, P6), and
    after a COMPLETED write no claim matches (P2)."""
    newest: dict[tuple[str, int], Crossing] = {}
    found: dict[str, str] = {}
    for c in sorted(history, key=lambda c: c.t):
        key = (c.task_id, c.run)
        if c.kind == "claim":
            newest[key] = c
            continue
        lease = newest.get(key)
        if lease is not None and lease.execution_id != c.execution_id:
            found.setdefault(c.task_id, say(
                "chaos.checker.clobber", "result written by execution {execution} ({worker}) "
                "over the newer lease {newer} ({newer_worker}, claimed {seconds:.2f} s "
                "before)", execution=short(c.execution_id), worker=c.worker,
                newer=short(lease.execution_id), newer_worker=lease.worker,
                seconds=c.t - lease.t))
    return found


async def ledger_rows(sessions: async_sessionmaker[AsyncSession]) -> dict[str, dict[str, Any]]:
    """The ledger after a run, task id → its columns (the CSV left out), for an invariant
    written over the rows and the history (notebook 90's exercise)."""
    cols = [c for c in BackgroundTask.__table__.columns if c.name != "result_csv"]
    async with sessions() as s:
        rows = (await s.execute(select(*cols))).mappings().all()
    return {r["id"]: {k: getattr(v, "value", v) for k, v in r.items()} for r in rows}


async def check_invariants(sessions: async_sessionmaker[AsyncSession], expected: Expected,
                           completed_seen: dict[str, tuple],
                           history: Sequence[Crossing] | None = None,
                           ) -> tuple[list[Violation], Counter, Counter]:
    """(violations, tasks by "TYPE STATUS", FAILED texts). Reads only; changes nothing.
    `history` (the workers' recorded crossings) adds the lease-clobber check; without
    it that invariant is not checked."""
    async with sessions() as s:
        tasks = (await s.scalars(select(BackgroundTask))).all()
    by_status: Counter = Counter(f"{t.type.value} {t.status.value}" for t in tasks)
    failed_texts: Counter = Counter(t.last_error for t in tasks if t.status == TaskStatus.FAILED)
    v = _check_rows(tasks, expected)
    v.extend(await _check_exports(sessions, tasks, expected))
    v.extend(await _check_reminders(sessions, tasks, expected))
    now_rows = await completed_rows(sessions)
    for task_id, seen in completed_seen.items():
        if now_rows.get(task_id) != seen:
            v.append(Violation(Invariant.UNCHANGED, task_id, say(
                "chaos.checker.changed", "a COMPLETED row changed afterwards ({what})",
                what=_diff(seen, now_rows.get(task_id)))))
    if history is not None:
        v.extend(Violation(Invariant.CLOBBER, task_id, what)
                 for task_id, what in clobbered(history).items())
    return v, by_status, failed_texts


def _check_rows(tasks: Sequence[BackgroundTask], expected: Expected) -> list[Violation]:
    """Nothing lost, nothing extra, no run+1; terminal, no lease; FAILED texts fixed."""
    v: list[Violation] = []
    ids = {t.id for t in tasks}
    if ids != set(expected.tasks):
        missing, extra = set(expected.tasks) - ids, ids - set(expected.tasks)
        v.append(Violation(Invariant.NOTHING_LOST, None, say(
            "chaos.checker.count", "task count {count} != created {created}; missing "
            "{missing}, extra {extra}", count=len(ids), created=len(expected.tasks),
            missing=sorted(missing)[:5], extra=sorted(extra)[:5])))
    for t in tasks:
        if t.run != 0:
            v.append(Violation(Invariant.NOTHING_LOST, t.id, say(
                "chaos.checker.run", "run {run}, but nobody retried it (D6 must keep the run)",
                run=t.run)))
        if t.status not in (TaskStatus.COMPLETED, TaskStatus.FAILED):
            v.append(Violation(Invariant.TERMINAL, t.id, say(
                "chaos.checker.not-terminal", "not terminal ({status}, progress {progress})",
                status=t.status.value, progress=t.progress)))
            continue
        if t.execution_id is not None:
            v.append(Violation(Invariant.TERMINAL, t.id, say(
                "chaos.checker.leased", "{status} but still leased ({execution})",
                status=t.status.value, execution=short(t.execution_id))))
        if t.status == TaskStatus.COMPLETED and t.progress != 100:
            v.append(Violation(Invariant.TERMINAL, t.id, say(
                "chaos.checker.progress", "COMPLETED with progress {progress}",
                progress=t.progress)))
        if t.status == TaskStatus.FAILED:
            if t.last_error not in FIXED_FAILED_TEXTS:
                v.append(Violation(Invariant.FIXED_TEXT, t.id, say(
                    "chaos.checker.text", "FAILED with a text that is not one of the fixed "
                    "ones: {text!r}", text=t.last_error)))
            if t.type == TaskType.EXPORT and t.result_csv is not None:
                v.append(Violation(Invariant.FIXED_TEXT, t.id, say(
                    "chaos.checker.failed-csv", "FAILED export holds a CSV")))
        kind, rejected = expected.tasks.get(t.id, ("?", None))
        if kind == "export" and rejected and t.status == TaskStatus.COMPLETED:
            v.append(Violation(Invariant.FIXED_TEXT, t.id, say(
                "chaos.checker.demoted", "export of the demoted agent COMPLETED; it must be "
                "rejected")))
        if (kind == "export" and not rejected and t.status == TaskStatus.FAILED
                and t.last_error in REJECT_TEXTS):
            v.append(Violation(Invariant.FIXED_TEXT, t.id, say(
                "chaos.checker.rejected", "rejected ({text!r}) though its authorization and "
                "size never changed", text=t.last_error)))
    return v


async def _check_exports(sessions: async_sessionmaker[AsyncSession],
                         tasks: Sequence[BackgroundTask], expected: Expected
                         ) -> list[Violation]:
    """Each COMPLETED export's CSV equals a fresh recomputation over unchanged data."""
    v: list[Violation] = []
    if await fingerprint(sessions) != expected.export_fingerprint:
        v.append(Violation(Invariant.CSV, None, say(
            "chaos.checker.tickets-changed", "the {team} tickets changed during the run: the "
            "CSV check is void", team=EXPORT_TEAM)))
    async with sessions() as s:
        for t in tasks:
            if t.type != TaskType.EXPORT or t.status != TaskStatus.COMPLETED:
                continue
            fresh = to_csv(await export_services.matching_tickets(
                s, t.team_id, t.owner_id, t.scope,
                export_services.validate_filters(t.filters)))
            if t.result_csv != fresh:
                v.append(Violation(Invariant.CSV, t.id, say(
                    "chaos.checker.csv", "CSV differs from a fresh recomputation of "
                    "{filters} ({stored} vs {fresh} lines)", filters=t.filters,
                    stored=len((t.result_csv or "").splitlines()),
                    fresh=len(fresh.splitlines()))))
            if t.expires_at is None or not t.result_summary:
                v.append(Violation(Invariant.CSV, t.id, say(
                    "chaos.checker.no-expiry", "COMPLETED export without expiry or summary")))
    return v


def _diff(before: tuple, after: tuple | None) -> str:
    if after is None:
        return say("chaos.checker.gone", "it is no longer COMPLETED or gone")
    return ", ".join(n for n, a, b in zip(SNAPSHOT_NAMES, before, after, strict=True)
                     if a != b)


@dataclass
class _ReminderFacts:
    """What the reminder team's database says, read once for the reminder checks."""

    tickets: dict[str, Ticket]
    #: (ticket, revision) → notifications written.
    notes: Counter
    #: (ticket, revision) → `reminder_sent` events.
    sent: Counter
    #: ticket → business events (anything but `reminder_sent`).
    business: Counter
    #: ticket → current reminders delivered (filled by the per-task check).
    delivered: Counter = field(default_factory=Counter)


async def _reminder_facts(sessions: async_sessionmaker[AsyncSession]) -> _ReminderFacts:
    async with sessions() as s:
        tickets = {t.id: t for t in (await s.scalars(
            select(Ticket).where(Ticket.team_id == REMINDER_TEAM))).all()}
        team = {"team": REMINDER_TEAM}
        notes = Counter({(r[0], r[1]): r[2] for r in
                         (await statements.run(s, "reminder_notifications", team)).all()})
        events = (await statements.run(s, "reminder_events", team)).all()
    sent: Counter = Counter()
    business: Counter = Counter()
    for ticket_id, kind, data in events:
        if kind == "reminder_sent":
            sent[(ticket_id, (data or {}).get("revision"))] += 1
        else:
            business[ticket_id] += 1
    return _ReminderFacts(tickets, notes, sent, business)


def _check_reminder_task(t: BackgroundTask, f: _ReminderFacts,
                         bad: Callable[[str | None, str], None]) -> None:
    """P10, M1 for one reminder task: exactly one effect of each kind for the current
    revision's completion, none otherwise."""
    ticket = f.tickets.get(t.ticket_id)
    if ticket is None:
        bad(t.id, say("chaos.checker.ticket-gone", "its ticket {ticket} is gone",
                      ticket=t.ticket_id))
        return
    key = (ticket.id, t.reminder_revision)
    current = (t.reminder_revision == ticket.reminder_revision
               and ticket.status.value != "CLOSED" and ticket.deleted_at is None)
    if current and t.status == TaskStatus.COMPLETED:
        f.delivered[ticket.id] += 1
        if not (t.result_summary or "").startswith("Reminder sent"):
            bad(t.id, say("chaos.checker.not-sent", "current revision COMPLETED without "
                          "sending: {summary!r}", summary=t.result_summary))
        if f.notes[key] != 1 or f.sent[key] != 1:
            bad(t.id, say("chaos.checker.current-effects", "current revision {revision} of "
                          "ticket {ticket} produced {notes} notification(s) and {sent} "
                          "reminder_sent event(s), expected exactly one each",
                          revision=key[1], ticket=key[0], notes=f.notes[key],
                          sent=f.sent[key]))
        return
    if f.notes[key] or f.sent[key]:
        revision, ticket_id, notes, sent = key[1], key[0], f.notes[key], f.sent[key]
        bad(t.id, say("chaos.checker.failed-effects", "FAILED current revision {revision} of "
                      "ticket {ticket} produced {notes} notification(s), {sent} event(s); "
                      "expected none", revision=revision, ticket=ticket_id, notes=notes,
                      sent=sent) if current else
            say("chaos.checker.stale-effects", "superseded/closed revision {revision} of "
                "ticket {ticket} produced {notes} notification(s), {sent} event(s); expected "
                "none", revision=revision, ticket=ticket_id, notes=notes, sent=sent))
    if (t.status == TaskStatus.COMPLETED
            and not (t.result_summary or "").startswith("No reminder sent")):
        bad(t.id, say("chaos.checker.stale-completed", "stale reminder COMPLETED as "
                      "{summary!r}", summary=t.result_summary))


def _check_reminder_ticket(ticket_id: str, ticket: Ticket, f: _ReminderFacts,
                           expected: Expected, bad: Callable[[str | None, str], None]) -> None:
    """M1 per ticket: each delivered reminder bumped the version once, wrote one
    notification, and at most one reminder of a ticket was delivered."""
    delivered = f.delivered[ticket_id]
    bumps = ticket.version - f.business[ticket_id]
    if bumps != delivered:
        bad(None, say("chaos.checker.bumps", "ticket {ticket}: version {version} = "
                      "{business} business change(s) + {bumps} bump(s), but {delivered} "
                      "reminder(s) delivered", ticket=ticket_id, version=ticket.version,
                      business=f.business[ticket_id], bumps=bumps, delivered=delivered))
    if delivered > 1:
        bad(None, say("chaos.checker.delivered-twice", "ticket {ticket}: {delivered} "
                      "current reminders delivered", ticket=ticket_id, delivered=delivered))
    total = sum(n for (tid, _), n in f.notes.items() if tid == ticket_id)
    if total != delivered:
        bad(None, say("chaos.checker.notifications", "ticket {ticket}: {total} "
                      "notification(s) for {delivered} delivered reminder(s)",
                      ticket=ticket_id, total=total, delivered=delivered))
    want = expected.tickets.get(ticket_id)
    if want is not None and (ticket.reminder_revision, ticket.status.value == "CLOSED",
                             ticket.due_at is not None) != want:
        bad(None, say("chaos.checker.ticket-changed", "ticket {ticket}: revision/closed/due "
                      "changed after creation", ticket=ticket_id))


async def _check_reminders(sessions: async_sessionmaker[AsyncSession],
                           tasks: Sequence[BackgroundTask], expected: Expected
                           ) -> list[Violation]:
    """Effects once per current revision, none for superseded or closed ones (P10, M1)."""
    v: list[Violation] = []

    def bad(task_id: str | None, what: str) -> None:
        v.append(Violation(Invariant.REMINDERS, task_id, what))

    facts = await _reminder_facts(sessions)
    for t in tasks:
        if t.type == TaskType.REMINDER:
            _check_reminder_task(t, facts, bad)
    for ticket_id, ticket in facts.tickets.items():
        _check_reminder_ticket(ticket_id, ticket, facts, expected, bad)
    return v
