"""A seeded chaos run: real worker processes, real faults, then invariants over the ledger.

The reusable part of `python -m benchmarks.chaos` (its command line stays there), used by
that benchmark, by `tests/integration/test_chaos.py` and by `notebooks/90-chaos.ipynb`:

    lab = await Lab.open("chaos", seed=False, private_redis=True)
    report = await run_chaos(lab.settings, ChaosConfig(seed=7, workers=2, tasks=30, duration=4),
                             redis=private_restarter(lab.private_redis))
    report.invariant_table()     # one row per invariant: its rules, violations found
    plot_swimlanes(report)       # faults per worker lane, Redis lane, completions
    ChaosConfig(..., counterexample="legacy-failed-listener")  # same seed, W2 broken

The world (database + queue prefix) belongs to the caller, fresh for each run (a `Lab`
opened with `seed=False`, or a cloned database): the run seeds its own teams.

K `teamdesk worker` subprocesses (each with its own dispatch tick) work on M tasks created
through the product's services: exports with varied filters and scopes (some by an agent
who is demoted before the run, so they must be rejected), and reminders — a ticket's
creation, due-date changes that supersede earlier revisions, and closings, each group in
one transaction. About 40 % of the tasks exist before the workers start; the rest arrive
in waves during the fault window, while the faults strike.

Faults follow a schedule made only from (seed, K, D, kinds) — same arguments, same
schedule, printed before the run (`--dry-run` prints it and stops):

- `sigkill` — SIGKILL a worker process, restart it after a short pause;
- `sigterm` — SIGTERM a worker (it drains for at most 2 s, exit 0 or 3), restart it;
- `redis`   — stop the Redis server and start it again (it comes back empty). Always a
  server of the run's own (`labs.private_redis`, the same binary as the embedded
  default, on its own port), so the restart hurts no open lab, test or notebook: the
  caller's (`redis=private_restarter(lab.private_redis)`, as 90-chaos does), or one the
  run starts for itself and removes afterwards, whatever REDIS_URL says. Where no server
  binary exists the run refuses, or with `redis_optional` drops the kind with a note;
- `sigstop` — (opt-in, not in the default `KINDS`) SIGSTOP a worker for 1.5–2.5 s, longer
  than its 1 s lock, then SIGCONT: its job stalls, the other worker may take it over,
  and the frozen executor's late writes must match nothing (P3, P6);
- `cut`     — `labs.faults.RedisProxy` sits between each worker and Redis; a cut resets
  that worker's Redis connections and refuses new ones for a while, then heals. Dropped
  (and said so) if `labs.faults` is missing or its proxy does not work.

(`--dry-run` assumes every requested kind is available; a run without a working proxy
drops `cut` and says so, which changes the schedule.) The schedule's offsets and hold
times are the faults themselves; nothing waits to order events. A worker that exits by
itself is restarted after 0.5 s, as a process supervisor would, and reported as a finding.
After the window: Redis up, proxies healed, every worker running, then a bounded settle
(poll the ledger) until every task is COMPLETED or FAILED. Then the invariants:

- nothing lost: the ledger holds exactly the tasks the services created, all run 0;
- every task terminal, no lease left; FAILED only with one of the fixed readable texts,
  and never a rejection text for a task whose authorization did not change;
- each export's CSV equals a fresh recomputation (`export_query` + `to_csv`) — the
  exported team's tickets are not changed during the run (a fingerprint says so);
- each current reminder revision: COMPLETED → exactly one notification, one
  `reminder_sent` event, one version bump; FAILED → none; superseded or closed: none;
- no COMPLETED row changed after it was first seen (snapshots every second);

then a summary (faults by kind, tasks by status, FAILED texts, recovery notes from the
worker logs) and exit 0, or 1 on any violation (2: refused or bad arguments). A task may
legitimately end FAILED when faults used up its attempts; that is counted, not hidden.

Short timings through the environment (Q2), printed with the run: lock 1 s, stalled check
100 ms, tick 0.2 s, stale RUNNING age 3 s, re-dispatch age 2 s, backoff 50 ms, Redis call
timeout 1 s, heartbeat TTL 1.5 s, drain timeout 2 s, export batch 10.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import re
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from devkit.services import ServiceError
from labs.private_redis import PrivateRedis, PrivateRedisError
from labs.procs import WorkerProc, stop_all, wait_heartbeats
from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, Role, Scope, TaskStatus, TaskType, Ticket
from teamdesk.seed import EPOCH, seed_demo
from teamdesk.services import exports as export_services
from teamdesk.services import teams as team_services
from teamdesk.services import tickets as ticket_services
from teamdesk.tasks.dispatcher import QUEUE_FAILED_ERROR
from teamdesk.tasks.errors import RejectReason, TaskRejected, retryable_error_text
from teamdesk.tasks.exports import to_csv
from teamdesk.tasks.queue import MAX_TASK_ATTEMPTS, create_task_queue, task_job_id

CHAOS_TIMINGS: dict[str, str] = {
    "TEAMDESK_LOCK_DURATION_MS": "1000",
    "TEAMDESK_STALLED_INTERVAL_MS": "100",
    "TEAMDESK_DISPATCH_TICK_S": "0.2",
    "TEAMDESK_STALE_RUNNING_AGE_S": "3",
    "TEAMDESK_REDISPATCH_AGE_S": "2",
    "TEAMDESK_BACKOFF_DELAY_MS": "50",
    "TEAMDESK_REDIS_TIMEOUT_S": "1",
    "TEAMDESK_HEARTBEAT_TTL_S": "1.5",
    "TEAMDESK_DRAIN_TIMEOUT_S": "2",
    "TEAMDESK_EXPORT_BATCH_SIZE": "10",
}
#: The default fault kinds (the benchmark's figures were measured with these).
KINDS = ("sigkill", "sigterm", "redis", "cut")
#: Every kind; `sigstop` (freeze a worker beyond its lock, then SIGCONT) is opt-in so the
#: default schedules stay what they were.
ALL_KINDS = (*KINDS, "sigstop")
_WEIGHTS = {"sigkill": 3, "sigterm": 2, "redis": 1, "cut": 2, "sigstop": 2}
#: Counterexamples a run can switch on: the worker processes of that run only are
#: started through `labs.counterexample_worker` with that change.
COUNTEREXAMPLES = ("legacy-failed-listener",)

EXPORT_TEAM = "acme"
REMINDER_TEAM = "ops"
#: The agent whose team-wide exports are requested, then who is demoted to customer before
#: the workers start: those exports must end rejected (R1, P8).
DEMOTED = "cai"
#: Tickets of the exported team: enough that a broad export takes dozens of batches, so
#: faults often strike while an export is running.
SEED_TICKETS = 600

#: Every `last_error` a FAILED task may carry (P7, P8, D4).
REJECT_TEXTS = {TaskRejected(r).last_error for r in RejectReason}
FIXED_FAILED_TEXTS = REJECT_TEXTS | {QUEUE_FAILED_ERROR} | {
    retryable_error_text(a, MAX_TASK_ATTEMPTS, True) for a in range(1, MAX_TASK_ATTEMPTS + 1)}


class ChaosRefused(RuntimeError):
    """The run would do something it must not (e.g. restart a Redis that is not ours)."""


# ---------------------------------------------------------------- the schedule


@dataclass(frozen=True)
class FaultEvent:
    #: Seconds after the fault window opens.
    at: float
    kind: str
    #: Worker index for sigkill / sigterm / cut; None for redis.
    worker: int | None
    #: sigkill/sigterm: pause before the restart; redis: downtime; cut: how long cut.
    hold: float

    def describe(self) -> str:
        who = f"w{self.worker + 1}" if self.worker is not None else "redis"
        what = {"sigkill": "SIGKILL, restart after", "sigterm": "SIGTERM, restart after",
                "redis": "stop Redis, start again after", "cut": "cut its Redis link for",
                "sigstop": "SIGSTOP beyond its lock, SIGCONT after"}
        return f"+{self.at:6.2f} s  {self.kind:7s} {who:5s} {what[self.kind]} {self.hold:.2f} s"


def make_schedule(seed: int, workers: int, duration: float,
                  kinds: tuple[str, ...] = KINDS) -> list[FaultEvent]:
    """The fault schedule: a pure function of its arguments (same seed, same schedule).

    Faults arrive about every 1.2 s (exponential gaps) from 0.5 s until 0.5 s before the
    window closes; the first ones cover every kind once (in a seeded order), the rest are
    drawn by weight (sigkill 3, sigterm 2, cut 2, redis 1). Redis outages never overlap
    and keep 1 s between them."""
    if workers < 1 or duration <= 0:
        raise ValueError("workers must be >= 1 and duration > 0")
    unknown = set(kinds) - set(ALL_KINDS)
    if unknown or not kinds:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; choose from {ALL_KINDS}")
    rng = random.Random(f"teamdesk-chaos:{seed}:{workers}:{duration}:{','.join(kinds)}")
    first = rng.sample(list(kinds), len(kinds))
    events: list[FaultEvent] = []
    redis_free_at = 0.0
    t = 0.5
    while t <= duration - 0.5:
        kind = first.pop(0) if first else rng.choices(
            list(kinds), weights=[_WEIGHTS[k] for k in kinds])[0]
        if kind == "redis":
            hold = round(rng.uniform(0.3, 1.5), 2)
            if t < redis_free_at:
                kind = "sigkill" if "sigkill" in kinds else kind
            else:
                redis_free_at = t + hold + 1.0
                events.append(FaultEvent(round(t, 2), "redis", None, hold))
        if kind != "redis":
            if kind == "sigstop":  # frozen for longer than the 1 s lock: the job stalls
                hold = round(rng.uniform(1.5, 2.5), 2)
            else:
                hold = round(rng.uniform(0.3, 2.0) if kind == "cut"
                             else rng.uniform(0.1, 1.0), 2)
            events.append(FaultEvent(round(t, 2), kind, rng.randrange(workers), hold))
        t += rng.expovariate(1 / 1.2) + 0.1
    return events


# ---------------------------------------------------------------- the task plan


@dataclass(frozen=True)
class ExportSpec:
    user: str
    scope: Scope
    filters: dict[str, Any]

    @property
    def rejected(self) -> bool:
        return self.user == DEMOTED


@dataclass(frozen=True)
class ReminderSpec:
    creator: str
    assignee: str | None
    #: Due dates in seconds from creation: the first at creation, each later one a
    #: `set_due_date` in the same transaction (None clears the due date).
    dues: tuple[float | None, ...]
    close: bool

    @property
    def tasks(self) -> int:
        return sum(1 for d in self.dues if d is not None)


Spec = ExportSpec | ReminderSpec

_TEXTS = ("Login", "Invoice", "Export", "slow", "error 500", "#1", "Safari", "50%", "e_mail",
          "Two-factor", "total")


def _filters(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rng.random() < 0.5:
        out["status"] = rng.sample(["OPEN", "PENDING", "CLOSED"], rng.randint(1, 2))
    if rng.random() < 0.4:
        out["priority"] = rng.sample(["LOW", "NORMAL", "HIGH", "URGENT"], rng.randint(1, 3))
    if rng.random() < 0.35:
        out["text"] = rng.choice(_TEXTS)
    if rng.random() < 0.35:
        start = rng.randint(0, 14)
        out["created_from"] = (EPOCH.date() + timedelta(days=start)).isoformat()
        out["created_to"] = (EPOCH.date() + timedelta(days=start + rng.randint(0, 6))
                             ).isoformat()
    if rng.random() < 0.2:
        out["assignee_id"] = rng.choice(["ben", "cai"])
    return out


def make_plan(seed: int, tasks: int) -> list[Spec]:
    """What the services will be asked to do, in order: exactly `tasks` task rows."""
    rng = random.Random(f"teamdesk-chaos-plan:{seed}:{tasks}")
    plan: list[Spec] = []
    left = tasks
    while left > 0:
        if rng.random() < 0.5 or left == 1:
            user, scope = rng.choice([("ben", Scope.TEAM), ("ada", Scope.TEAM),
                                      ("ben", Scope.OWN), ("dan", Scope.OWN),
                                      ("eve", Scope.OWN), ("fay", Scope.OWN),
                                      (DEMOTED, Scope.TEAM)])
            plan.append(ExportSpec(user, scope, _filters(rng)))
            left -= 1
            continue
        due = rng.choice([-60.0, -5.0, 0.0, 1.0, 3.0])
        dues: list[float | None] = [due]
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            dues.append(None if rng.random() < 0.15 else rng.choice([-30.0, 0.0, 2.0]))
        spec = ReminderSpec(rng.choice(["dan", "eve", "fay"]),
                            rng.choice(["ben", "cai", None]), tuple(dues),
                            close=rng.random() < 0.12)
        if spec.tasks > left:
            spec = ReminderSpec(spec.creator, spec.assignee, (due,), spec.close)
        plan.append(spec)
        left -= spec.tasks
    return plan


# ---------------------------------------------------------------- configuration, report


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    workers: int = 2
    tasks: int = 120
    duration: float = 10.0
    kinds: tuple[str, ...] = KINDS
    #: Bound of the settle phase after the fault window.
    settle: float = 90.0
    #: Share of the tasks created before the workers start; the rest arrive in waves.
    upfront: float = 0.4
    waves: int = 4
    #: Seeded tickets of the exported team.
    export_tickets: int = SEED_TICKETS
    #: Drop the `redis` kind with a printed note, instead of refusing the run, when this
    #: Redis is not ours to restart (REDIS_URL set): what a notebook wants.
    redis_optional: bool = False
    #: A counterexample of `COUNTEREXAMPLES` switched on in this run's worker processes.
    counterexample: str | None = None


@dataclass
class Expected:
    """What the run asked for, to check the ledger against."""

    #: task id -> ("export", rejected?) or ("reminder", ticket id)
    tasks: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: reminder ticket id -> (final revision, closed?, due set?)
    tickets: dict[int, tuple[int, bool, bool]] = field(default_factory=dict)
    export_fingerprint: str = ""


@dataclass
class ChaosReport:
    config: ChaosConfig
    schedule: list[FaultEvent]
    executed: Counter = field(default_factory=Counter)
    #: Process/link faults that struck while at least one task was RUNNING.
    struck_running: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    #: Deviations worth a look that are not ledger invariants (e.g. an idle worker whose
    #: drain timed out): printed, not counted as violations.
    findings: list[str] = field(default_factory=list)
    by_status: Counter = field(default_factory=Counter)
    failed_texts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    settled: bool = False
    settle_s: float = 0.0
    snapshots: int = 0
    log_dir: Path | None = None
    expected: Expected | None = None
    completed_seen: dict[str, tuple] = field(default_factory=dict)
    #: Fault spans for the swimlanes: (start, end, lane, kind), offsets from the window's
    #: start; lane is a worker's name or "redis".
    timeline: list[tuple[float, float, str, str]] = field(default_factory=list)
    #: (offset, COMPLETED rows so far) at each snapshot.
    completions: list[tuple[float, int]] = field(default_factory=list)
    #: The kinds really used (after dropping unavailable ones).
    kinds: tuple[str, ...] = ()
    #: Dispatch faults (D8) in the workers' logs, split: struck while this run had that
    #: worker's Redis broken (Redis stopped, its link cut, the worker frozen) — the fault
    #: injected — and any other, a dispatcher fault of our own (its log lines).
    dispatch_faults_injected: int = 0
    dispatch_faults_own: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.settled and not self.violations

    def invariant_rows(self) -> list[dict[str, Any]]:
        """One row per invariant: the rules it checks and the violations found."""
        return invariant_rows(self.violations)

    def invariant_table(self) -> Any:
        """`invariant_rows()` as a pandas DataFrame (for a notebook)."""
        import pandas as pd

        return pd.DataFrame(self.invariant_rows()).set_index("invariant")


#: The checker's invariants, each with the rules it stands for and how to recognise its
#: violations among the checker's messages (first match wins; the last catches the rest).
INVARIANTS: list[tuple[str, str, re.Pattern[str]]] = [
    ("nothing lost, no run+1", "O1, D6", re.compile(r"task count|: run \d+, but nobody")),
    ("every task terminal, no lease left", "W3, P6, D6", re.compile(
        r"not terminal|still leased|COMPLETED with progress")),
    ("FAILED only with a fixed readable text", "P7, P8, R1", re.compile(
        r"FAILED with a text|FAILED export holds|rejected \(|demoted agent COMPLETED")),
    ("each CSV equals a fresh recomputation", "P5, P12, X1", re.compile(
        r"CSV differs|tickets changed during the run|without expiry")),
    ("each current reminder sent once, stale ones never", "P10, M1, O3",
     re.compile(r"revision|reminder|notification|ticket \d+:|its ticket")),
    ("no COMPLETED row changed afterwards", "P1, D3, P12", re.compile(
        r"COMPLETED row changed")),
    ("the run itself (workers, settling)", "W4, D8", re.compile(r".")),
]


def invariant_rows(violations: list[str]) -> list[dict[str, Any]]:
    """Group the checker's messages by invariant: invariant, rules, violations, example."""
    groups: dict[str, list[str]] = {name: [] for name, _, _ in INVARIANTS}
    for line in violations:
        for name, _, rx in INVARIANTS:
            if rx.search(line):
                groups[name].append(line)
                break
    return [{"invariant": name, "rules": rules_, "violations": len(groups[name]),
             "example": groups[name][0][:90] if groups[name] else ""}
            for name, rules_, _ in INVARIANTS]


# ---------------------------------------------------------------- guards


@dataclass(frozen=True)
class RedisRestart:
    """How a chaos run stops and starts "its" Redis: always a server of its own
    (`private_restarter`), never one that other users share."""

    stop: Callable[[], Awaitable[Any]]
    start: Callable[[], Awaitable[Any]]
    describe: str


def private_restarter(server: Any) -> RedisRestart:
    """Restart a lab's own Redis (`labs.private_redis.PrivateRedis`, `Lab.open(...,
    private_redis=True)`): the restart is real and hurts no other notebook or test."""
    return RedisRestart(stop=lambda: asyncio.to_thread(server.stop),
                        start=lambda: asyncio.to_thread(server.start),
                        describe=f"the lab's own Redis (port {server.port})")


async def proxy_class() -> tuple[Any, str]:
    """`labs.faults.RedisProxy` if it imports and really proxies, else (None, why)."""
    try:
        from labs.faults import RedisProxy
    except Exception as err:  # being written by someone else: use it only if it works
        return None, f"labs.faults.RedisProxy unavailable ({type(err).__name__}: {err})"
    return RedisProxy, ""


async def _check_proxy(cls: Any, settings: Settings) -> str:
    from teamdesk.tasks.queue import redis_client

    try:
        proxy = await cls.start(settings)
        try:
            client = redis_client(settings.replace(redis_url=proxy.url))
            try:
                if not await client.ping():
                    return "the proxy did not answer PING"
            finally:
                await client.aclose()
        finally:
            await proxy.close()
    except Exception as err:
        return f"labs.faults.RedisProxy does not work here ({type(err).__name__}: {err})"
    return ""


# ---------------------------------------------------------------- world setup


async def _fingerprint(sessions: async_sessionmaker[AsyncSession]) -> str:
    """A hash of every column an export reads from the exported team's tickets."""
    async with sessions() as s:
        rows = (await s.execute(
            select(Ticket.id, Ticket.title, Ticket.status, Ticket.priority, Ticket.creator_id,
                   Ticket.assignee_id, Ticket.due_at, Ticket.created_at, Ticket.deleted_at)
            .where(Ticket.team_id == EXPORT_TEAM).order_by(Ticket.id))).all()
    return hashlib.sha256(repr([tuple(r) for r in rows]).encode()).hexdigest()[:16]


async def _create(sessions: async_sessionmaker[AsyncSession], spec: Spec,
                  expected: Expected) -> int:
    """One spec through the services, in one transaction; returns tasks created. The
    expectations are recorded only once that transaction has committed."""
    now = datetime.now(UTC)
    async with sessions() as s, s.begin():
        if isinstance(spec, ExportSpec):
            task = await export_services.request_export(s, EXPORT_TEAM, spec.user,
                                                        spec.filters, scope=spec.scope)
            created = [task]
        else:
            due0 = now + timedelta(seconds=spec.dues[0] or 0.0)
            ticket, task = await ticket_services.create_ticket(
                s, REMINDER_TEAM, spec.creator, f"Chaos ticket by {spec.creator}",
                due_at=due0, assignee_id=spec.assignee)
            created = [task]
            for due in spec.dues[1:]:
                when = None if due is None else now + timedelta(seconds=due)
                ticket, task = await ticket_services.set_due_date(s, REMINDER_TEAM, "ben",
                                                                  ticket.id, when)
                created.append(task)
            if spec.close:
                ticket = await ticket_services.close_ticket(s, REMINDER_TEAM, "ben",
                                                            ticket.id)
    tasks = [t for t in created if t is not None]
    if isinstance(spec, ExportSpec):
        expected.tasks[tasks[0].id] = ("export", spec.rejected)
    else:
        for t in tasks:
            expected.tasks[t.id] = ("reminder", ticket.id)
        expected.tickets[ticket.id] = (ticket.reminder_revision, spec.close,
                                       ticket.due_at is not None)
    return len(tasks)


async def prepare(sessions: async_sessionmaker[AsyncSession], plan: list[Spec],
                  upfront: int, expected: Expected, tickets: int = SEED_TICKETS) -> None:
    """Seed both teams, create the up-front tasks (every demoted-agent export among them),
    then demote the agent."""
    async with sessions() as s:
        await seed_demo(s, team_id=EXPORT_TEAM, tickets=tickets)
    async with sessions() as s:
        await seed_demo(s, team_id=REMINDER_TEAM, tickets=0)
    for spec in plan[:upfront]:
        await _create(sessions, spec, expected)
    for spec in plan[upfront:]:
        if isinstance(spec, ExportSpec) and spec.rejected:
            await _create(sessions, spec, expected)
    async with sessions() as s:
        await team_services.change_role(s, EXPORT_TEAM, DEMOTED, Role.CUSTOMER)
    expected.export_fingerprint = await _fingerprint(sessions)


# ---------------------------------------------------------------- the invariant checker


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


async def check_invariants(sessions: async_sessionmaker[AsyncSession], expected: Expected,
                           completed_seen: dict[str, tuple]) -> tuple[list[str], Counter,
                                                                      Counter]:
    """(violations, tasks by "TYPE STATUS", FAILED texts). Reads only; changes nothing."""
    v: list[str] = []
    async with sessions() as s:
        tasks = (await s.scalars(select(BackgroundTask))).all()
    by_status: Counter = Counter(f"{t.type.value} {t.status.value}" for t in tasks)
    failed_texts: Counter = Counter(t.last_error for t in tasks if t.status == TaskStatus.FAILED)

    # Nothing lost, nothing extra, no run+1.
    ids = {t.id for t in tasks}
    if ids != set(expected.tasks):
        missing, extra = set(expected.tasks) - ids, ids - set(expected.tasks)
        v.append(f"task count {len(ids)} != created {len(expected.tasks)}; missing "
                 f"{sorted(missing)[:5]}, extra {sorted(extra)[:5]}")
    for t in tasks:
        if t.run != 0:
            v.append(f"{t.id}: run {t.run}, but nobody retried it (D6 must keep the run)")
        if t.status not in (TaskStatus.COMPLETED, TaskStatus.FAILED):
            v.append(f"{t.id}: not terminal ({t.status.value}, progress {t.progress})")
            continue
        if t.execution_id is not None:
            v.append(f"{t.id}: {t.status.value} but still leased ({t.execution_id[:8]})")
        if t.status == TaskStatus.COMPLETED and t.progress != 100:
            v.append(f"{t.id}: COMPLETED with progress {t.progress}")
        if t.status == TaskStatus.FAILED:
            if t.last_error not in FIXED_FAILED_TEXTS:
                v.append(f"{t.id}: FAILED with a text that is not one of the fixed ones: "
                         f"{t.last_error!r}")
            if t.type == TaskType.EXPORT and t.result_csv is not None:
                v.append(f"{t.id}: FAILED export holds a CSV")
        kind, info = expected.tasks.get(t.id, ("?", None))
        if kind == "export" and info and t.status == TaskStatus.COMPLETED:
            v.append(f"{t.id}: export of the demoted agent COMPLETED; it must be rejected")
        if (kind == "export" and not info and t.status == TaskStatus.FAILED
                and t.last_error in REJECT_TEXTS):
            v.append(f"{t.id}: rejected ({t.last_error!r}) though its authorization and size "
                     "never changed")

    # Exports: the CSV equals a fresh recomputation over unchanged data.
    if await _fingerprint(sessions) != expected.export_fingerprint:
        v.append(f"the {EXPORT_TEAM} tickets changed during the run: the CSV check is void")
    async with sessions() as s:
        for t in tasks:
            if t.type != TaskType.EXPORT or t.status != TaskStatus.COMPLETED:
                continue
            fresh = to_csv(list((await s.scalars(export_services.export_query(
                t.team_id, t.owner_id, t.scope,
                export_services.validate_filters(t.filters)))).all()))
            if t.result_csv != fresh:
                v.append(f"{t.id}: CSV differs from a fresh recomputation of {t.filters} "
                         f"({len((t.result_csv or '').splitlines())} vs "
                         f"{len(fresh.splitlines())} lines)")
            if t.expires_at is None or not t.result_summary:
                v.append(f"{t.id}: COMPLETED export without expiry or summary")

    # Reminders: effects once per current revision, none for superseded/closed ones.
    v.extend(await _check_reminders(sessions, tasks, expected))

    # No COMPLETED row changed after it was first seen.
    now_rows = await completed_rows(sessions)
    for task_id, seen in completed_seen.items():
        if now_rows.get(task_id) != seen:
            v.append(f"{task_id}: a COMPLETED row changed afterwards "
                     f"({_diff(seen, now_rows.get(task_id))})")
    return v, by_status, failed_texts


def _diff(before: tuple, after: tuple | None) -> str:
    if after is None:
        return "it is no longer COMPLETED or gone"
    return ", ".join(n for n, a, b in zip(SNAPSHOT_NAMES, before, after, strict=True)
                     if a != b)


async def _check_reminders(sessions: async_sessionmaker[AsyncSession],
                           tasks: Any, expected: Expected) -> list[str]:
    v: list[str] = []
    async with sessions() as s:
        tickets = {t.id: t for t in (await s.scalars(
            select(Ticket).where(Ticket.team_id == REMINDER_TEAM))).all()}
        notes = Counter({(r[0], r[1]): r[2] for r in (await s.execute(text(
            "SELECT ticket_id, reminder_revision, count(*) FROM notifications "
            "WHERE team_id = :team GROUP BY 1, 2"), {"team": REMINDER_TEAM})).all()})
        events = (await s.execute(text(
            "SELECT ticket_id, kind, data FROM ticket_events WHERE team_id = :team"),
            {"team": REMINDER_TEAM})).all()
    sent: Counter = Counter()
    business: Counter = Counter()
    for ticket_id, kind, data in events:
        if kind == "reminder_sent":
            sent[(ticket_id, (data or {}).get("revision"))] += 1
        else:
            business[ticket_id] += 1
    delivered: Counter = Counter()
    for t in tasks:
        if t.type != TaskType.REMINDER:
            continue
        ticket = tickets.get(t.ticket_id)
        if ticket is None:
            v.append(f"{t.id}: its ticket {t.ticket_id} is gone")
            continue
        key = (ticket.id, t.reminder_revision)
        current = (t.reminder_revision == ticket.reminder_revision
                   and ticket.status.value != "CLOSED" and ticket.deleted_at is None)
        if current and t.status == TaskStatus.COMPLETED:
            delivered[ticket.id] += 1
            if not (t.result_summary or "").startswith("Reminder sent"):
                v.append(f"{t.id}: current revision COMPLETED without sending: "
                         f"{t.result_summary!r}")
            if notes[key] != 1 or sent[key] != 1:
                v.append(f"{t.id}: current revision {key[1]} of ticket {key[0]} produced "
                         f"{notes[key]} notification(s) and {sent[key]} reminder_sent "
                         "event(s), expected exactly one each")
        else:
            if notes[key] or sent[key]:
                what = "FAILED current" if current else "superseded/closed"
                v.append(f"{t.id}: {what} revision {key[1]} of ticket {key[0]} produced "
                         f"{notes[key]} notification(s), {sent[key]} event(s); expected none")
            if (t.status == TaskStatus.COMPLETED
                    and not (t.result_summary or "").startswith("No reminder sent")):
                v.append(f"{t.id}: stale reminder COMPLETED as {t.result_summary!r}")
    for ticket_id, ticket in tickets.items():
        bumps = ticket.version - business[ticket_id]
        if bumps != delivered[ticket_id]:
            v.append(f"ticket {ticket_id}: version {ticket.version} = {business[ticket_id]} "
                     f"business change(s) + {bumps} bump(s), but {delivered[ticket_id]} "
                     "reminder(s) delivered")
        if delivered[ticket_id] > 1:
            v.append(f"ticket {ticket_id}: {delivered[ticket_id]} current reminders delivered")
        total = sum(n for (tid, _), n in notes.items() if tid == ticket_id)
        if total != delivered[ticket_id]:
            v.append(f"ticket {ticket_id}: {total} notification(s) for "
                     f"{delivered[ticket_id]} delivered reminder(s)")
        want = expected.tickets.get(ticket_id)
        if want is not None and (ticket.reminder_revision, ticket.status.value == "CLOSED",
                                 ticket.due_at is not None) != want:
            v.append(f"ticket {ticket_id}: revision/closed/due changed after creation")
    return v


