"""A Jepsen-style history of what the executors, the queue and the dispatcher did.

Every row is one observed step, in the order it happened:

    time      seconds since the history started (monotonic clock)
    actor     who did it: a worker name ("A", "B"), "dispatcher", or "lab" (you)
    process   the single-threaded thing inside the actor: "<actor>:<job id>" while a
              worker handles a job (e.g. "A:T7KQ2M-0"), else the actor
    type      "invoke" (an operation starts), "ok" (it took effect), "fail" (it certainly
              did not), "info" (something happened / outcome unknown) — Jepsen's four
    op        the operation: claim, progress, result, remind, error report, job, add,
              dispatch, gate, stalled, worker error, fault, ...
    task_id, run, execution   the task, its round and the short (8 characters) lease id
    detail    a short human-readable note

Where rows come from:

- **probe crossings** (`teamdesk.probes`), mapped by `POINT_OPS`: e.g. `claim.before` is
  `invoke claim`, `claim.after` is `ok claim`, `export.after_read` is `invoke progress`
  (a batch was read, its progress write comes next), `export.after_progress` is
  `ok progress`;
- **the processor's log lines** (`teamdesk.processor`), mapped by `LOG_OPS`: a lost lease
  (`task.lease_lost`) is `fail <what it was writing>`, an error that could not be reported
  (`task.error_unreported`) is `fail error report`;
- **worker events** (a `labs.recorder.Recorder`): `active` is `invoke job`, `completed`
  is `ok job`, `failed` is `fail job`, `stalled` and `error` are `info`;
- **gates** and **faults** of a lab (`info gate` paused/released, `info fault`), the
  lab's dispatcher scans (`invoke/ok/fail dispatch`) and anything a cell adds with
  `History.add`.

A lab (`labs.lab.Lab`) fills `lab.history` for its own workers only. Use
`history.frame()` for a DataFrame and `history.plot(path=...)` for a swimlane picture.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.i18n import say
from teamdesk.tasks.queue import task_job_id

#: The history's columns, in this order.
COLUMNS: tuple[str, ...] = ("time", "actor", "process", "type", "op", "task_id", "run",
                            "execution", "detail")
TYPES: tuple[str, ...] = ("invoke", "ok", "fail", "info")

#: probe point -> (type, op). A point not listed is recorded as `info <point>`.
POINT_OPS: dict[str, tuple[str, str]] = {
    "claim.before": ("invoke", "claim"),
    "claim.after": ("ok", "claim"),
    "export.after_read": ("invoke", "progress"),
    "export.after_progress": ("ok", "progress"),
    "export.before_result": ("invoke", "result"),
    "export.after_result": ("ok", "result"),
    "reminder.after_lease_check": ("invoke", "remind"),
    "reminder.after_event": ("info", "remind"),
    "reminder.after_completion": ("info", "remind"),
    "error.before_write": ("invoke", "error report"),
    "dispatch.before_add": ("invoke", "add"),
}

#: processor/dispatcher log event -> (type, op or None = use its `during` field, detail).
LOG_OPS: dict[str, tuple[str, str | None, str]] = {
    "task.lease_lost": ("fail", None, "lease lost"),
    "task.error_unreported": ("fail", "error report", "lease lost: error not reported"),
    "task.error": ("ok", "error report", "error reported"),
    "task.not_claimed": ("fail", "claim", "nothing to claim"),
    "task.skipped": ("info", "skip", "old run or already completed"),
    "task.missing": ("fail", "load", "task row missing"),
    "worker.close_timeout": ("info", "close", "graceful close timed out; forced"),
    "dispatch.fault": ("fail", "dispatch", "tick failed"),
}

def _details() -> dict[str, str]:
    """The details of `LOG_OPS` in the edition's words (`History.detail`)."""
    return {
        "lease lost": say("history.detail.lease-lost", "lease lost"),
        "lease lost: error not reported": say("history.detail.error-unreported",
                                              "lease lost: error not reported"),
        "error reported": say("history.detail.error-reported", "error reported"),
        "nothing to claim": say("history.detail.not-claimed", "nothing to claim"),
        "old run or already completed": say("history.detail.skipped",
                                            "old run or already completed"),
        "task row missing": say("history.detail.missing", "task row missing"),
        "graceful close timed out; forced": say("history.detail.close-timeout",
                                                "graceful close timed out; forced"),
        "tick failed": say("history.detail.tick-failed", "tick failed"),
    }


