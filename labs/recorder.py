"""Collect worker events so background failures never vanish, and wait on them.

A `Recorder` is an `on_event` hook for `create_task_worker`. It keeps every event
(`failed`, `stalled`, `completed`, `error`) with the actor that saw it, and lets a test or
notebook cell wait — bounded — for the one it needs. Other observers (a lab's error list,
its history) can `subscribe` to see each event as it arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from devkit.i18n import say


class Recorder:
    """Every worker event, in order, with a monotonic time."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def __call__(self, kind: str, fields: dict[str, Any]) -> None:
        event = {"kind": kind, "t": time.monotonic(), **fields}
        self.events.append(event)
        self._changed.set()
        for listener in tuple(self._listeners):
            listener(event)

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call `listener(event)` for every later event (the dict stored in `events`);
        returns the function that unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def of(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        """Events of `kind` whose fields equal `match`."""
        return [e for e in self.events
                if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())]

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Worker `error` events: something in the background went wrong."""
        return self.of("error")

    async def wait_for(self, kind: str, timeout: float = 8.0,
                       where: Callable[[dict[str, Any]], bool] | None = None,
                       **match: Any) -> dict[str, Any]:
        """The first event of `kind` matching `match` (and `where`), waiting at most
        `timeout` seconds; the timeout reports an event that never came."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for e in self.of(kind, **match):
                if where is None or where(e):
                    return e
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                seen = [(e["kind"], e.get("actor")) for e in self.events]
                raise AssertionError(say(
                    f"no {kind!r} event matching {match} within {timeout:g} s; saw {seen}",
                    f"{timeout:g} 秒内没有符合 {match} 的 {kind!r} 事件；已看到 {seen}"))
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass
