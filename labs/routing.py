"""Whose crossing is this? Routing the process-wide signals to the lab they belong to.

Three things the product and asyncio report process-wide must reach one open lab:

- **probe crossings** — `teamdesk.probes` keeps one list of handlers for the process;
- **log lines** of the `teamdesk` loggers — one logging tree for the process;
- **loop exceptions** — one exception handler per event loop; on Python 3.11 a loop
  exception cannot be attributed to one lab, so every open lab on that loop gets it.

Probes and logs are attributed by a context variable, `SCOPE`: a lab starts its workers
and runs its dispatcher inside a context where `SCOPE` names it (its `Routes`) and the
actor; asyncio copies that context into every task those workers spawn, so a probe
handler, a log handler or a gate predicate can ask "whose crossing is this?" with
`current()`. Code started outside any lab (a plain test worker) has no scope, and no lab
records it.

`REGISTRY` is the one owner of the process-wide state: which labs are open by name (a
re-run first cell replaces its earlier lab), which error books listen on which loop (and
the handler each loop had before), and the single probe handler and log handler installed
while at least one lab is open. `labs.lab.Lab` is its only client: it enters a lab at
open and leaves it at close.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from labs.history import History
from teamdesk import probes

if TYPE_CHECKING:
    from labs.lab import Lab

#: Loggers whose INFO records the histories read (`task.lease_lost`, `task.error`, …).
LOGGER = "teamdesk"

#: How many product log lines a lab keeps (`lab.logs`), newest last.
MAX_LOG_LINES = 5000


class Sink(Protocol):
    """What the registry forwards probe crossings and log lines to (a lab's `Routes`)."""

    def on_probe(self, point: str, ctx: dict[str, Any], actor: str | None) -> None: ...

    def on_log(self, record: logging.LogRecord, actor: str | None) -> None: ...


class LoopListener(Protocol):
    """What the registry forwards loop exceptions to (a lab's error book)."""

    def on_loop_exception(self, context: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Scope:
    """The running code belongs to `sink`'s lab, acting as `actor` (a worker's name,
    "dispatcher")."""

    sink: Sink
    actor: str | None = None


SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("teamdesk_lab_scope",
                                                                    default=None)


def current() -> Scope | None:
    """The lab scope of the running code, or None."""
    return SCOPE.get()


class Routes:
    """One lab's end of the routing: its probe crossings go to its history, its log lines
    to `logs` (formatted, newest last) and to its history. A notebook would otherwise
    print those lines under the wrong cell, or drop them."""

    def __init__(self, history: History, started: float) -> None:
        self.history = history
        self.started = started
        #: The product's log lines (INFO and up) from this lab's workers and scans.
        self.logs: collections.deque[str] = collections.deque(maxlen=MAX_LOG_LINES)

    def on_probe(self, point: str, ctx: dict[str, Any], actor: str | None) -> None:
        self.history.on_probe(point, ctx, actor)

    def on_log(self, record: logging.LogRecord, actor: str | None) -> None:
        now = round(time.monotonic() - self.started, 3)
        self.logs.append(f"{now:8.3f} {record.levelname:<7} {actor or '-':<10} "
                         f"{record.getMessage()}")
        self.history.on_log(record, actor)

    def scope(self, actor: str | None) -> Scope:
        """The scope of code acting for this lab as `actor`."""
        return Scope(self, actor)

    def context(self, actor: str | None) -> contextvars.Context:
        """A copy of the current context in which `SCOPE` is this lab as `actor`: a worker
        created and started in it passes the scope to every task it spawns."""
        ctx = contextvars.copy_context()
        ctx.run(SCOPE.set, self.scope(actor))
        return ctx

    @contextlib.contextmanager
    def acting_as(self, actor: str | None) -> Iterator[None]:
        """Run the block (in this task) as `actor` of this lab (the dispatcher's scan)."""
        token = SCOPE.set(self.scope(actor))
        try:
            yield
        finally:
            SCOPE.reset(token)

    def mine(self, ctx: dict[str, Any] | None = None) -> bool:
        """Whether the running code acts for this lab (a gate's and a fault's filter)."""
        scope = SCOPE.get()
        return scope is not None and scope.sink is self


class _LogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        scope = SCOPE.get()
        if scope is None:
            return
        try:
            scope.sink.on_log(record, scope.actor)
        except Exception:  # a history bug must never break an executor
            self.handleError(record)


class Registry:
    """The process-wide routing state of the open labs, owned in one place (see the module
    docstring). Nothing else keeps such state at module level."""

    def __init__(self) -> None:
        #: Open labs by name, for labs opened with `replace` (a re-run first cell).
        self.by_name: dict[str, Any] = {}
        #: Per loop: the error books listening, and the handler the loop had before.
        self._listeners: dict[asyncio.AbstractEventLoop, list[LoopListener]] = {}
        self._previous: dict[asyncio.AbstractEventLoop, Any] = {}
        #: How many labs use the probe and log handlers (installed while > 0).
        self.users = 0
        self._uninstall: Callable[[], None] | None = None
        self._handler = _LogHandler(level=logging.INFO)
        self._saved_level: int | None = None

    # ------------------------------------------------------------ labs by name

    def take(self, name: str) -> Any:
        """Remove and return the open lab registered under `name`, or None."""
        return self.by_name.pop(name, None)

    def name(self, name: str, lab: Lab) -> None:
        """Register `lab` under `name` (a later `take(name)` finds it)."""
        self.by_name[name] = lab

    def unname(self, name: str, lab: Lab) -> None:
        """Forget `name` if it still refers to `lab` (a newer lab may have it by now)."""
        if self.by_name.get(name) is lab:
            del self.by_name[name]

    # ------------------------------------------------------------ loop exceptions

    def _loop_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        for listener in tuple(self._listeners.get(loop, ())):
            listener.on_loop_exception(context)
        previous = self._previous.get(loop)
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def watch_loop(self, loop: asyncio.AbstractEventLoop, listener: LoopListener) -> None:
        """Send `loop`'s exceptions to `listener` too (the first one installs our handler,
        keeping the loop's previous one to call after)."""
        if loop not in self._listeners:
            self._previous[loop] = loop.get_exception_handler()
            loop.set_exception_handler(self._loop_handler)
            self._listeners[loop] = []
        self._listeners[loop].append(listener)

    def unwatch_loop(self, loop: asyncio.AbstractEventLoop, listener: LoopListener) -> None:
        """Stop sending to `listener`; the last one leaving restores the loop's handler."""
        listeners = self._listeners.get(loop)
        if listeners is None or listener not in listeners:
            return
        listeners.remove(listener)
        if listeners:
            return
        del self._listeners[loop]
        previous = self._previous.pop(loop, None)
        if loop.get_exception_handler() == self._loop_handler:  # never clobber someone else's
            loop.set_exception_handler(previous)

    # ------------------------------------------------------------ probes and logs

    async def _probe(self, point: str, ctx: dict[str, Any]) -> None:
        scope = SCOPE.get()
        if scope is not None:
            scope.sink.on_probe(point, ctx, scope.actor)

    def acquire(self) -> None:
        """A lab opened: the probe and log handlers are installed while any lab uses them."""
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
        """A lab closed: the last one out uninstalls the handlers and restores the level."""
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


#: The process's one registry (see the module docstring); `labs.lab.Lab` is its client.
REGISTRY = Registry()
