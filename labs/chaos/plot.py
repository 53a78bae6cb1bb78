"""The picture of a run: swimlanes of its faults and the COMPLETED rows over time."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from labs.chaos.kinds import FAULT_KINDS
from labs.chaos.report import ChaosReport


def plot_swimlanes(report: ChaosReport, path: str | Path | None = None) -> Any:
    """Swimlanes of a chaos run: one lane per worker and one for Redis, a bar for each
    fault while it lasted (SIGKILL/SIGTERM: down until restarted; SIGSTOP: frozen; cut:
    link cut; Redis: stopped), in its kind's colour, and under them the COMPLETED rows
    over time. Headless (matplotlib's object API); returns the figure, saved to `path` if
    given."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    class ChaosFigure(Figure):
        def _repr_png_(self) -> bytes:
            buf = io.BytesIO()
            self.savefig(buf, format="png")
            return buf.getvalue()

    lanes = [f"w{i + 1}" for i in range(report.config.workers)] + ["redis"]
    y = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    fig = ChaosFigure(figsize=(11, 2.2 + 0.6 * len(lanes)), dpi=100)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for start, end, lane, kind in report.timeline:
        # Link cuts below the lane's middle, process faults above: both stay visible.
        shift = -0.17 if kind == "cut" else (0.17 if lane != "redis" else 0.0)
        top.barh(y[lane] + shift, max(end - start, 0.05), left=start,
                 height=0.32 if lane != "redis" else 0.6,
                 color=FAULT_KINDS[kind].colour if kind in FAULT_KINDS else "#333333")
    top.axvspan(0, report.config.duration, color="#ffeeee", zorder=-1)
    top.set_yticks([y[lane] for lane in lanes], lanes)
    top.set_title(f"chaos run, seed {report.config.seed}"
                  + (f", counterexample: {report.config.counterexample}"
                     if report.config.counterexample else "")
                  + f" — {len(report.violations)} violation(s)")
    top.legend(handles=[Patch(color=kind.colour, label=name)
                        for name, kind in FAULT_KINDS.items() if name in report.kinds],
               loc="upper right", fontsize="small", ncol=len(report.kinds) or 1)
    if report.completions:
        xs, ys = zip(*report.completions, strict=True)
        bottom.step(xs, ys, where="post", color="#2ca02c")
    bottom.set_ylabel("COMPLETED")
    bottom.set_xlabel("seconds after the fault window opened (shaded)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig
