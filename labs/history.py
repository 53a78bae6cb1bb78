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

import io
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass
class LeaseSpan:
    """One lease in the ledger (`History.leases`): execution `label` (E1, …) of `actor`
    held task `task_id` from history row `start` until row `end` (None: still held at the
    end of the history), which `ended_by` "taken over" (a newer claim, P2), "commit"
    (the completion write, P5/P10) or "error report" (P7)."""

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
        clears it too); otherwise it is still held at the end of the history. A D6
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
        """A swimlane picture a class can read: one lane per actor, one column per step.

        Each row is a marker in its actor's lane, labelled with its op and, when it ran
        under a lease, the execution's name (E1, E2, … in order of first appearance, as
        `execution_labels` gives them). Markers: hollow blue circle invoke, green dot ok,
        red cross fail, grey diamond info (Jepsen's four types); a green triangle is a
        claim that took the lease (P2), a big black-edged red cross a write refused
        because the lease was lost (P3, P6), a gold star the completion commit (P5, P10).
        A band joins an `invoke` to its `ok` (green) or `fail` (red) in the same process,
        and a grey hatched band shows how long a gate held an executor.

        Below the actors, the **lease** lane shows the ledger's side (`leases`): which
        execution holds `{id, run, execution_id}` over time, one coloured bar per lease,
        ending at a takeover, the commit or an error report; the commit that made the
        task COMPLETED is marked "winning commit". One lease lane per task when the
        history has several (`lease=False` leaves them out). A legend on the right says
        what every marker, band and bar means.

        `x="step"` (default) spaces the steps evenly, so simultaneous steps stay
        readable, and prints each step's time under it; `x="time"` places them at their
        real time. `lanes` fixes the actor order (default: order of first appearance,
        top down). Uses matplotlib's object API only (no pyplot state), so it works
        headless. Returns the figure, which displays itself in a notebook; with `path`
        it is also saved there as a PNG. Artists carry gids ("lease", "commit",
        "winner", …) so tests can find them."""
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import MaxNLocator

        if x not in ("step", "time"):
            raise ValueError(f"x must be 'step' or 'time', not {x!r}")

        class SwimlaneFigure(Figure):
            def _repr_png_(self) -> bytes:
                buf = io.BytesIO()
                self.savefig(buf, format="png")
                return buf.getvalue()

        rows = self.rows
        labels = self.execution_labels()
        commits = set(self.commits())
        spans = self.leases() if lease else []
        order = list(lanes) if lanes is not None else []
        for r in rows:
            if r["actor"] not in order:
                order.append(r["actor"])
        lease_tasks = list(dict.fromkeys(s.task_id for s in spans))
        lease_names = (["lease"] if len(lease_tasks) == 1
                       else [f"lease {t}" for t in lease_tasks])
        names = order + lease_names
        y = {a: i for i, a in enumerate(reversed(names))}
        lease_y = {t: y[n] for t, n in zip(lease_tasks, lease_names, strict=True)}
        xs = [float(i) if x == "step" else r["time"] for i, r in enumerate(rows)]
        # Step mode: half a step of room after the last one; time mode: 3 % of the span.
        tail = 0.5 if x == "step" else 0.03 * max(xs or [1.0]) + 0.01
        end_x = (max(xs) if xs else 0.0) + tail
        width = min(30.0, max(9.0, 0.42 * len(rows))) if x == "step" else 11.0
        height = max(4.2, 1.9 + 0.9 * max(len(names), 1))
        fig = SwimlaneFigure(figsize=(width + 3.4, height), dpi=100)
        ax = fig.add_subplot()
        colours = {"invoke": "#1f77b4", "ok": "#2ca02c", "fail": "#d62728", "info": "#7f7f7f"}
        markers = {"ok": "o", "fail": "X", "info": "D"}
        gold = "#f2b400"
        # Lease colours stay clear of the four type colours above.
        palette = ["#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#bcbd22"]
        lease_colour = {e: palette[i % len(palette)] for i, e in enumerate(labels)}

        open_ops: dict[tuple[str, str], int] = {}
        paused: dict[str, int] = {}
        for i, r in enumerate(rows):
            lane = y[r["actor"]]
            key = (r["process"], r["op"])
            if r["type"] == "invoke":
                open_ops[key] = i
            elif r["type"] in ("ok", "fail") and key in open_ops:
                j = open_ops.pop(key)
                ax.plot([xs[j], xs[i]], [lane, lane], linewidth=6, alpha=0.3,
                        color=colours[r["type"]], solid_capstyle="butt", zorder=1)
            if r["op"] == "gate" and r["detail"].startswith("paused"):
                paused[r["process"]] = i
            elif r["op"] == "gate" and r["process"] in paused:
                j = paused.pop(r["process"])
                ax.fill_between([xs[j], xs[i]], lane - 0.12, lane + 0.12, color="#bbbbbb",
                                alpha=0.5, hatch="//", linewidth=0, zorder=0)
        for i, r in enumerate(rows):
            lane, colour = y[r["actor"]], colours[r["type"]]
            lost = r["type"] == "fail" and r["detail"].startswith("lease lost")
            if r["type"] == "invoke":
                ax.scatter([xs[i]], [lane], marker="o", s=40, zorder=3, facecolors="white",
                           edgecolors=colour, linewidths=1.5)
            elif r["type"] == "ok" and r["op"] == "claim":
                ax.scatter([xs[i]], [lane], marker="^", s=80, zorder=3, c=colour, gid="claim")
            elif lost:
                ax.scatter([xs[i]], [lane], marker="X", s=130, zorder=3, c=colour,
                           edgecolors="black", linewidths=1.0, gid="lease lost")
            else:
                ax.scatter([xs[i]], [lane], marker=markers[r["type"]], s=40, zorder=3,
                           c=colour)
            if i in commits:
                ax.scatter([xs[i]], [lane], marker="*", s=320, zorder=4, c=gold,
                           edgecolors="black", linewidths=0.8, gid="commit")
            label = r["op"] if r["type"] in ("invoke", "info") else f"{r['op']} {r['type']}"
            if r["op"] == "gate":
                label = r["detail"].split(" at ")[0]
            if lost:
                label = f"{r['op']}: lease lost"
            if r["execution"] in labels:
                label += f" {labels[r['execution']]}"
            ax.annotate(label, (xs[i], lane), xytext=(0, 8), textcoords="offset points",
                        fontsize=7, rotation=40, color=colour, ha="left", va="bottom")

        for s in spans:
            lane = lease_y[s.task_id]
            x0 = xs[s.start]
            x1 = xs[s.end] if s.end is not None else end_x
            ax.barh(lane, max(x1 - x0, 0.05), left=x0, height=0.42, zorder=2, alpha=0.8,
                    color=lease_colour[s.execution], edgecolor="black", linewidth=0.6,
                    gid="lease")
            ax.text((x0 + x1) / 2, lane, f"{s.label} ({s.actor})", ha="center",
                    va="center", fontsize=8, fontweight="bold", zorder=3, gid="lease label")
            if s.ended_by == "commit":
                ax.scatter([x1], [lane], marker="*", s=320, zorder=4, c=gold,
                           edgecolors="black", linewidths=0.8)
                ax.annotate(f"winning commit: {s.label} ({s.actor}) → COMPLETED",
                            xy=(x1, lane), xytext=(-6, -16), textcoords="offset points",
                            ha="right", va="top", fontsize=8, fontweight="bold",
                            bbox={"boxstyle": "round,pad=0.25", "fc": "#fff4c2",
                                  "ec": gold}, zorder=5, gid="winner")
            elif s.ended_by == "error report":
                ax.annotate("released (error reported)", xy=(x1, lane), xytext=(4, -14),
                            textcoords="offset points", fontsize=7, color="#555555")

        handles = [
            Line2D([], [], ls="", marker="o", mfc="white", mec=colours["invoke"], mew=1.5,
                   label="invoke: an operation starts"),
            Line2D([], [], ls="", marker="o", color=colours["ok"], label="ok: it took effect"),
            Line2D([], [], ls="", marker="X", color=colours["fail"],
                   label="fail: it certainly did not"),
            Line2D([], [], ls="", marker="D", color=colours["info"],
                   label="info: happened / outcome unknown"),
            Line2D([], [], ls="", marker="^", ms=9, color=colours["ok"],
                   label="claim: takes the lease, new En (P2)"),
            Line2D([], [], ls="", marker="X", ms=11, color=colours["fail"], mec="black",
                   label="lease lost: fenced write refused (P3)"),
            Line2D([], [], ls="", marker="*", ms=16, color=gold, mec="black",
                   label="commit: completion written (P5/P10)"),
            Line2D([], [], lw=6, alpha=0.3, color=colours["ok"], label="invoke … ok"),
            Line2D([], [], lw=6, alpha=0.3, color=colours["fail"], label="invoke … fail"),
            Patch(fc="#bbbbbb", alpha=0.5, hatch="//", label="gate: an executor held (paused)"),
        ]
        if spans:
            handles.append(Patch(fc=palette[0], ec="black", alpha=0.8,
                                 label="lease lane: execution_id in the ledger"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0.0, fontsize=8, title="legend", title_fontsize=9,
                  frameon=False)

        ax.set_yticks(list(y.values()), list(y.keys()))
        ax.set_ylim(-0.5 - (0.45 if spans else 0.0), max(len(names), 1) - 0.5 + 0.6)
        if x == "step":
            if 0 < len(rows) <= 60:
                ax.set_xticks(xs, [f"{r['time']:.2f}" for r in rows], rotation=90, fontsize=7)
            else:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("steps in order (tick: seconds since the lab started)")
            ax.set_xlim(-0.7, max(len(rows), 1) + 1.5)
        else:
            end = max(xs or [1.0])
            ax.set_xlim(-0.02 * end, end * 1.08 + 0.05)
            ax.set_xlabel("seconds since the lab started")
        if spans:  # a thin rule between the actors and the ledger's side
            ax.axhline(max(lease_y.values()) + 0.5, color="#999999", lw=0.8, ls="--")
        ax.grid(axis="x", alpha=0.25)
        ax.set_title(title or f"history: {len(rows)} steps")
        fig.tight_layout()
        if path is not None:
            fig.savefig(Path(path), format="png")
        return fig
