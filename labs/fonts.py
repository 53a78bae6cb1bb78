"""Chinese in figures: matplotlib's default font (DejaVu Sans) has no CJK glyphs, so a
Chinese legend or label would render as empty boxes on most machines.

`use_cjk()` puts CJK fonts behind DejaVu Sans in matplotlib's `font.family` list
(matplotlib falls back glyph by glyph along the families named there; a generic name such
as "sans-serif" stands for one font only, so the families are named):

1. the first common CJK font installed on this machine (Linux's Noto/WenQuanYi, macOS's
   PingFang/Hiragino, Windows' YaHei/SimHei), if any;
2. always the lab's own, `labs/fonts/TeamDeskLabSansSC-Regular.ttf`: a subset of Noto
   Sans SC (SIL OFL 1.1, `labs/fonts/OFL.txt`) that installs with the project, so a
   machine without any CJK font still draws every character the lab writes
   (`scripts/build_cjk_font.py`).

Latin text keeps DejaVu Sans, so English figures do not change.
"""

from __future__ import annotations

import io
import logging
from functools import cache
from pathlib import Path
from typing import Any

BUNDLED = Path(__file__).resolve().parent / "fonts" / "TeamDeskLabSansSC-Regular.ttf"
BUNDLED_FAMILY = "TeamDesk Lab Sans SC"
#: Common CJK families, Linux first, then macOS, then Windows.
SYSTEM_FAMILIES = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
    "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback",
    "PingFang SC", "Hiragino Sans GB", "Heiti SC", "STHeiti",
    "Microsoft YaHei", "SimHei", "DengXian", "Arial Unicode MS",
)


@cache
def cjk_families() -> tuple[str, ...]:
    """The CJK fallbacks in order: the first installed system family (if any), then the
    bundled font (registered with matplotlib here)."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    if BUNDLED_FAMILY not in installed:
        font_manager.fontManager.addfont(str(BUNDLED))
    system = next((name for name in SYSTEM_FAMILIES if name in installed), None)
    return (system, BUNDLED_FAMILY) if system else (BUNDLED_FAMILY,)


class _RegularOnly(logging.Filter):
    """The bundled font has one weight, and so have common system CJK fonts (WenQuanYi
    Micro Hei, Droid Sans Fallback): matplotlib draws bold Chinese in them at their one
    weight and says so ("findfont: Failed to find font weight bold for …") on every bold
    label, a line a learner would read as an error. That line is dropped for the CJK
    fallbacks in force (`cjk_families()`); any other stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str)
                and record.msg.startswith("findfont: Failed to find font weight")):
            return True
        # matplotlib's arguments: (weight asked for, family found, weight used).
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 3 and args[1] in cjk_families())


_FILTER = _RegularOnly()


def use_cjk() -> list[str]:
    """Make matplotlib draw Chinese with the fallbacks of `cjk_families()`, behind the
    first sans-serif font (DejaVu Sans by default); idempotent. Returns the families now
    in force."""
    import matplotlib

    logger = logging.getLogger("matplotlib.font_manager")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    rc = matplotlib.rcParams
    latin = next((f for f in rc["font.sans-serif"] if f not in cjk_families()), "DejaVu Sans")
    rc["font.family"] = [latin, *cjk_families()]
    return list(rc["font.family"])


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def figure(kind: str, **kwargs: Any) -> Any:
    """A matplotlib `Figure(**kwargs)` that draws Chinese (`use_cjk`) and shows itself as
    a PNG when it is a cell's last value (no pyplot: no global figure state). `kind` names
    its class, which is its text in a notebook's stored output ("<SwimlaneFigure …>")."""
    from matplotlib.figure import Figure

    use_cjk()
    return type(kind, (Figure,), {"_repr_png_": _png})(**kwargs)
