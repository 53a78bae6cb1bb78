"""The picture of a run: swimlanes of its faults and the COMPLETED rows over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labs import fonts
from labs.chaos.kinds import FAULT_KINDS
from labs.chaos.report import CLEARED, TAKEN_OVER, ChaosReport
from labs.i18n import say


def plot_swimlanes(report: ChaosReport, path: str | Path | None = None) -> Any:
    """Swimlanes of a chaos run: one lane per worker and one for Redis, a bar for each
    fault while it lasted (SIGKILL/SIGTERM: down until restarted; SIGSTOP: frozen; cut:
    link cut; Redis: stopped), in its kind's colour, and under them the COMPLETED rows
    over time; a marker at each strike (on a RUNNING task held in flight; a red × under
    it: that task's lease was then replaced, so its executor met LeaseLost). The shaded
    part is where the faults were due. Headless (matplotlib's object API); returns the
    figure, saved to `path` if given."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lanes = [f"w{i + 1}" for i in range(report.config.workers)] + ["redis"]
    y = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    # Draws the Chinese edition's title and legend, and shows itself as a PNG.
    fig = fonts.figure("ChaosFigure", figsize=(12, 2.4 + 0.7 * len(lanes)), dpi=100)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for start, end, lane, kind in report.timeline:
        # Link cuts below the lane's middle, process faults above: both stay visible.
        shift = -0.17 if kind == "cut" else (0.17 if lane != "redis" else 0.0)
        top.barh(y[lane] + shift, max(end - start, 0.05), left=start,
                 height=0.32 if lane != "redis" else 0.6,
                 color=FAULT_KINDS[kind].colour if kind in FAULT_KINDS else "#333333")
    # The strikes: a marker where a fault struck a RUNNING task its worker held between
    # two batches (on that worker's lane, also for a Redis restart); "×" where the held
    # lease was then replaced (LeaseLost next).
    for st in report.strikes:
        lane = st.worker or st.lane
        top.plot([st.at], [y[lane] + 0.42], marker="v", markersize=9, color="black",
                 zorder=5)
        if st.lease_after in (TAKEN_OVER, CLEARED):
            top.plot([st.at], [y[lane] - 0.42], marker="x", markersize=8, color="#d62728",
                     zorder=5)
    top.axvspan(0, report.config.duration, color="#ffeeee", zorder=-1)
    top.set_yticks([y[lane] for lane in lanes], lanes)
    cx = report.config.counterexample
    top.set_title(say("chaos.plot.title", "chaos run, seed {seed}{counterexample} — {count} "
                      "violation(s)", seed=report.config.seed, count=len(report.violations),
                      counterexample=say("chaos.plot.counterexample", ", counterexample: {cx}",
                                         cx=cx) if cx else ""))
    marks = [Line2D([], [], marker="v", color="black", linestyle="none",
                    label=say("chaos.plot.struck", "struck a RUNNING task")),
             Line2D([], [], marker="x", color="#d62728", linestyle="none",
                    label=say("chaos.plot.lease-replaced", "its lease replaced"))]
    top.legend(handles=[Patch(color=kind.colour, label=name)
                        for name, kind in FAULT_KINDS.items() if name in report.kinds] + marks,
               loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    top.set_ylim(-0.7, len(lanes) - 0.3)
    if report.completions:
        xs, ys = zip(*report.completions, strict=True)
        bottom.step(xs, ys, where="post", color="#2ca02c")
    bottom.set_ylabel("COMPLETED")
    bottom.set_xlabel(say("chaos.plot.xlabel", "seconds after the fault window "
                          "opened (shaded)"))
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig
