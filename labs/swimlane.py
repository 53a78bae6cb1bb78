"""The swimlane picture of a `labs.history.History`: one lane per actor, one column per step.

Each row is a marker in its actor's lane, labelled with its op and, when it ran under a
lease, the execution's name (E1, E2, … in order of first appearance, as
`History.execution_labels` gives them). Markers: hollow blue circle invoke, green dot ok,
red cross fail, grey diamond info (Jepsen's four types); a green triangle is a claim that
took the lease (P2), a big black-edged red cross a write refused because the lease was
lost (P3, P6), a gold star the completion commit (P5, P10). A band joins an `invoke` to
its `ok` (green) or `fail` (red) in the same process, and a grey hatched band shows how
long a gate held an executor.

Below the actors, the **lease** lane shows the ledger's side (`History.leases`): which
execution holds `{id, run, execution_id}` over time, one coloured bar per lease, ending at
a takeover, the commit or an error report; the commit that made the task COMPLETED is
marked "winning commit". One lease lane per task when the history has several. A legend
on the right says what every marker, band and bar means.

Uses matplotlib's object API only (no pyplot state), so it works headless. Artists carry
gids ("lease", "commit", "winner", …) so tests can find them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs import fonts
from labs.i18n import say

COLOURS = {"invoke": "#1f77b4", "ok": "#2ca02c", "fail": "#d62728", "info": "#7f7f7f"}
MARKERS = {"ok": "o", "fail": "X", "info": "D"}
GOLD = "#f2b400"
#: Lease colours stay clear of the four type colours above.
PALETTE = ["#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#bcbd22"]


@dataclass
class _Layout:
    """Where everything goes: lane heights, x positions, the figure's size."""

    rows: list[dict[str, Any]]
    names: list[str]
    y: dict[str, int]
    lease_y: dict[str, int]
    xs: list[float]
    end_x: float
    labels: dict[str, str]
    commits: set[int]
    spans: list[Any]


def _layout(history: Any, lanes: Iterable[str] | None, x: str, lease: bool) -> _Layout:
    rows = history.rows
    spans = history.leases() if lease else []
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
    return _Layout(rows, names, y, lease_y, xs, end_x, history.execution_labels(),
                   set(history.commits()), spans)


def _figure(lay: _Layout, x: str) -> Any:
    width = min(30.0, max(9.0, 0.42 * len(lay.rows))) if x == "step" else 11.0
    height = max(4.2, 1.9 + 0.9 * max(len(lay.names), 1))
    return fonts.figure("SwimlaneFigure", figsize=(width + 3.4, height), dpi=100)


def _draw_bands(ax: Any, lay: _Layout) -> None:
    """invoke … ok/fail bands, and the hatched band of a gate's hold."""
    open_ops: dict[tuple[str, str], int] = {}
    paused: dict[str, int] = {}
    xs = lay.xs
    for i, r in enumerate(lay.rows):
        lane = lay.y[r["actor"]]
        key = (r["process"], r["op"])
        if r["type"] == "invoke":
            open_ops[key] = i
        elif r["type"] in ("ok", "fail") and key in open_ops:
            j = open_ops.pop(key)
            ax.plot([xs[j], xs[i]], [lane, lane], linewidth=6, alpha=0.3,
                    color=COLOURS[r["type"]], solid_capstyle="butt", zorder=1)
        if r["op"] == "gate" and r["detail"].startswith("paused"):
            paused[r["process"]] = i
        elif r["op"] == "gate" and r["process"] in paused:
            j = paused.pop(r["process"])
            ax.fill_between([xs[j], xs[i]], lane - 0.12, lane + 0.12, color="#bbbbbb",
                            alpha=0.5, hatch="//", linewidth=0, zorder=0)


def _label(r: dict[str, Any], labels: dict[str, str], lost: bool) -> str:
    label = r["op"] if r["type"] in ("invoke", "info") else f"{r['op']} {r['type']}"
    if r["op"] == "gate":
        label = r["detail"].split(" at ")[0]
    if lost:
        label = f"{r['op']}: lease lost"
    if r["execution"] in labels:
        label += f" {labels[r['execution']]}"
    return label


def _draw_markers(ax: Any, lay: _Layout) -> None:
    """One marker per row, its label above it, a star on the commit."""
    for i, r in enumerate(lay.rows):
        at, lane, colour = lay.xs[i], lay.y[r["actor"]], COLOURS[r["type"]]
        lost = r["type"] == "fail" and r["detail"].startswith("lease lost")
        if r["type"] == "invoke":
            ax.scatter([at], [lane], marker="o", s=40, zorder=3, facecolors="white",
                       edgecolors=colour, linewidths=1.5)
        elif r["type"] == "ok" and r["op"] == "claim":
            ax.scatter([at], [lane], marker="^", s=80, zorder=3, c=colour, gid="claim")
        elif lost:
            ax.scatter([at], [lane], marker="X", s=130, zorder=3, c=colour,
                       edgecolors="black", linewidths=1.0, gid="lease lost")
        else:
            ax.scatter([at], [lane], marker=MARKERS[r["type"]], s=40, zorder=3, c=colour)
        if i in lay.commits:
            ax.scatter([at], [lane], marker="*", s=320, zorder=4, c=GOLD,
                       edgecolors="black", linewidths=0.8, gid="commit")
        ax.annotate(_label(r, lay.labels, lost), (at, lane), xytext=(0, 8),
                    textcoords="offset points", fontsize=7, rotation=40, color=colour,
                    ha="left", va="bottom")


def _draw_leases(ax: Any, lay: _Layout) -> None:
    """The ledger's side: one bar per lease, the winning commit marked."""
    lease_colour = {e: PALETTE[i % len(PALETTE)] for i, e in enumerate(lay.labels)}
    for s in lay.spans:
        lane = lay.lease_y[s.task_id]
        x0 = lay.xs[s.start]
        x1 = lay.xs[s.end] if s.end is not None else lay.end_x
        ax.barh(lane, max(x1 - x0, 0.05), left=x0, height=0.42, zorder=2, alpha=0.8,
                color=lease_colour[s.execution], edgecolor="black", linewidth=0.6,
                gid="lease")
        ax.text((x0 + x1) / 2, lane, f"{s.label} ({s.actor})", ha="center",
                va="center", fontsize=8, fontweight="bold", zorder=3, gid="lease label")
        if s.ended_by == "commit":
            ax.scatter([x1], [lane], marker="*", s=320, zorder=4, c=GOLD,
                       edgecolors="black", linewidths=0.8)
            ax.annotate(say("swimlane.winner", "winning commit: {label} "
                            "({actor}) → COMPLETED", label=s.label, actor=s.actor),
                        xy=(x1, lane), xytext=(-6, -16), textcoords="offset points",
                        ha="right", va="top", fontsize=8, fontweight="bold",
                        bbox={"boxstyle": "round,pad=0.25", "fc": "#fff4c2", "ec": GOLD},
                        zorder=5, gid="winner")
        elif s.ended_by == "error report":
            ax.annotate(say("swimlane.released", "released (error reported)"), xy=(x1, lane),
                        xytext=(4, -14),
                        textcoords="offset points", fontsize=7, color="#555555")
        elif s.ended_by == "wiped":
            ax.annotate(f"{s.label} wiped without a lease", xy=(x1, lane), xytext=(4, -14),
                        textcoords="offset points", fontsize=7, color=COLOURS["fail"],
                        gid="wiped")


def _word(key: str) -> str:
    """The legend's words, in the edition's language."""
    return {
        "invoke": say("swimlane.legend.invoke", "invoke: an operation starts"),
        "ok": say("swimlane.legend.ok", "ok: it took effect"),
        "fail": say("swimlane.legend.fail", "fail: it certainly did not"),
        "info": say("swimlane.legend.info", "info: happened / outcome unknown"),
        "claim": say("swimlane.legend.claim", "claim: takes the lease, new En (P2)"),
        "lost": say("swimlane.legend.lost", "lease lost: fenced write refused (P3)"),
        "commit": say("swimlane.legend.commit", "commit: completion written (P5/P10)"),
        "band ok": say("swimlane.legend.band-ok", "invoke … ok"),
        "band fail": say("swimlane.legend.band-fail", "invoke … fail"),
        "gate": say("swimlane.legend.gate", "gate: an executor held (paused)"),
        "lease": say("swimlane.legend.lease", "lease lane: execution_id in the ledger"),
        "title": say("swimlane.legend.title", "legend"),
    }[key]


