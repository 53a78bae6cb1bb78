"""`docs/measurements.md` is generated from the benchmarks' JSON, never edited by hand."""

from __future__ import annotations

import json

from benchmarks import report


def test_the_page_is_what_the_stored_figures_render():
    """The committed page equals a fresh rendering of `docs/measurements/*.json`: a figure
    edited by hand in the page, or a JSON added without regenerating, fails here."""
    assert report.PAGE.read_text() == report.render()


def test_a_pipeline_run_renders_its_medians_backlog_and_machine():
    data = json.loads((report.STORE / "pipeline.json").read_text())
    text = report.render_pipeline(data)
    m = next(iter(data["medians"].values()))
    assert f"{m['pipeline']:.0f} tasks/s" in text
    assert f"**{data['backlog']['ratio']:.2f}×**" in text
    assert data["servers"] in text