# ---------------------------------------------------------------- the run


class _Run:
    """The driver of one chaos run (its clock, workers, proxies, fault tasks)."""

    def __init__(self, settings: Settings, config: ChaosConfig, report: ChaosReport,
                 out: Callable[[str], None], log_dir: Path) -> None:
        self.settings = settings
        self.config = config
        self.report = report
        self.out = out
        self.log_dir = log_dir
        self.procs: list[WorkerProc] = []
        self.proxies: list[Any] = []
        self.locks: list[asyncio.Lock] = []
        self.redis: RedisRestart | None = None
        self.redis_down = False
        self.t0 = 0.0
        #: The wall clock at `t0`, to place the workers' log lines in the fault windows.
        self.wall0 = 0.0
        #: (start, end) offsets of Redis outages, for recovery notes.
        self.outages: list[tuple[float, float]] = []
        self.sessions: async_sessionmaker[AsyncSession] | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, line: str) -> None:
        self.out(f"    {self.now():+7.2f} s  {line}")

    async def _sleep_until(self, offset: float) -> None:
        delay = self.t0 + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the schedule's own clock, not an ordering device

    async def start_redis(self) -> None:
        if self.redis is not None:
            await self.redis.start()
        self.redis_down = False

    async def running(self) -> int:
        """RUNNING rows in the ledger right now (how many executions a fault may hit)."""
        if self.sessions is None:
            return 0
        async with self.sessions() as s:
            return int((await s.execute(text(
                "SELECT count(*) FROM background_tasks WHERE status = 'RUNNING'"))).scalar_one())

    async def fault(self, ev: FaultEvent) -> None:
        await self._sleep_until(ev.at)
        busy = await self.running() if ev.kind != "redis" else 0
        if ev.kind == "redis":
            assert self.redis is not None
            started = self.now()
            self.redis_down = True
            await self.redis.stop()
            self.note(f"redis stopped ({self.now() - started:.2f} s to stop); start again "
                      f"in {ev.hold:.2f} s")
            try:
                await asyncio.sleep(ev.hold)
            finally:
                await self.start_redis()
            self.outages.append((started, self.now()))
            self.report.timeline.append((started, self.now(), "redis", "redis"))
            self.note(f"redis started again (empty); unavailable for "
                      f"{self.now() - started:.2f} s")
            self.report.executed["redis"] += 1
            return
        assert ev.worker is not None
        w, lock = self.procs[ev.worker], self.locks[ev.worker]
        if ev.kind == "cut":
            proxy = self.proxies[ev.worker]
            n = await proxy.cut()
            cut_at = self.now()
            self.report.struck_running[ev.kind] += 1 if busy else 0
            self.note(f"cut {w.name}'s Redis link ({n} connection(s), {busy} task(s) RUNNING) "
                      f"for {ev.hold:.2f} s")
            try:
                await asyncio.sleep(ev.hold)
            finally:
                await proxy.heal()
                self.report.timeline.append((cut_at, self.now(), w.name, "cut"))
            self.note(f"healed {w.name}'s Redis link")
            self.report.executed["cut"] += 1
            return
        if lock.locked() or not w.alive:
            self.report.skipped[ev.kind] += 1
            self.note(f"{ev.kind} {w.name} skipped: an earlier fault still has it down")
            return
        async with lock:
            pid = w.pid
            struck_at = self.now()
            self.report.struck_running[ev.kind] += 1 if busy else 0
            self.note(f"{ev.kind} {w.name} with {busy} task(s) RUNNING in the ledger")
            if ev.kind == "sigstop":
                # Frozen past its lock: the job stalls, another worker may take it over;
                # after SIGCONT its late writes must match nothing (P3, P6).
                w.send(signal.SIGSTOP)
                try:
                    await asyncio.sleep(ev.hold)
                finally:
                    w.send(signal.SIGCONT)
                self.report.timeline.append((struck_at, self.now(), w.name, "sigstop"))
                self.note(f"SIGCONT {w.name} (pid {pid}) after {ev.hold:.2f} s frozen")
                self.report.executed[ev.kind] += 1
                return
            if ev.kind == "sigkill":
                w.send(signal.SIGKILL)
                code = await w.wait_exit(10)
                self.note(f"SIGKILL {w.name} (pid {pid}): exit {code}")
            else:
                w.send(signal.SIGTERM)
                drain = float(CHAOS_TIMINGS["TEAMDESK_DRAIN_TIMEOUT_S"])
                code = await w.wait_exit(drain + 8)
                if code is None:
                    w.kill()
                    code = w.p.returncode if w.p else None
                    self.report.notes.append(f"{w.name} ignored SIGTERM; killed")
                self.note(f"SIGTERM {w.name} (pid {pid}): exit {code}")
                if code == -signal.SIGTERM:
                    # Still importing: its handler (installed before it takes any job)
                    # was not there yet. Nothing can have been running.
                    self.report.notes.append(f"{w.name} got SIGTERM while still starting "
                                             "(exit -15, before its drain handler existed)")
                elif code not in (0, 3) and not w.started_up:
                    self.report.findings.append(
                        f"{w.name} exited {code} before it had started (the SIGTERM met a "
                        f"start that was failing anyway): {w.tail(1).strip()[:160]}")
                elif code not in (0, 3):
                    self.report.violations.append(
                        f"{w.name} exited {code} after SIGTERM; expected 0 or 3 (W4)")
            await asyncio.sleep(ev.hold)
            w.start()
            self.report.timeline.append((struck_at, self.now(), w.name, ev.kind))
            self.note(f"restarted {w.name} (pid {w.pid})")
        self.report.executed[ev.kind] += 1

    async def supervise(self, stop: asyncio.Event) -> None:
        """Like a process supervisor: a worker that exits by itself (not by a fault of
        ours) is restarted after 0.5 s; each such exit is a finding."""
        while not stop.is_set():
            for w, lock in zip(self.procs, self.locks, strict=True):
                if lock.locked() or w.alive or w.p is None:
                    continue
                async with lock:
                    code = w.p.returncode
                    last = (w.tail(1) or "?").strip()[:160]
                    when = "while starting" if not w.started_up else "while running"
                    self.note(f"{w.name} exited by itself {when} (exit {code}): {last}")
                    self.report.findings.append(
                        f"{w.name} exited by itself {when} with code {code} at "
                        f"+{self.now():.2f} s; last log line: {last}")
                    await asyncio.sleep(0.5)
                    w.start()
                    self.note(f"restarted {w.name} (pid {w.pid}) as a supervisor would")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    async def waves(self, sessions: async_sessionmaker[AsyncSession], plan: list[Spec],
                    upfront: int, expected: Expected) -> None:
        """The rest of the plan in waves across the fault window (PostgreSQL only, O4)."""
        later = [s for s in plan[upfront:] if not (isinstance(s, ExportSpec) and s.rejected)]
        waves = max(1, self.config.waves)
        per = -(-len(later) // waves) if later else 0
        for i in range(waves):
            chunk = later[i * per:(i + 1) * per]
            if not chunk:
                break
            await self._sleep_until(self.config.duration * (i + 0.5) / waves)
            n = 0
            for spec in chunk:
                n += await _create(sessions, spec, expected)
            self.note(f"wave {i + 1}: {n} task(s) created through the services")

    async def snapshots(self, sessions: async_sessionmaker[AsyncSession],
                        stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.snapshot(sessions)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    async def snapshot(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        rows = await completed_rows(sessions, skip=set(self.report.completed_seen))
        for task_id, row in rows.items():
            self.report.completed_seen.setdefault(task_id, row)
        self.report.snapshots += 1
        if self.t0:
            self.report.completions.append((self.now(), len(self.report.completed_seen)))


async def run_chaos(settings: Settings, config: ChaosConfig, *,
                    out: Callable[[str], None] = print,
                    log_dir: Path | None = None,
                    redis: RedisRestart | None = None,
                    keep_logs: bool | None = None) -> ChaosReport:
    """One chaos run in the world of `settings` (a fresh database and queue prefix, which
    the caller owns). Raises `ChaosRefused` before doing anything it must not do.
    `redis` says which server the "redis" faults restart (`private_restarter` for a lab's
    own); by default the run starts a private Redis of its own for its workers and
    removes it afterwards, so a restart never touches a server anyone else uses (an open
    lab's, the test suite's). The workers'
    logs go to `log_dir` (kept), else to a temporary folder that is removed after the run
    unless there is something to read in it (a violation or a finding); `keep_logs`
    True/False keeps/removes that folder whatever happened (a notebook passes False)."""
    from teamdesk.db.engine import create_engine, session_factory

    if config.counterexample is not None and config.counterexample not in COUNTEREXAMPLES:
        raise ValueError(f"unknown counterexample {config.counterexample!r}; "
                         f"choose from {COUNTEREXAMPLES}")
    kinds = tuple(config.kinds)
    notes_before: list[str] = []
    proxy_cls = None
    if "cut" in kinds:
        proxy_cls, why = await proxy_class()
        why = why or await _check_proxy(proxy_cls, settings)
        if why:
            proxy_cls = None
            kinds = tuple(k for k in kinds if k != "cut")
            notes_before.append(f"no proxy cuts: {why}; Redis restarts and process faults "
                                "only")
    own_redis: PrivateRedis | None = None
    if "redis" in kinds and redis is None:
        try:
            own_redis = await asyncio.to_thread(PrivateRedis().start)
        except (PrivateRedisError, ServiceError) as err:
            if not config.redis_optional:
                raise ChaosRefused(f"Redis restarts need a Redis of the run's own, which "
                                   f"could not start: {err}") from None
            kinds = tuple(k for k in kinds if k != "redis")
            notes_before.append(f"no Redis restarts: {err}")
        else:
            settings = settings.replace(redis_url=own_redis.url)
            redis = private_restarter(own_redis)
    if config.counterexample:
        notes_before.append(f"COUNTEREXAMPLE switched on in these workers: "
                            f"{config.counterexample}")
    schedule = make_schedule(config.seed, config.workers, config.duration, kinds)
    report = ChaosReport(config=config, schedule=schedule, notes=notes_before, kinds=kinds)
    own_logs = log_dir is None  # ours to remove after a clean run; a caller's is kept
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="teamdesk-chaos-"))
    report.log_dir = log_dir
    discard_logs = own_logs and keep_logs is False
    run = _Run(settings, config, report, out, log_dir)
    run.redis = redis

    print_header(config, kinds, schedule, out, notes_before)
    plan = make_plan(config.seed, config.tasks)
    upfront = max(1, int(len(plan) * config.upfront))
    expected = Expected()
    report.expected = expected
    engine = create_engine(settings.database_url)
    sessions = session_factory(engine)
    run.sessions = sessions
    stop_snapshots = asyncio.Event()
    snapper: asyncio.Task | None = None
    supervisor: asyncio.Task | None = None
    try:
        await prepare(sessions, plan, upfront, expected, config.export_tickets)
        out(f"  created {len(expected.tasks)} task(s) up front (incl. every export of the "
            f"demoted agent {DEMOTED!r}); {DEMOTED!r} demoted to customer")
        for i in range(config.workers):
            redis_url = None
            if proxy_cls is not None:
                proxy = await proxy_cls.start(settings)
                run.proxies.append(proxy)
                redis_url = proxy.url
            entry = (["-m", "labs.counterexample_worker", config.counterexample]
                     if config.counterexample else None)
            run.procs.append(WorkerProc(settings, f"w{i + 1}", log_dir, CHAOS_TIMINGS,
                                        redis_url=redis_url, entry=entry))
            run.locks.append(asyncio.Lock())
        for w in run.procs:
            w.start()
        await wait_heartbeats(settings, run.procs)
        run.t0, run.wall0 = time.monotonic(), time.time()
        out(f"  {config.workers} worker process(es) up; fault window of "
            f"{config.duration:g} s opens")
        snapper = asyncio.create_task(run.snapshots(sessions, stop_snapshots))
        supervisor = asyncio.create_task(run.supervise(stop_snapshots))
        faults = [asyncio.create_task(run.fault(ev)) for ev in schedule]
        waves = asyncio.create_task(run.waves(sessions, plan, upfront, expected))
        results = await asyncio.gather(*faults, waves, return_exceptions=True)
        for ev, res in zip([*schedule, None], results, strict=True):
            if isinstance(res, BaseException):
                report.violations.append(f"the run itself failed at {ev}: {res!r}")
        await run.snapshot(sessions)
        window_end = run.now()
        out(f"  fault window over at +{window_end:.2f} s; settling (at most "
            f"{config.settle:g} s)")
        await _restore(run)
        report.settled, report.settle_s = await _settle(run, sessions, len(expected.tasks))
        stop_snapshots.set()
        await snapper
        await supervisor
        await run.snapshot(sessions)
        if not report.settled:
            report.notes.extend(await _stuck(settings, sessions))
        await _all_started(run, 30.0)
        codes = [await w.stop(15) for w in run.procs]
        out(f"  workers stopped (SIGTERM): exit codes {codes}")
        for w, code in zip(run.procs, codes, strict=True):
            if code == 0:
                continue
            if not w.started_up:
                report.findings.append(
                    f"{w.name} had not finished starting when the final SIGTERM came "
                    f"(exit {code}): {w.tail(1).strip()[:160]}")
            elif code == 3 and report.settled:
                report.findings.append(
                    f"{w.name} exited 3 (drain timeout, 'running job abandoned') on the final "
                    "SIGTERM although no task was RUNNING: its bullmq worker did not close "
                    "within the drain timeout (after a Redis outage the Python port sleeps "
                    "runRetryDelay, 15 s by default, before it notices the close)")
            elif code != 0:
                report.violations.append(f"{w.name} exited {code} on the final SIGTERM "
                                         "(W4 expects 0, or 3 after the drain timeout)")
        violations, report.by_status, report.failed_texts = await check_invariants(
            sessions, expected, report.completed_seen)
        report.violations.extend(violations)
        if not report.settled:
            report.violations.append(f"the system did not settle within {config.settle:g} s")
        report.notes.extend(_log_notes(run))
        report.notes.extend(await _outage_notes(run, sessions))
        # The workers' logs are kept when there is something to read in them.
        discard_logs = own_logs and (keep_logs is False or (
            keep_logs is None and not (report.violations or report.findings)))
        if discard_logs:
            report.log_dir = None
        _print_summary(report, kinds, out)
        return report
    finally:
        stop_snapshots.set()
        for task in (snapper, supervisor):
            if task is not None and not task.done():
                task.cancel()
        if run.redis_down:
            with contextlib.suppress(Exception):
                await run.start_redis()
        stop_all(run.procs)
        for proxy in run.proxies:
            with contextlib.suppress(Exception):
                await proxy.close()
        await engine.dispose()
        if own_redis is not None:
            await asyncio.to_thread(own_redis.remove)
        if discard_logs:
            shutil.rmtree(log_dir, ignore_errors=True)


async def _restore(run: _Run) -> None:
    """After the window: Redis up, every link healed, every worker running."""
    if run.redis_down:
        await run.start_redis()
    for proxy in run.proxies:
        if proxy.is_cut:
            await proxy.heal()
    for w, lock in zip(run.procs, run.locks, strict=True):
        async with lock:
            if not w.alive:
                w.start()
                run.note(f"restarted {w.name} for the settle phase")


async def _all_started(run: _Run, timeout: float) -> None:
    """Before the final SIGTERM: every worker running and past its start (bounded), so
    the drain is tested on a worker that could drain."""
    for w in run.procs:
        if not w.alive:
            w.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(w.started_up or not w.alive for w in run.procs):
            return
        await asyncio.sleep(0.05)  # poll interval of an external state


async def _settle(run: _Run, sessions: async_sessionmaker[AsyncSession], total: int
                  ) -> tuple[bool, float]:
    started = time.monotonic()
    last = 0.0
    while True:
        async with sessions() as s:
            counts = dict((await s.execute(text(
                "SELECT status::text, count(*) FROM background_tasks GROUP BY 1"))).all())
        open_ = counts.get("WAITING", 0) + counts.get("RUNNING", 0)
        elapsed = time.monotonic() - started
        if open_ == 0 and sum(counts.values()) >= total:
            run.note(f"settled after {elapsed:.1f} s: {counts}")
            return True, elapsed
        if elapsed > run.config.settle:
            run.note(f"NOT settled after {elapsed:.1f} s: {counts}")
            return False, elapsed
        if elapsed - last >= 2.0:
            last = elapsed
            run.note(f"settling … {counts}")
        await asyncio.sleep(0.1)  # poll interval of an external state


async def _stuck(settings: Settings, sessions: async_sessionmaker[AsyncSession]) -> list[str]:
    """For a run that did not settle: the open tasks and their queue jobs' states."""
    queue = create_task_queue(settings)
    lines = []
    try:
        async with sessions() as s:
            rows = (await s.execute(select(
                BackgroundTask.id, BackgroundTask.run, BackgroundTask.status,
                BackgroundTask.execution_id, BackgroundTask.dispatched_at,
                BackgroundTask.updated_at).where(BackgroundTask.status.in_(
                    [TaskStatus.WAITING, TaskStatus.RUNNING])).limit(10))).all()
        for r in rows:
            job = await queue.getJob(task_job_id(r[0], r[1]))
            state = await job.getState() if job is not None else "no job"
            lines.append(f"open task {r[0]}: {r[2].value} lease={(r[3] or '-')[:8]} "
                         f"dispatched_at={r[4]} updated_at={r[5]} queue={state}")
    except Exception as err:
        lines.append(f"could not inspect the queue: {err!r}")
    finally:
        with contextlib.suppress(Exception):
            await queue.close()
    return lines


_LOG_COUNTS = {
    "leases lost (P6: a newer executor owned the task)": re.compile(r"task\.lease_lost"),
    "errors reported with the lease (P7)": re.compile(r"task\.error "),
    "queue stalls detected": re.compile(r"task\.stalled"),
    "jobs the queue gave up on (failed listener, exhausted)": re.compile(
        r"task\.failed .*exhausted=true"),
    "dispatch ticks that failed (D8)": re.compile(r"dispatch\.fault"),
    "worker/Redis errors (worker.error)": re.compile(r"worker\.error"),
    "drain timeouts (exit 3)": re.compile(r"worker\.drain_timeout"),
    "duplicate deliveries skipped (P1)": re.compile(r"task\.skipped|task\.not_claimed"),
}


#: A dispatch fault this long after a fault window closed is still that fault's doing: a
#: tick that began while Redis was unreachable fails within its bounded Redis calls
#: (`redis_timeout_s`, a look-up and an add), and the log stamps whole seconds.
FAULT_GRACE_S = 2 * float(CHAOS_TIMINGS["TEAMDESK_REDIS_TIMEOUT_S"]) + 1.0
#: The fault kinds that break a worker's Redis while they last: a Redis restart breaks
#: every worker's, a cut only that worker's link, a SIGSTOP freezes that worker's calls.
_BREAKS_REDIS = ("redis", "cut", "sigstop")
_FAULT_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d) \S+ (dispatch\.fault .*)$", re.MULTILINE)


def classify_dispatch_faults(logs: dict[str, str],
                             windows: list[tuple[float, float, str]],
                             wall0: float) -> tuple[list[str], list[str]]:
    """Split the `dispatch.fault` lines of each worker's log (name → text) into (fault
    injected, our own). `windows` are (start, end, lane) in wall-clock seconds, lane a
    worker's name or "redis" (every worker); a line stamped within a window of its
    worker — from a second before it opened (stamps are whole seconds) to
    `FAULT_GRACE_S` after it closed — is the fault injected. Any other dispatch fault
    is the dispatcher's own (D8: a tick must not fail on its own, e.g. of a deadlock)."""
    midnight = time.mktime((*time.localtime(wall0)[:3], 0, 0, 0, 0, 0, -1))
    injected: list[str] = []
    own: list[str] = []
    for name, text_ in logs.items():
        for m in _FAULT_LINE.finditer(text_):
            at = midnight + int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
            if at < wall0 - 43_200:  # the run crossed midnight
                at += 86_400
            hit = any(lane in ("redis", name) and start - 1.0 <= at <= end + FAULT_GRACE_S
                      for start, end, lane in windows)
            (injected if hit else own).append(f"{name}: {m[4]}")
    return injected, own


def _log_notes(run: _Run) -> list[str]:
    text_all = "\n".join(w.output() for w in run.procs)
    notes = [f"{label}: {len(rx.findall(text_all))}" for label, rx in _LOG_COUNTS.items()]
    windows = [(run.wall0 + start, run.wall0 + end, lane)
               for start, end, lane, kind in run.report.timeline if kind in _BREAKS_REDIS]
    injected, own = classify_dispatch_faults({w.name: w.output() for w in run.procs},
                                             windows, run.wall0)
    run.report.dispatch_faults_injected = len(injected)
    run.report.dispatch_faults_own = own
    notes.append(f"dispatch faults: {len(injected)} fault injected (the worker's Redis "
                 f"stopped, cut or frozen), {len(own)} dispatcher fault(s) of our own")
    run.report.findings.extend(f"dispatcher fault of our own (D8): {line[:200]}"
                               for line in own[:10])
    recovered = sum(int(m) for m in re.findall(r"recovered_stale=(\d+)", text_all))
    re_added = sum(int(m) for m in re.findall(r"re_added=(\d+)", text_all))
    failed_q = sum(int(m) for m in re.findall(r"failed_from_queue=(\d+)", text_all))
    notes.append(f"RUNNING rows recovered by D6: {recovered}; jobs re-added after a lost or "
                 f"completed record (D4): {re_added}; set FAILED from the queue's word "
                 f"(D4): {failed_q}")
    notes.append(f"worker starts: {', '.join(f'{w.name}={w.starts}' for w in run.procs)}")
    return notes


