"""Which lab (and which actor) the running code belongs to: a context variable.

Probe handlers are process-wide (`teamdesk.probes` keeps one list), so two labs open in one
kernel or test session would otherwise see each other's crossings. A lab starts its
workers and runs its dispatcher inside a context where `SCOPE` names it; asyncio copies
that context into every task those workers spawn, so a probe handler, a log handler or a
gate predicate can ask "whose crossing is this?" with `current()`. Code started outside
any lab (a plain test worker) has no scope, and no lab records it.

One `_Router` per process installs a single probe handler and a single log handler while
at least one lab is open, and forwards what it sees to the lab in scope.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from teamdesk import probes

#: Loggers whose INFO records the histories read (`task.lease_lost`, `task.error`, …).
LOGGER = "teamdesk"


class Sink(Protocol):
    """What the router forwards to (a lab)."""

    def _on_probe(self, point: str, ctx: dict[str, Any], actor: str | None) -> None: ...

    def _on_log(self, record: logging.LogRecord, actor: str | None) -> None: ...


@dataclass(frozen=True)
class Scope:
    sink: Sink
    actor: str | None = None


SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("teamdesk_lab_scope",
                                                                    default=None)


def current() -> Scope | None:
    """The lab scope of the running code, or None."""
    return SCOPE.get()


class _LogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        scope = SCOPE.get()
        if scope is None:
            return
        try:
            scope.sink._on_log(record, scope.actor)
        except Exception:  # a history bug must never break an executor
            self.handleError(record)


class _Router:
    def __init__(self) -> None:
        self.users = 0
        self._uninstall: Callable[[], None] | None = None
        self._handler = _LogHandler(level=logging.INFO)
        self._saved_level: int | None = None

    async def _probe(self, point: str, ctx: dict[str, Any]) -> None:
        scope = SCOPE.get()
        if scope is not None:
            scope.sink._on_probe(point, ctx, scope.actor)

    def acquire(self) -> None:
        if self.users == 0:
            self._uninstall = probes.install(self._probe)
            logger = logging.getLogger(LOGGER)
            logger.addHandler(self._handler)
            # The processor reports lease loss at INFO; make sure those records exist.
            if logger.getEffectiveLevel() > logging.INFO:
                self._saved_level = logger.level
                logger.setLevel(logging.INFO)
        self.users += 1

    def release(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        self.users = 0
        if self._uninstall is not None:
            self._uninstall()
            self._uninstall = None
        logger = logging.getLogger(LOGGER)
        logger.removeHandler(self._handler)
        if self._saved_level is not None:
            logger.setLevel(self._saved_level)
            self._saved_level = None


ROUTER = _Router()
