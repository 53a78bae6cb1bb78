"""Bounded waits for the team lock, with the holder named, so a presenter is
never left waiting on a silent lock.

In chapter 26 §5 executor A is paused *inside* its reminder transaction, holding the team
lock (`teamdesk.db.locks.lock_team`, an advisory lock). A cell that needs the same lock
meanwhile — Ben changes a due date — would wait for as long as A is paused: for a
presenter, forever, and only a kernel restart would free the notebook. Instead:

    ticket, task = await locks.bounded(
        lab, lambda s: tickets.set_due_date(s, lab.team, "ben", ticket_id, due), seconds=2)

runs the service in a session whose lock waits give up after `seconds`
(PostgreSQL's `lock_timeout`, so the server stops waiting, not just the cell) and then
raises `TeamLockBusy` naming who holds the lock: the lab's executor paused at a gate, and
the holding backend from `pg_locks` joined to `pg_stat_activity`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from labs import statements
from teamdesk.db.engine import create_engine, session_factory
from teamdesk.db.locks import team_lock_key_parts

if TYPE_CHECKING:
    from labs.lab import Lab

T = TypeVar("T")

#: PostgreSQL's error code for "lock_timeout expired" (lock_not_available).
LOCK_NOT_AVAILABLE = "55P03"

class TeamLockBusy(TimeoutError):
    """A bounded wait for the team lock gave up; the message names the holder."""


async def holders(lab: Lab) -> list[dict[str, Any]]:
    """The backends holding `lab`'s team lock now (pid, state, seconds in the
    transaction, start of the last statement)."""
    async with lab.sessions() as s:
        hi, lo = team_lock_key_parts(lab.team)
        return [dict(r._mapping) for r in
                await statements.run(s, "team_lock_holders", {"hi": hi, "lo": lo})]


#: Probe points that lie inside the team-locked reminder transaction (`teamdesk.probes`):
#: an executor paused at one of them holds the team lock.
LOCKED_POINTS = ("reminder.after_lease_check", "reminder.after_event",
                 "reminder.after_completion")


def _paused_actors(lab: Lab) -> list[str]:
    """The lab's executors paused at a gate inside the team-locked transaction."""
    out = []
    for g in getattr(lab, "gates", ()):
        if (g.point in LOCKED_POINTS and getattr(g, "is_reached", False)
                and not getattr(g, "is_released", True)):
            who = (g.context or {}).get("actor") or g.actor or "an executor"
            out.append(f"executor {who} (paused at gate {g.point})")
    return out


async def describe_holder(lab: Lab) -> str:
    """One line: who holds the team lock of `lab` (or that nobody does now)."""
    found = await holders(lab)
    if not found:
        return "nobody holds it now"
    backends = "; ".join(
        f"backend pid {h['pid']} ({h['state']}, {h['in_tx_s']} s into its transaction; "
        f"last statement: {h['last_query']!s})" for h in found)
    paused = _paused_actors(lab)
    who = f"{', '.join(paused)}: " if paused else ""
    return f"held by {who}{backends}"


async def bounded(lab: Lab, action: Callable[[AsyncSession], Awaitable[T]], *,
                  seconds: float = 2.0) -> T:
    """Run `action(session)` (a service call) with every lock wait bounded by `seconds`;
    if the team lock (or any lock) is not granted in time, raise `TeamLockBusy` naming
    the holder. Nothing is written then: the transaction rolls back."""
    ms = max(1, int(seconds * 1000))
    engine = create_engine(lab.settings.database_url,
                           connect_args={"options": f"-c lock_timeout={ms}"})
    try:
        async with session_factory(engine)() as session:
            try:
                return await action(session)
            except DBAPIError as err:
                code = getattr(err.orig, "sqlstate", None)
                if code != LOCK_NOT_AVAILABLE:
                    raise
        raise TeamLockBusy(f"gave up after {seconds:g} s waiting for the team lock of "
                           f"{lab.team!r}: {await describe_holder(lab)}") from None
    finally:
        await engine.dispose()


async def row_lock_waits(lab: Lab) -> list[dict[str, Any]]:
    """Backends of `lab`'s database whose UPDATE of `background_tasks` waits on a lock:
    what they wait for (`transactionid` = a row lock) and the blocker's state and query."""
    async with lab.sessions() as s:
        return [dict(r) for r in (await statements.run(
            s, "row_lock_waits", {"waiting_query": "%update%background_tasks%"})).mappings().all()]