async def _outage_notes(run: _Run, sessions: async_sessionmaker[AsyncSession]) -> list[str]:
    """For each Redis outage: how long until the next task completed after Redis was back."""
    if not run.outages:
        return []
    async with sessions() as s:
        done = sorted(r[0] for r in (await s.execute(select(BackgroundTask.updated_at).where(
            BackgroundTask.status == TaskStatus.COMPLETED))).all())
    wall0 = datetime.now(UTC) - timedelta(seconds=run.now())
    notes = []
    for i, (start, end) in enumerate(run.outages, 1):
        back = wall0 + timedelta(seconds=end)
        nxt = next((d for d in done if d > back), None)
        after = f"{(nxt - back).total_seconds():.2f} s" if nxt else "never"
        notes.append(f"Redis outage {i} (+{start:.2f} .. +{end:.2f} s): next completion "
                     f"{after} after Redis was back")
    return notes


def print_header(config: ChaosConfig, kinds: tuple[str, ...], schedule: list[FaultEvent],
                  out: Callable[[str], None], notes: list[str]) -> None:
    out(f"chaos run: seed {config.seed}, {config.workers} worker process(es), {config.tasks} "
        f"task(s), fault window {config.duration:g} s, kinds {','.join(kinds)}; "
        f"machine: {os.cpu_count()} cores")
    out("  worker timings (environment): " + ", ".join(
        f"{k.removeprefix('TEAMDESK_').lower()}={v}" for k, v in CHAOS_TIMINGS.items()))
    for n in notes:
        out(f"  note: {n}")
    out(f"  fault schedule ({len(schedule)} faults):")
    for ev in schedule:
        out(f"    {ev.describe()}")


def _print_summary(report: ChaosReport, kinds: tuple[str, ...],
                   out: Callable[[str], None]) -> None:
    out("summary")
    out("  faults injected: " + ", ".join(
        f"{k} {report.executed[k]}" + (f" (+{report.skipped[k]} skipped)"
                                       if report.skipped[k] else "") for k in kinds))
    struck = sum(report.struck_running.values())
    out(f"  process/link faults that struck while a task was RUNNING: {struck} "
        f"({', '.join(f'{k} {n}' for k, n in sorted(report.struck_running.items()))})")
    out("  tasks by status: " + ", ".join(f"{k} {n}" for k, n in sorted(report.by_status.items())))
    for text_, n in report.failed_texts.most_common():
        out(f"  FAILED x{n}: {text_}")
    out(f"  settled: {report.settled} after {report.settle_s:.1f} s; {report.snapshots} "
        f"snapshots of COMPLETED rows ({len(report.completed_seen)} rows checked unchanged)")
    out("  recovery notes:")
    for n in report.notes:
        out(f"    {n}")
    if report.findings:
        out("  findings (not ledger invariants, not counted as violations):")
        for n in report.findings:
            out(f"    {n}")
    kept = report.log_dir or "removed (nothing to read in them; --keep-logs keeps them)"
    out(f"  worker logs: {kept}")
    out(f"  violations: {len(report.violations)}")
    for line in report.violations[:30]:
        out(f"    VIOLATION {line}")


# ---------------------------------------------------------------- the picture

_FAULT_COLOURS = {"sigkill": "#d62728", "sigterm": "#ff7f0e", "sigstop": "#9467bd",
                  "cut": "#7f7f7f", "redis": "#1f77b4"}


def plot_swimlanes(report: ChaosReport, path: str | Path | None = None) -> Any:
    """Swimlanes of a chaos run: one lane per worker and one for Redis, a bar for each
    fault while it lasted (SIGKILL/SIGTERM: down until restarted; SIGSTOP: frozen; cut:
    link cut; Redis: stopped), and under them the COMPLETED rows over time. Headless
    (matplotlib's object API); returns the figure, saved to `path` if given."""
    import io

    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    class ChaosFigure(Figure):
        def _repr_png_(self) -> bytes:
            buf = io.BytesIO()
            self.savefig(buf, format="png")
            return buf.getvalue()

    lanes = [f"w{i + 1}" for i in range(report.config.workers)] + ["redis"]
    y = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    fig = ChaosFigure(figsize=(11, 2.2 + 0.6 * len(lanes)), dpi=100)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for start, end, lane, kind in report.timeline:
        # Link cuts below the lane's middle, process faults above: both stay visible.
        shift = -0.17 if kind == "cut" else (0.17 if lane != "redis" else 0.0)
        top.barh(y[lane] + shift, max(end - start, 0.05), left=start,
                 height=0.32 if lane != "redis" else 0.6,
                 color=_FAULT_COLOURS.get(kind, "#333333"))
    top.axvspan(0, report.config.duration, color="#ffeeee", zorder=-1)
    top.set_yticks([y[lane] for lane in lanes], lanes)
    top.set_title(f"chaos run, seed {report.config.seed}"
                  + (f", counterexample: {report.config.counterexample}"
                     if report.config.counterexample else "")
                  + f" — {len(report.violations)} violation(s)")
    top.legend(handles=[Patch(color=c, label=k) for k, c in _FAULT_COLOURS.items()
                        if k in report.kinds], loc="upper right", fontsize="small",
               ncol=len(report.kinds) or 1)
    if report.completions:
        xs, ys = zip(*report.completions, strict=True)
        bottom.step(xs, ys, where="post", color="#2ca02c")
    bottom.set_ylabel("COMPLETED")
    bottom.set_xlabel("seconds after the fault window opened (shaded)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig
