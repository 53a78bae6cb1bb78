"""Gates at probe points: pause an executor at a named checkpoint, look, then let it go.

    gate = Gate("export.after_read", actor="A")      # installed at once
    ctx = await gate.reached()                        # A is now paused there
    ...                                               # B takes over, inspect the ledger
    gate.release()                                    # or gate.release(raising=OSError("late"))

A gate catches the first crossing that matches (point, actor, and an optional predicate
on the probe context) and lets every later crossing pass. Waiting is bounded: a timeout
only reports a sync point that never came (`GateTimeout` names it), it never orders events.

Both `Gate` and `Fault` accept an optional `observer(event, context)` callback, called in
the executor's own task: a gate reports `"paused"` when it catches a crossing and
`"released"` (or `"raised"`) when the executor leaves; a fault reports `"fired"`. Labs use
it to put gate pauses into their history; nothing else depends on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from devkit.i18n import say
from teamdesk import probes

DEFAULT_TIMEOUT_S = 8.0

#: `observer(event, context)`: "paused" / "released" / "raised" (gates), "fired" (faults).
Observer = Callable[[str, dict[str, Any]], None]


class GateTimeout(AssertionError):
    """A gate was not reached (or not left) in time: the sync point never came."""


class Gate:
    """Pause the first matching crossing of `point` until `release()`."""

    def __init__(
        self,
        point: str,
        *,
        actor: str | None = None,
        when: Callable[[dict[str, Any]], bool] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        observer: Observer | None = None,
    ) -> None:
        if point not in probes.POINTS:
            raise ValueError(f"unknown probe point {point!r}; known: {', '.join(probes.POINTS)}")
        self.point = point
        self.actor = actor
        self.when = when
        self.timeout = timeout
        self.observer = observer
        self.context: dict[str, Any] | None = None
        self._reached = asyncio.Event()
        self._released = asyncio.Event()
        self._passed = asyncio.Event()
        self._raising: BaseException | None = None
        self._uninstall = probes.install(self._handle)

    def __repr__(self) -> str:
        state = ("passed" if self._passed.is_set() else "paused" if self._reached.is_set()
                 else "waiting")
        who = f" actor={self.actor}" if self.actor else ""
        return f"<Gate {self.point}{who} {state}>"

    def _matches(self, point: str, ctx: dict[str, Any]) -> bool:
        if point != self.point or self._reached.is_set():
            return False
        if self.actor is not None and ctx.get("actor") != self.actor:
            return False
        return self.when is None or self.when(ctx)

    async def _handle(self, point: str, ctx: dict[str, Any]) -> None:
        if not self._matches(point, ctx):
            return
        self.context = dict(ctx)
        self._reached.set()
        self._notify("paused", ctx)
        try:
            await self._released.wait()
        finally:
            self._passed.set()
        if self._raising is not None:
            self._notify("raised", {**ctx, "error": self._raising})
            raise self._raising
        self._notify("released", ctx)

    def _notify(self, event: str, ctx: dict[str, Any]) -> None:
        if self.observer is not None:
            self.observer(event, ctx)

    @property
    def is_released(self) -> bool:
        """True once `release()` or `close()` was called."""
        return self._released.is_set()

    @property
    def is_reached(self) -> bool:
        """True once an executor has been caught here (even if since released)."""
        return self._reached.is_set()

    async def reached(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait until an executor is paused here; returns the probe context."""
        try:
            await asyncio.wait_for(self._reached.wait(), timeout or self.timeout)
        except TimeoutError:
            bound = timeout or self.timeout
            raise GateTimeout(say(f"{self!r} was never reached within {bound:g} s",
                                  f"{self!r} 在 {bound:g} 秒内一直没有执行者到达")) from None
        return self.context or {}

    def release(self, raising: BaseException | None = None) -> None:
        """Let the paused executor continue, or make the probe raise `raising` there."""
        self._raising = raising
        self._released.set()

    async def passed(self, timeout: float | None = None) -> None:
        """Wait until the released executor has left the gate."""
        try:
            await asyncio.wait_for(self._passed.wait(), timeout or self.timeout)
        except TimeoutError:
            bound = timeout or self.timeout
            raise GateTimeout(say(f"{self!r} was not left within {bound:g} s",
                                  f"{self!r} 在 {bound:g} 秒内执行者没有离开")) from None

    def close(self) -> None:
        """Uninstall; a paused executor is released so nothing is left hanging."""
        self._uninstall()
        if not self._released.is_set():
            self._released.set()


class Fault:
    """Raise `error` at the first matching crossing of `point` (no pause): an injected
    fault, e.g. a failing ledger write after the event INSERT."""

    def __init__(self, point: str, error: BaseException, *, actor: str | None = None,
                 when: Callable[[dict[str, Any]], bool] | None = None, times: int = 1,
                 observer: Observer | None = None) -> None:
        if point not in probes.POINTS:
            raise ValueError(f"unknown probe point {point!r}")
        self.point, self.error, self.actor, self.when = point, error, actor, when
        self.observer = observer
        self.remaining = times
        self.fired = 0
        self._uninstall = probes.install(self._handle)

    async def _handle(self, point: str, ctx: dict[str, Any]) -> None:
        if point != self.point or self.remaining <= 0:
            return
        if self.actor is not None and ctx.get("actor") != self.actor:
            return
        if self.when is not None and not self.when(ctx):
            return
        self.remaining -= 1
        self.fired += 1
        if self.observer is not None:
            self.observer("fired", {**ctx, "error": self.error})
        raise self.error

    def __repr__(self) -> str:
        who = f" actor={self.actor}" if self.actor else ""
        return (f"<Fault {self.point}{who} {type(self.error).__name__} fired={self.fired} "
                f"remaining={self.remaining}>")

    def close(self) -> None:
        """Uninstall: later crossings pass untouched."""
        self._uninstall()
