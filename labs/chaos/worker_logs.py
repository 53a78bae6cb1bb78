"""The one place that reads the worker processes' log files.

The workers are other processes, so the product offers no structured source here that
crosses the boundary: probes and the worker's listeners live in the worker's own process,
and the ledger does not record leases lost, stalls, ticks or dispatch faults. What it
does offer is its log lines, structured as the house writes them — `HH:MM:SS LEVEL
event key=value …` (`teamdesk.cli`'s log format, the book's event names) — so they are
parsed here once, into `LogLine`s, and everything else counts events and reads fields.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

from labs.chaos.words import Words
from labs.timings import CHAOS_WORKER
from teamdesk.tasks.dispatcher import DispatchReport

#: `teamdesk.cli`'s format: `%(asctime)s %(levelname)s %(message)s`, dates as `%H:%M:%S`;
#: the message starts with its event name (`task.lease_lost`, `dispatch.fault`, …).
_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d) (\S+) ([a-z_]+\.[a-z_]+)(?: (.*))?$", re.MULTILINE)
_FIELD = re.compile(r"(\w+)=(\S+)")


@dataclass(frozen=True)
class LogLine:
    """One event line of a worker's log."""

    #: Seconds after local midnight (the log stamps whole seconds).
    second: int
    level: str
    #: The event name, e.g. `dispatch.fault`.
    event: str
    #: The message after the event name.
    rest: str
    #: Its `key=value` fields, values as text.
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """The message as logged: the event and what follows it."""
        return f"{self.event} {self.rest}".rstrip()


def parse(text: str) -> Iterator[LogLine]:
    """The event lines of a log text (other lines — tracebacks, our start markers — are
    skipped)."""
    for m in _LINE.finditer(text):
        rest = m[6] or ""
        yield LogLine(int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]), m[4], m[5], rest,
                      dict(_FIELD.findall(rest)))


#: The labels of the counts a report keeps as figures of its own (`ChaosReport`).
LEASES_LOST = "leases lost (P6: a newer executor owned the task)"
STALLS = "queue stalls detected"
#: What the summary counts in the workers' logs: label → (the last part of its key
#: `chaos.logs.<key>`, the events of a line that counts).
_COUNTED: dict[str, tuple[str, tuple[str, ...]]] = {
    LEASES_LOST: ("leases-lost", ("task.lease_lost",)),
    "errors reported with the lease (P7)": ("errors", ("task.error",)),
    STALLS: ("stalls", ("task.stalled",)),
    "jobs the queue gave up on (failed listener, exhausted)": ("gave-up", ("task.failed",)),
    "dispatch ticks that failed (D8)": ("ticks-failed", ("dispatch.fault",)),
    "worker/Redis errors (worker.error)": ("worker-errors", ("worker.error",)),
    "drain timeouts (exit 3)": ("drain-timeouts", ("worker.drain_timeout",)),
    "duplicate deliveries skipped (P1)": ("skipped", ("task.skipped", "task.not_claimed")),
}
#: Label → when a line counts.
LOG_COUNTS: dict[str, tuple[str, ...]] = {label: ev for label, (_, ev) in _COUNTED.items()}
#: The labels in the edition's words.
LABELS = Words("chaos.logs", {label: key for label, (key, _) in _COUNTED.items()}, __file__)


def shown(label: str) -> str:
    """A label of `LOG_COUNTS` in the edition's words."""
    return LABELS.shown(label)


#: The dispatcher's tick report fields summed over the run (D4, D6); the names are
#: `DispatchReport`'s own, so a renamed field fails here rather than counting 0.
TICK_SUMS = ("recovered_stale", "re_added", "failed_from_queue")
if not set(TICK_SUMS) <= {f.name for f in fields(DispatchReport)}:
    raise ImportError(f"DispatchReport no longer has all of {TICK_SUMS}")


def counts(lines: Iterable[LogLine]) -> dict[str, int]:
    """`LOG_COUNTS` over `lines`: a `task.failed` counts only when exhausted (W2)."""
    out = dict.fromkeys(LOG_COUNTS, 0)
    for line in lines:
        for label, events in LOG_COUNTS.items():
            if line.event in events and (line.event != "task.failed"
                                         or line.fields.get("exhausted") == "true"):
                out[label] += 1
    return out


def tick_sums(lines: Iterable[LogLine]) -> dict[str, int]:
    """`TICK_SUMS` summed over the `dispatch.tick` lines."""
    out = dict.fromkeys(TICK_SUMS, 0)
    for line in lines:
        if line.event == "dispatch.tick":
            for name in TICK_SUMS:
                out[name] += int(line.fields.get(name, 0))
    return out


#: A dispatch fault this long after a fault window closed is still that fault's doing: a
#: tick that began while Redis was unreachable fails within its bounded Redis calls
#: (`redis_timeout_s`, a look-up and an add), and the log stamps whole seconds.
FAULT_GRACE_S = 2 * float(CHAOS_WORKER.redis_timeout_s) + 1.0


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
    for name, text in logs.items():
        for line in parse(text):
            if line.event != "dispatch.fault":
                continue
            at = midnight + line.second
            if at < wall0 - 43_200:  # the run crossed midnight
                at += 86_400
            hit = any(lane in ("redis", name) and start - 1.0 <= at <= end + FAULT_GRACE_S
                      for start, end, lane in windows)
            (injected if hit else own).append(f"{name}: {line.message}")
    return injected, own