#: What a lost lease was doing (`LeaseLost.during`) -> the op it fails.
_DURING_OPS = {"reminder completion": "remind"}

_WORKER_EVENTS: dict[str, tuple[str, str]] = {
    "active": ("invoke", "job"),
    "completed": ("ok", "job"),
    "failed": ("fail", "job"),
    "stalled": ("info", "stalled"),
    "error": ("info", "worker error"),
}

_PLACEHOLDER = re.compile(r"(?:(\w+)=)?%[sdrif]")


def short(execution_id: Any) -> str:
    """The first 8 characters of an execution id ('' for none): enough to tell leases apart."""
    return str(execution_id)[:8] if execution_id else ""


def execution_labels(executions: Iterable[Any]) -> dict[str, str]:
    """Name executions E1, E2, … in the order they first appear (blanks skipped), keyed by
    their short id (`short`). One lease, one name: the plot, the printed story and a
    table's `execution` column can all say "E2" for B's lease instead of a uuid prefix."""
    labels: dict[str, str] = {}
    for execution in executions:
        key = short(execution)
        if key and key not in labels:
            labels[key] = f"E{len(labels) + 1}"
    return labels


#: Ops of history rows that record a write without a lease clearing a task's
#: `execution_id` (the retired `failed` callback, `labs.scenes.ch26d.LateCallback`): an `ok`
#: one ends whatever lease the task had, whoever held it (W2 broken on purpose).
LEASE_WIPES = frozenset({"failed callback"})


@dataclass
class LeaseSpan:
    """One lease in the ledger (`History.leases`): execution `label` (E1, …) of `actor`
    held task `task_id` from history row `start` until row `end` (None: still held at the
    end of the history), which `ended_by` "taken over" (a newer claim, P2), "commit"
    (the completion write, P5/P10), "error report" (P7) or "wiped" (a lease-less write of
    a counterexample cleared `execution_id`: an op of `LEASE_WIPES`, W2 broken)."""

    task_id: str
    run: int | None
    execution: str
    label: str
    actor: str
    process: str
    start: int
    end: int | None = None
    ended_by: str | None = None


def _split_job_id(job_id: Any) -> tuple[str | None, int | None]:
    text = str(job_id or "")
    task_id, sep, run = text.rpartition("-")
    if sep and run.isdigit():
        return task_id, int(run)
    return None, None


def parse_log(record: logging.LogRecord) -> tuple[str, dict[str, str]]:
    """A teamdesk log line `event key=%s key=%s …` as (event, {key: value}).

    Uses the format string and its arguments, so values with spaces (`during=error
    report`) survive; a placeholder without a key is appended to the previous value."""
    msg = str(record.msg)
    event = msg.split(" ", 1)[0]
    args = record.args if isinstance(record.args, tuple) else ()
    fields: dict[str, str] = {}
    last: str | None = None
    for m, value in zip(_PLACEHOLDER.finditer(msg), args, strict=False):
        key = m.group(1)
        if key:
            fields[key] = str(value)
            last = key
        elif last is not None:
            fields[last] += f": {value}"
    return event, fields


class History:
    """An append-only list of history rows (see the module docstring), with a DataFrame
    view and a swimlane plot. `start` is the monotonic instant that is time 0."""

    def __init__(self, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.rows: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"<History {len(self.rows)} rows>"

    # ------------------------------------------------------------ recording

    def add(self, *, actor: str | None, type: str, op: str, task_id: str | None = None,
            run: int | None = None, execution: Any = None, detail: Any = "",
            process: str | None = None, t: float | None = None) -> dict[str, Any]:
        """Append one row and return it. `type` is invoke/ok/fail/info; `t` is a
        `time.monotonic()` instant (default: now); `process` defaults to
        `<actor>:<job id>` when the task is known, else the actor."""
        if type not in TYPES:
            raise ValueError(f"type must be one of {', '.join(TYPES)}, not {type!r}")
        actor = actor or "?"
        if process is None:
            process = (f"{actor}:{task_job_id(task_id, run)}"
                       if task_id and isinstance(run, int) and run >= 0 else actor)
        row = {
            "time": round((time.monotonic() if t is None else t) - self.start, 4),
            "actor": actor, "process": process, "type": type, "op": op,
            "task_id": task_id, "run": run, "execution": short(execution),
            "detail": str(detail) if detail is not None else "",
        }
        self.rows.append(row)
        return row

    def on_probe(self, point: str, ctx: dict[str, Any], actor: str | None = None) -> None:
        """Record a probe crossing (`POINT_OPS` gives its type and op)."""
        type_, op = POINT_OPS.get(point, ("info", point))
        detail = point
        if "batch" in ctx:
            detail += f" batch {ctx['batch']}: {ctx.get('read')}/{ctx.get('total')} read"
        if "error" in ctx:
            detail += f" after {ctx['error']}"
        self.add(actor=ctx.get("actor") or actor, type=type_, op=op, task_id=ctx.get("task_id"),
                 run=ctx.get("run"), execution=ctx.get("execution_id"), detail=detail)

    def on_log(self, record: logging.LogRecord, actor: str | None = None) -> None:
        """Record a teamdesk log line listed in `LOG_OPS` (others are ignored)."""
        event, f = parse_log(record)
        if event not in LOG_OPS:
            return
        type_, op, detail = LOG_OPS[event]
        if op is None:
            during = f.get("during", "write")
            op = _DURING_OPS.get(during, during)
        if f.get("error"):
            detail = f"{detail}: {f['error']}"
        run = f.get("run")
        self.add(actor=f.get("actor") or actor, type=type_, op=op, task_id=f.get("task_id"),
                 run=int(run) if run and run.isdigit() else None,
                 execution=f.get("execution_id"), detail=detail)

    def on_worker_event(self, event: dict[str, Any]) -> None:
        """Record a worker event as a `Recorder` stores it (`kind`, `t`, `actor`, …)."""
        kind = event.get("kind")
        if kind not in _WORKER_EVENTS:
            return
        type_, op = _WORKER_EVENTS[kind]
        task_id, run = event.get("task_id"), event.get("run")
        if task_id is None:
            task_id, run = _split_job_id(event.get("job_id"))
        if kind == "completed":
            detail = event.get("result")
        elif kind == "failed":
            detail = f"{event.get('error')} (exhausted={event.get('exhausted')})"
        elif kind == "error":
            detail = event.get("error")
        else:
            detail = f"job {event.get('job_id')}"
        self.add(actor=event.get("actor"), type=type_, op=op, task_id=task_id, run=run,
                 detail=detail, t=event.get("t"))

    def on_gate(self, kind: str, point: str, event: str, ctx: dict[str, Any],
                actor: str | None = None) -> None:
        """Record a gate pause/release or a fault firing (`kind` is "gate" or "fault")."""
        error = ctx.get("error")
        detail = f"{event} at {point}" + (f": {type(error).__name__}: {error}" if error else "")
        self.add(actor=ctx.get("actor") or actor, type="info", op=kind,
                 task_id=ctx.get("task_id"), run=ctx.get("run"),
                 execution=ctx.get("execution_id"), detail=detail)

    # ------------------------------------------------------------ reading

    def of(self, **match: Any) -> list[dict[str, Any]]:
        """Rows whose fields equal `match`, e.g. `history.of(actor="A", type="fail")`."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in match.items())]

    def index(self, where: Callable[[dict[str, Any]], bool] | None = None, *,
              after: int = -1, **match: Any) -> int:
        """Position of the first row after `after` that matches; `ValueError` if none.
        Handy for asserting an order: `h.index(op="claim", actor="B") > h.index(...)`."""
        for i, r in enumerate(self.rows):
            if i > after and all(r.get(k) == v for k, v in match.items()) and (
                    where is None or where(r)):
                return i
        raise ValueError(f"no history row matching {match} after #{after}")

    @staticmethod
    def detail(row: dict[str, Any]) -> str:
        """A row's `detail` in the edition's words, for a line a cell prints: the notes this
        module writes itself for the processor's log lines (`LOG_OPS`); any other detail (a
        gate's, a fault's, a cell's own) as it was recorded. Match rows on the recorded
        `detail`, not on this. A note the history extended with the logged error (`lease
        lost: error not reported: OSError`) keeps the error as it was logged."""
        detail, notes = row.get("detail") or "", _details()
        if detail in notes:
            return notes[detail]
        for note in sorted(notes, key=len, reverse=True):  # the longest note that fits
            if detail.startswith(f"{note}: "):
                return say("history.detail.with-error", "{note}: {error}", note=notes[note],
                           error=detail[len(note) + 2:])
        return detail

    def frame(self):
        """The rows as a pandas DataFrame with the columns of `COLUMNS`."""
        import pandas as pd

        df = pd.DataFrame(self.rows, columns=list(COLUMNS))
        df["run"] = df["run"].astype("Int64")
        return df

    def _repr_html_(self) -> str:
        return self.frame()._repr_html_()

    # ------------------------------------------------------------ executions, leases, commits

    def execution_labels(self) -> dict[str, str]:
        """Short execution id -> "E1", "E2", … in the order the executions first appear
        (`execution_labels`). The swimlane plot uses these names; a notebook's table can
        map its `execution` column through the same dict so both say E1 for one lease."""
        return execution_labels(r["execution"] for r in self.rows)

    def commits(self) -> list[int]:
        """Positions of the completion writes that committed: each one made its task
        COMPLETED and cleared the lease (P5 for an export, P10 for a reminder).

        An export's is its `ok result` row (`export.after_result`). A reminder has no probe
        after its commit, so its commit is the `ok job` that ends a process whose `invoke
        remind` (inside the transaction, after the lease check) saw no lost lease and no
        error report since its claim: only the committed completion returns normally from
        there (a lost lease is logged, an error goes through the error report)."""
        found: list[int] = []
        state: dict[str, dict[str, Any]] = {}
        for i, r in enumerate(self.rows):
            proc, typ, op = r["process"], r["type"], r["op"]
            if typ == "ok" and op == "claim":
                state[proc] = {"remind": False, "broken": False}
                continue
            st = state.get(proc)
            if st is None:
                continue
            if typ == "invoke" and op == "remind":
                st["remind"] = True
            elif typ == "fail" or op == "error report":
                st["broken"] = True
            elif typ == "ok" and op == "result":
                found.append(i)
                del state[proc]
            elif typ == "ok" and op == "job":
                if st["remind"] and not st["broken"]:
                    found.append(i)
                del state[proc]
        return found

    def leases(self) -> list[LeaseSpan]:
        """Who holds each task's lease in the ledger over time, from the history alone.

        A lease starts at an `ok claim` (the claim wrote a fresh `execution_id`, P2) and
        ends at the next claim of the same task (taken over, P2), at its completion commit
        (`commits`: P5/P10 clear `execution_id`), or at its holder's `ok error report` (P7
        clears it too), or at a lease-less wipe (`LEASE_WIPES`, W2 broken); otherwise it
        is still held at the end of the history. A D6
        recovery also clears it, but a dispatcher scan's row does not say which task it
        recovered, so the span then runs on until the next claim."""
        labels = self.execution_labels()
        commits = set(self.commits())
        holder: dict[str, LeaseSpan] = {}
        spans: list[LeaseSpan] = []
        for i, r in enumerate(self.rows):
            task_id = r["task_id"]
            held = holder.get(task_id) if task_id else None
            if r["type"] == "ok" and r["op"] == "claim" and task_id and r["execution"]:
                if held is not None:
                    held.end, held.ended_by = i, "taken over"
                holder[task_id] = LeaseSpan(
                    task_id=task_id, run=r["run"], execution=r["execution"],
                    label=labels[r["execution"]], actor=r["actor"], process=r["process"],
                    start=i)
                spans.append(holder[task_id])
            elif held is not None and r["type"] == "ok" and r["op"] in LEASE_WIPES:
                held.end, held.ended_by = i, "wiped"  # no lease needed: that is the bug
                del holder[task_id]
            elif held is None or r["process"] != held.process:
                continue  # only the holder's own writes end its lease
            elif i in commits:
                held.end, held.ended_by = i, "commit"
                del holder[task_id]
            elif r["type"] == "ok" and r["op"] == "error report":
                held.end, held.ended_by = i, "error report"
                del holder[task_id]
        return spans

    # ------------------------------------------------------------ the swimlane plot

    def plot(self, path: str | Path | None = None, *, title: str | None = None,
             lanes: Iterable[str] | None = None, x: str = "step", lease: bool = True):
        """A swimlane picture a class can read: one lane per actor, one column per step,
        and a lease lane per task (`labs.swimlane.plot` says what every mark means).
        Returns the figure, which displays itself in a notebook; with `path` it is also
        saved there as a PNG."""
        from labs import swimlane

        return swimlane.plot(self, path, title=title, lanes=lanes, x=x, lease=lease)
