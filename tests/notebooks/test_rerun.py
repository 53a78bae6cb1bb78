"""Notebooks are a stage, not scripts: an instructor clicks a cell twice, goes
back a step, starts over.

Each chapter notebook runs in one kernel with every code cell executed twice in a row,
then Run All again in the same kernel. No cell may raise, except cells tagged
`raises-exception` (as nbval allows). Serial on purpose: one notebook at a time, since
cells stop servers and time races with gates (notebook 23 stops its own Redis).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebooks.runner import run_notebook

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"


def _edition(path: Path) -> Path:
    """The 中文 edition of `path` when it exists: nbval checks the English edition's
    stored outputs, so the other edition is the one executed here — the same code
    (devkit.editions), run in its own folder, so the lab speaks Chinese (devkit.i18n)."""
    zh = path.parent / "zh" / path.name
    return zh if zh.exists() else path


NOTEBOOKS = [_edition(p) for p in sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))]


@pytest.mark.integration
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[
    f"{p.parent.name}/{p.stem}" if p.parent.name == "zh" else p.stem for p in NOTEBOOKS])
async def test_every_cell_twice_then_run_all(path: Path) -> None:
    run = await run_notebook(path)
    assert run.executed


@pytest.mark.integration
async def test_26b_presenter_order_with_a_reset() -> None:
    """A presenter's order in one kernel: set up, step 1 (code cell 4), its check twice,
    step 1 again, on to B's takeover, back to step 1, start the race over (the cell tagged
    `start-over`), play it through with more re-runs, then Run All."""
    path = NOTEBOOK_DIR / "26b-takeover-race.ipynb"
    # Code cell 3 lists the steps (`lab.stage.script()`); step 1 is code cell 4.
    order: list[int | str] = [0, 1, 4, 5, 5, 4, 6, 7, 8, 9, 8, 4, "reset", 4, 5, 6, 7, 8, 9,
                              10, 11, 10, 12, 13, 14, 15, 14, "all"]
    run = await run_notebook(path, order)
    assert run.executed
