"""A lab's error book: background failures never vanish.

Exceptions in background tasks and failing jobs show in no notebook cell. So every worker
`failed`/`error` event, every crash of a worker's run loop, every exception the asyncio
loop reports (routed here by `labs.routing.REGISTRY`) and every clean-up step of
`close()` that did not work is written into the lab's `ErrorBook` as a `LabError`.
`Lab.close()` / `Lab.check()` raise `LabErrors` for those nobody acknowledged; expected
ones (a retry scenario, the late executor of a takeover race) are acknowledged first with
`lab.acknowledge(...)` or `with lab.expect_errors(...)`. Errors that arrive while the lab
or that worker is closing (an executor released by the close itself, a connection closed
under a worker) are recorded but acknowledged automatically.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from labs.history import History


@dataclass
class LabError:
    """One background failure: a worker `failed`/`error` event, a loop exception, or a
    clean-up step of `close()` that did not work."""

    #: Seconds since the lab opened.
    time: float
    #: "worker failed", "worker error", "worker run", "loop" or "close".
    source: str
    actor: str | None
    job_id: str | None
    message: str
    #: Acknowledged errors are expected ones: `close()` does not raise for them.
    acknowledged: bool = False

    def __str__(self) -> str:
        who = f" {self.actor}" if self.actor else ""
        job = f" job {self.job_id}" if self.job_id else ""
        ack = " (acknowledged)" if self.acknowledged else ""
        return f"[{self.time:7.3f}s] {self.source}{who}{job}: {self.message}{ack}"

    def matches(self, source: str | None = None, actor: str | None = None,
                job_id: str | None = None, contains: str | None = None) -> bool:
        """Whether every filter given matches (`contains`: a substring of the message)."""
        return ((source is None or self.source == source)
                and (actor is None or self.actor == actor)
                and (job_id is None or self.job_id == job_id)
                and (contains is None or contains in self.message))


class LabErrors(AssertionError):
    """Raised by `Lab.close()` / `Lab.check()`: background errors nobody acknowledged."""

    def __init__(self, name: str, errors: list[LabError]) -> None:
        self.errors = errors
        lines = "\n".join(f"  {e}" for e in errors)
        super().__init__(
            f"lab {name!r} saw {len(errors)} unacknowledged background error(s):\n{lines}\n"
            "If they were expected, call lab.acknowledge(...) before closing.")


class ErrorBook:
    """The errors of one lab, in order, and what is expected of them.

    `closing()` says whether the lab is closing (errors then arrive acknowledged);
    `history` gets an `info` row for the failures it should show on the swimlane."""

    def __init__(self, name: str, started: float, history: History,
                 closing: Callable[[], bool]) -> None:
        self.name = name
        self.started = started
        self.history = history
        self._closing = closing
        self._records: list[LabError] = []
        self._expecting: list[dict[str, Any]] = []

    def now(self) -> float:
        """Seconds since the lab opened (what `LabError.time` holds)."""
        return round(time.monotonic() - self.started, 3)

    # ------------------------------------------------------------ reading and acknowledging

    @property
    def all(self) -> list[LabError]:
        """Every error so far (acknowledged ones included), in order (a copy)."""
        return list(self._records)

    @property
    def unacknowledged(self) -> list[LabError]:
        return [e for e in self._records if not e.acknowledged]

    def acknowledge(self, **filters: str | None) -> int:
        """Mark matching errors as expected; returns how many were newly acknowledged."""
        n = 0
        for e in self._records:
            if not e.acknowledged and e.matches(**filters):
                e.acknowledged = True
                n += 1
        return n

    def matching(self, **filters: str | None) -> list[LabError]:
        return [e for e in self._records if e.matches(**filters)]

    @contextlib.contextmanager
    def expect(self, **filters: str | None) -> Iterator[None]:
        """Acknowledge matching errors that arrive while the block runs (also those
        recorded by another task meanwhile, as they are checked on arrival)."""
        start = len(self._records)
        self._expecting.append(filters)
        try:
            yield
        finally:
            self._expecting.remove(filters)
            for e in self._records[start:]:
                if e.matches(**filters):
                    e.acknowledged = True

    def check(self) -> None:
        """Raise `LabErrors` if any error is unacknowledged."""
        if self.unacknowledged:
            raise LabErrors(self.name, self.unacknowledged)

    # ------------------------------------------------------------ recording

    def _add(self, error: LabError) -> None:
        if any(error.matches(**x) for x in self._expecting):
            error.acknowledged = True
        self._records.append(error)

    def on_worker_event(self, event: dict[str, Any], stopping: bool) -> None:
        """A recorder event of one of the lab's workers: `failed` and `error` are errors
        (acknowledged while the lab or that worker — `stopping` — is closing)."""
        if event.get("kind") not in ("failed", "error"):
            return
        self._add(LabError(
            round(event["t"] - self.started, 3), f"worker {event['kind']}",
            event.get("actor"), event.get("job_id"), str(event.get("error")),
            acknowledged=self._closing() or stopping))

    def on_run_error(self, actor: str, err: BaseException, closing: bool) -> None:
        """A worker's run loop crashed (acknowledged if it or the lab was closing: bullmq's
        run loop can trip over its own connection being closed during start-up)."""
        closing = closing or self._closing()
        self._records.append(LabError(
            self.now(), "worker run", actor, None,
            f"the worker's run loop ended with {type(err).__name__}: {err}"
            + (" (while closing)" if closing else ""), acknowledged=closing))
        self.history.add(actor=actor, type="info", op="worker error",
                         detail=f"run loop ended: {type(err).__name__}: {err}")

    def on_loop_exception(self, context: dict[str, Any]) -> None:
        """What the loop's exception handler saw (`labs.routing.REGISTRY` calls it for
        every lab open on that loop)."""
        exc = context.get("exception")
        message = str(context.get("message") or "")
        if exc is not None:
            message = f"{message}: {type(exc).__name__}: {exc}" if message else (
                f"{type(exc).__name__}: {exc}")
        self._records.append(LabError(self.now(), "loop", None, None, message,
                                      acknowledged=self._closing()))
        self.history.add(actor="loop", type="info", op="loop exception", detail=message)

    def close_problem(self, what: str, err: BaseException) -> None:
        """A clean-up step of `close()` failed; the others still run."""
        self._records.append(LabError(self.now(), "close", None, None,
                                      f"{what} failed: {type(err).__name__}: {err}"))
