"""Scene helpers of `notebooks/26b-takeover-race.ipynb` (ch. 26 §4): the learner's fence,
judged by the real race.

The exercise asks for the condition of A's fenced writes — the `WHERE` every fenced
statement of `teamdesk/tasks/queries.sql` ends with (P3). `where_fence(text)` turns the
learner's text into a `teamdesk.tasks.lease.Fence`: each fenced statement runs with its
lease condition replaced by theirs, and a write that matches no row raises `LeaseLost`,
as the product's does. `judge_fence(text)` then runs, in a world of its own:

1. **alone**: one executor with that fence exports — it must complete (a fence that
   refuses the lease holder itself is no fence, it is a wall);
2. **the takeover race** of §4.1–§4.5 with that fence for A only: A frozen after its
   read, the tickets change, B takes over with E2, A comes back late, B finishes — B's
   CSV (the changed titles) must be the one saved.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import Any

import psycopg

from teamdesk.db.models import Ticket
from teamdesk.tasks.lease import FENCED, Lease, LeaseLost, leased_update
from teamdesk.tasks.ledger import QUERIES
from teamdesk.tasks.queue import task_job_id

#: The lease condition each fenced statement ends with (P3), the part a learner rewrites.
LEASE_CONDITION = re.compile(r"id = %\(task_id\)s AND run = %\(run\)s AND execution_id = "
                             r"%\(execution_id\)s\s+AND status = 'RUNNING'")
#: The parameters a condition may use: the lease's.
LEASE_PARAMS = frozenset({"task_id", "run", "execution_id"})
T = 8.0  # seconds: the bound on every wait of the judge


def where_fence(where: str) -> Any:
    """A `Fence` whose fenced statements use the condition `where` instead of the
    product's lease condition. `where` may name `%(task_id)s`, `%(run)s` and
    `%(execution_id)s` (the lease the executor holds) and the table's columns."""
    if not isinstance(where, str) or not where.strip():
        raise ValueError("write the condition as a string, e.g. \"id = %(task_id)s AND …\"")
    text = " ".join(where.split())
    if ";" in text:
        raise ValueError("one condition, without ';'")
    unknown = set(re.findall(r"%\((\w+)\)s", text)) - LEASE_PARAMS
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(sorted(unknown))}; the lease has "
                         "%(task_id)s, %(run)s and %(execution_id)s")

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


@dataclass
class FenceVerdict:
    """What the real runs said about a fence."""

    where: str
    alone_completed: bool = False
    #: "B" (the changed titles were saved), "A" (A's stale copy was) or "none".
    saved: str = "none"
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.alone_completed and self.saved == "B"

    def __str__(self) -> str:
        if self.ok:
            head = ("✓ your fence holds: the lease holder writes, and after B took over "
                    "A's late writes matched no row — B's CSV was saved (P3, P5)")
        elif not self.alone_completed:
            head = ("✗ your fence refused the lease holder's own writes: an executor alone "
                    "could not finish its export")
        else:
            head = (f"✗ after B took over, {'A' if self.saved == 'A' else 'nobody'}'s CSV "
                    "was saved: A's late writes still matched a row")
        return "\n".join([head, *(f"  {n}" for n in self.notes)])


async def _alone(lab: Any, verdict: FenceVerdict) -> None:
    task = await lab.request_export({"status": ["OPEN"]})
    await lab.start_worker("S", export_batch_size=1000)
    await lab.dispatch()
    done = await lab.wait_for("completed", actor="S", job_id=task_job_id(task.id, 0),
                              timeout=T)
    row = await lab.task(task.id)
    verdict.alone_completed = row.status.value == "COMPLETED"
    verdict.notes.append(f"alone: {done['result']}")
    await lab.stop_worker("S")


async def _race(lab: Any, verdict: FenceVerdict) -> None:
    from sqlalchemy import update

    from labs.lab import STUCK, WATCHFUL

    task = await lab.request_export({"priority": ["HIGH"]})
    job_id = task_job_id(task.id, 0)

    def mine(ctx: dict[str, Any]) -> bool:
        return ctx["task_id"] == task.id

    gate_a = lab.gate("export.after_read", actor="A", when=mine)
    gate_b = lab.gate("claim.after", actor="B", when=mine)
    # 26b's A: the STUCK preset (1 s lock, no renewal), its own stall check an hour away.
    await lab.start_worker("A", **{**STUCK, "stalled_interval_ms": 3_600_000,
                                   "export_batch_size": 1000})
    await lab.enqueue(task.id)
    await gate_a.reached(T)
    async with lab.sessions() as s, s.begin():  # A's copy goes out of date
        await s.execute(update(Ticket).where(Ticket.team_id == lab.team,
                                             Ticket.priority == "HIGH")
                        .values(title="B-era: " + Ticket.title))
    await lab.start_worker("B", **WATCHFUL)
    await lab.wait_for("stalled", job_id=job_id, timeout=T)
    await gate_b.reached(T)
    with lab.expect_errors(actor="A"), lab.expect_errors(actor="B"):
        gate_a.release()
        await lab.wait_for("error", actor="A", job_id=job_id, timeout=T)
        gate_b.release()
        done = await lab.wait_for("completed", actor="B", job_id=job_id, timeout=T)
    verdict.notes.append(f"race: B says {done['result']!r}")
    row = await lab.task(task.id)
    titles = [r["title"] for r in csv.DictReader(io.StringIO(row.result_csv or ""))]
    if titles:
        verdict.saved = "B" if all(t.startswith("B-era: ") for t in titles) else "A"


async def judge_fence(where: Any, *, settings: Any = None) -> FenceVerdict | str:
    """Run the two real runs of the module docstring with `where` as A's fence, in a lab
    world of its own; a verdict, or a line saying what to write when `where` is not a
    condition yet."""
    from labs.lab import Lab

    if where is None:
        return "not attempted yet: write your condition into my_where"
    try:
        fence = where_fence(where)
    except ValueError as err:
        return f"✗ {err}"
    verdict = FenceVerdict(" ".join(str(where).split()))
    lab = await Lab.open("26b-fence-judge", settings=settings, tickets=40)
    try:
        lab.use_fence(fence, actor="S")
        lab.use_fence(fence, actor="A")
        try:
            await _alone(lab, verdict)
            if verdict.alone_completed:
                await _race(lab, verdict)
        except (AssertionError, TimeoutError, psycopg.Error) as err:  # a wait ran out
            verdict.notes.append(f"the run stopped: {type(err).__name__}: "
                                 f"{(str(err).splitlines() or [''])[0]}")
    finally:
        await lab.close(check=False)
    return verdict
