"""Old fences, switched on for one lab's executors only (ch. 26 §4, §5; issue 14).

    bug = lab.counterexample("forgot-row-count", actor="A")   # A runs the old code
    ...                                                        # watch the bug happen
    bug.off()                                                  # (closing the lab does too)

- `forgot-row-count` — the old reminder code of ch. 26 §5: 旧实现末尾虽然按 E1 条件更新，
  但没有检查更新行数 (it still updated under E1's condition, but never checked how many
  rows that changed). The fenced UPDATE keeps its lease condition; a 0-row result is
  ignored, and the executor carries on as if it had written (breaks P3, P10).
- `status-only-guard` — the guard the lease replaced: `WHERE id AND run AND status =
  'RUNNING'`, without `execution_id`. Any executor of the run passes while *somebody* is
  RUNNING (breaks P3, P5).

The product is not changed. Every fenced write goes through `teamdesk.tasks.lease.
leased_update` (P3), which the executor modules import by name. While a switch is on, those
names point at a wrapper that applies the old fence only to code running in the switching
lab's scope (`labs._scope`) and, if given, as that actor; everyone else — other labs, other
actors, tests — gets the product's function unchanged. The last switch turned off puts the
product's function back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg

from labs import _scope
from teamdesk.tasks import exports, lease, processor, reminders

log = logging.getLogger("teamdesk.counterexample")

#: The switches, and the rules each one breaks (for the lab's printout).
BUGS = {
    "forgot-row-count": "a fenced UPDATE that matched 0 rows is ignored (breaks P3, P10)",
    "status-only-guard": "the fence checks id, run and RUNNING, not execution_id (breaks P3, P5)",
}

#: Modules that bound `leased_update` by name, besides `lease` itself.
_USERS = (lease, processor, exports, reminders)
_PRODUCT = lease.leased_update

# The status-only guard finds whoever holds the run now and writes under that lease:
# the same rows a `WHERE id AND run AND status = 'RUNNING'` UPDATE would change.
_HOLDER = ("SELECT execution_id FROM background_tasks "
           "WHERE id = %(task_id)s AND run = %(run)s AND status = 'RUNNING'")


@dataclass(eq=False)
class Switch:
    """One counterexample, on for one lab (the `sink` of its scope) and maybe one actor."""

    bug: str
    sink: Any
    actor: str | None = None
    #: What it changed: one line per write it let through or redirected.
    effects: list[str] = field(default_factory=list)
    on: bool = True

    def applies(self) -> bool:
        scope = _scope.current()
        return (self.on and scope is not None and scope.sink is self.sink
                and (self.actor is None or scope.actor == self.actor))

    def off(self) -> None:
        """Back to the product's fence for this lab; idempotent."""
        if self.on:
            self.on = False
            _SWITCHES.remove(self)
            if not _SWITCHES:
                _install(_PRODUCT)

    def __repr__(self) -> str:
        who = f" for {self.actor}" if self.actor else ""
        state = "on" if self.on else "off"
        return f"<counterexample {self.bug}{who}: {state}, {len(self.effects)} write(s) changed>"


_SWITCHES: list[Switch] = []


def _install(fn: Any) -> None:
    for module in _USERS:
        module.leased_update = fn


async def _old_fence(conn: Any, held: lease.Lease, statement: str | None = None, *,
                     during: str = "write", **values: Any) -> None:
    switch = next((s for s in _SWITCHES if s.applies()), None)
    if switch is None:
        return await _PRODUCT(conn, held, statement, during=during, **values)
    if switch.bug == "status-only-guard" and isinstance(conn, psycopg.AsyncConnection):
        cur = await conn.execute(_HOLDER, {"task_id": held.task_id, "run": held.run})
        holder = await cur.fetchone()
        if holder is not None and holder[0] != held.execution_id:
            switch.effects.append(f"{during}: written under {holder[0][:8]}'s lease, "
                                  f"not {held.execution_id[:8]}")
            held = lease.Lease(held.task_id, held.run, holder[0])
        return await _PRODUCT(conn, held, statement, during=during, **values)
    try:
        await _PRODUCT(conn, held, statement, during=during, **values)
    except lease.LeaseLost:
        if switch.bug != "forgot-row-count":
            raise
        # The bug: the row count is not looked at, so nothing stops the caller.
        switch.effects.append(f"{during}: 0 rows matched, carried on")
        log.warning("counterexample.row_count_ignored task_id=%s execution_id=%s during=%s",
                    held.task_id, held.execution_id, during)


def switch_on(bug: str, sink: Any, actor: str | None = None) -> Switch:
    """Turn `bug` on for the lab `sink` (and `actor`); see the module docstring."""
    if bug not in BUGS:
        raise ValueError(f"unknown counterexample {bug!r}; choose one of {', '.join(BUGS)}")
    switch = Switch(bug, sink, actor)
    _SWITCHES.append(switch)
    _install(_old_fence)
    return switch
