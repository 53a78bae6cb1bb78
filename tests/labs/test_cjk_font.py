"""Chinese in figures (labs.fonts): a figure with Chinese text renders every glyph, with the
machine's CJK font or, on a machine without one, with the font that installs with the lab.
matplotlib warns "Glyph … missing from font(s)" for a box it draws; these tests turn that
warning into a failure."""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

import matplotlib
import pytest
from fontTools.ttLib import TTFont
from matplotlib.figure import Figure

from labs import fonts

ROOT = Path(__file__).resolve().parents[2]
TEXT = "账本与队列：租约被接手，认领 E2，提交资格（P3）"
HAN = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]")


def _render(text: str) -> None:
    fig = Figure(figsize=(4, 2), dpi=50)
    ax = fig.subplots()
    ax.set_title(text)
    ax.plot([0, 1], [0, 1], label=text)
    ax.legend()
    fig.savefig(io.BytesIO(), format="png")  # a Figure's own canvas draws nothing


@pytest.fixture
def rc():
    with matplotlib.rc_context():
        yield matplotlib.rcParams


def test_without_a_cjk_font_the_default_draws_boxes(rc):
    """The check bites: DejaVu Sans alone misses the glyphs (the warning fails)."""
    rc["font.family"] = ["DejaVu Sans"]
    with warnings.catch_warnings(), pytest.raises(UserWarning, match="missing from font"):
        warnings.simplefilter("error")
        _render(TEXT)


def test_use_cjk_renders_chinese_without_a_missing_glyph(rc):
    order = fonts.use_cjk()
    assert order[0] == "DejaVu Sans" and order.index(fonts.BUNDLED_FAMILY) > 0
    assert fonts.use_cjk() == order  # idempotent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _render(TEXT)


def test_the_bundled_font_alone_draws_what_a_machine_without_cjk_fonts_needs(rc):
    """The fallback a bare machine gets: DejaVu Sans, then the lab's own font only."""
    fonts.cjk_families()  # registers the bundled font
    rc["font.family"] = ["DejaVu Sans", fonts.BUNDLED_FAMILY]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _render(TEXT)


def test_the_bundled_font_has_every_chinese_character_the_lab_writes():
    """Re-run scripts/build_cjk_font.py when this fails: a new character in the harness's
    words (its catalogue, labs/i18n/zh.md) would be a box in a figure on a machine without
    CJK fonts."""
    with TTFont(fonts.BUNDLED, lazy=True) as font:
        cmap = font.getBestCmap()
    used = {c for path in [*(ROOT / "labs").rglob("*.py"), *(ROOT / "labs").rglob("*.md")]
            for c in HAN.findall(path.read_text(encoding="utf-8"))}
    missing = sorted(c for c in used if ord(c) not in cmap)
    assert not missing, f"not in the bundled font: {''.join(missing)}"


def test_a_swimlane_with_chinese_text_renders_every_glyph(rc):
    """The lab's own figure: a history whose actor and notes are Chinese, drawn with no
    missing glyph even when the defaults had none (the swimlane calls `use_cjk`)."""
    from labs.history import History

    rc["font.family"] = ["DejaVu Sans"]
    history = History(start=0.0)
    history.add(actor="执行者 A", type="invoke", op="认领", task_id="T1", run=0, t=1.0)
    history.add(actor="执行者 A", type="ok", op="认领", task_id="T1", run=0,
                execution="e1" * 8, detail="租约 E1", t=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        history.plot(title="账本与队列").savefig(io.BytesIO(), format="png")


def test_the_swimlane_legend_speaks_the_editions_language(rc, monkeypatch):
    """中文 edition: the legend and axis are Chinese, drawn without a missing glyph."""
    from labs.history import History

    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    history = History(start=0.0)
    history.add(actor="A", type="invoke", op="claim", task_id="T1", run=0, t=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = history.plot()
        fig.savefig(io.BytesIO(), format="png")
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "认领：取得租约，新的 En（P2）" in texts
    assert ax.get_legend().get_title().get_text() == "图例"
    assert ax.get_title() == "历史：1 步"


def _bold_chinese_warnings(caplog) -> list[str]:
    fig = Figure(figsize=(3, 1), dpi=40)
    fig.subplots().set_title("胜出的提交", fontweight="bold")
    caplog.clear()
    with caplog.at_level("WARNING", logger="matplotlib.font_manager"):
        fig.savefig(io.BytesIO(), format="png")
    return [r.getMessage() for r in caplog.records
            if "Failed to find font weight" in r.getMessage()]


def test_bold_chinese_says_nothing_about_the_missing_weight(rc, caplog):
    """The bundled font has one weight; a bold label must not log a warning a learner
    would take for an error."""
    fonts.use_cjk()
    assert _bold_chinese_warnings(caplog) == []


@pytest.fixture
def one_weight_system_font(tmp_path):
    """A machine whose CJK font has one weight, like Debian's fonts-wqy-microhei: the
    bundled font renamed "WenQuanYi Micro Hei" in a temporary font folder, registered
    with matplotlib for this test only (nothing installed)."""
    from matplotlib import font_manager

    path = tmp_path / "fonts" / "wqy-microhei.ttf"
    path.parent.mkdir()
    with TTFont(fonts.BUNDLED) as font:
        for record in font["name"].names:
            if record.nameID in (1, 4, 16):
                record.string = "WenQuanYi Micro Hei"
            elif record.nameID == 6:
                record.string = "WenQuanYiMicroHei"
        font.save(path)
    manager = font_manager.fontManager
    before = list(manager.ttflist)
    manager.addfont(str(path))
    fonts.cjk_families.cache_clear()
    try:
        yield "WenQuanYi Micro Hei"
    finally:
        manager.ttflist = before
        manager._findfont_cached.cache_clear()
        fonts.cjk_families.cache_clear()


def test_a_one_weight_system_font_draws_bold_chinese_without_a_warning(
        rc, caplog, one_weight_system_font):
    """With a one-weight system CJK font first in line, bold Chinese is drawn at its one
    weight and nothing is logged; the check bites: without the lab's filter matplotlib
    says "Failed to find font weight bold for WenQuanYi Micro Hei"."""
    import logging

    order = fonts.use_cjk()
    assert order[1] == one_weight_system_font, order
    assert _bold_chinese_warnings(caplog) == []
    logger = logging.getLogger("matplotlib.font_manager")
    filters = list(logger.filters)
    for f in filters:
        logger.removeFilter(f)
    try:
        from matplotlib import font_manager

        font_manager.fontManager._findfont_cached.cache_clear()
        said = _bold_chinese_warnings(caplog)
    finally:
        for f in filters:
            logger.addFilter(f)
    assert any(one_weight_system_font in m for m in said), said