def _legend(ax: Any, with_leases: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], ls="", marker="o", mfc="white", mec=COLOURS["invoke"], mew=1.5,
               label=_word("invoke")),
        Line2D([], [], ls="", marker="o", color=COLOURS["ok"], label=_word("ok")),
        Line2D([], [], ls="", marker="X", color=COLOURS["fail"], label=_word("fail")),
        Line2D([], [], ls="", marker="D", color=COLOURS["info"], label=_word("info")),
        Line2D([], [], ls="", marker="^", ms=9, color=COLOURS["ok"], label=_word("claim")),
        Line2D([], [], ls="", marker="X", ms=11, color=COLOURS["fail"], mec="black",
               label=_word("lost")),
        Line2D([], [], ls="", marker="*", ms=16, color=GOLD, mec="black",
               label=_word("commit")),
        Line2D([], [], lw=6, alpha=0.3, color=COLOURS["ok"], label=_word("band ok")),
        Line2D([], [], lw=6, alpha=0.3, color=COLOURS["fail"], label=_word("band fail")),
        Patch(fc="#bbbbbb", alpha=0.5, hatch="//", label=_word("gate")),
    ]
    if with_leases:
        handles.append(Patch(fc=PALETTE[0], ec="black", alpha=0.8, label=_word("lease")))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0, fontsize=8, title=_word("title"), title_fontsize=9,
              frameon=False)


def _axes(ax: Any, lay: _Layout, x: str, title: str | None) -> None:
    from matplotlib.ticker import MaxNLocator

    rows, xs = lay.rows, lay.xs
    ax.set_yticks(list(lay.y.values()), list(lay.y.keys()))
    ax.set_ylim(-0.5 - (0.45 if lay.spans else 0.0), max(len(lay.names), 1) - 0.5 + 0.6)
    if x == "step":
        if 0 < len(rows) <= 60:
            ax.set_xticks(xs, [f"{r['time']:.2f}" for r in rows], rotation=90, fontsize=7)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(say("swimlane.xlabel.steps", "steps in order (tick: seconds since the "
                          "lab started)"))
        ax.set_xlim(-0.7, max(len(rows), 1) + 1.5)
    else:
        end = max(xs or [1.0])
        ax.set_xlim(-0.02 * end, end * 1.08 + 0.05)
        ax.set_xlabel(say("swimlane.xlabel.seconds", "seconds since the lab started"))
    if lay.spans:  # a thin rule between the actors and the ledger's side
        ax.axhline(max(lay.lease_y.values()) + 0.5, color="#999999", lw=0.8, ls="--")
    ax.grid(axis="x", alpha=0.25)
    ax.set_title(title or say("swimlane.title", "history: {count} steps", count=len(rows)))


def plot(history: Any, path: str | Path | None = None, *, title: str | None = None,
         lanes: Iterable[str] | None = None, x: str = "step", lease: bool = True) -> Any:
    """The swimlane figure of `history` (see the module docstring for every mark).

    `x="step"` (default) spaces the steps evenly, so simultaneous steps stay readable,
    and prints each step's time under it; `x="time"` places them at their real time.
    `lanes` fixes the actor order (default: order of first appearance, top down);
    `lease=False` leaves the lease lanes out. With `path` the figure is also saved there
    as a PNG."""
    if x not in ("step", "time"):
        raise ValueError(f"x must be 'step' or 'time', not {x!r}")
    lay = _layout(history, lanes, x, lease)
    fig = _figure(lay, x)
    ax = fig.add_subplot()
    _draw_bands(ax, lay)
    _draw_markers(ax, lay)
    _draw_leases(ax, lay)
    _legend(ax, bool(lay.spans))
    _axes(ax, lay, x, title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(Path(path), format="png")
    return fig
