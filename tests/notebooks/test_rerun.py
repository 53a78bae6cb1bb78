"""Notebooks are a stage, not scripts: an instructor clicks a cell twice, goes back a
step, starts over.

Every cell twice and Run All again happen where nbval executes each notebook
(`notebooks/conftest.py`: each English cell, compared with its stored output, is run
again at once as its 中文 twin in the same kernel, and after the last cell the 中文 edition
runs top to bottom once more). Here: a presenter's own order through the takeover race,
with a reset, in one kernel. No cell may raise, except cells tagged `raises-exception`
(as nbval allows).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebooks.runner import run_notebook

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.integration
async def test_26b_presenter_order_with_a_reset() -> None:
    """A presenter's order in one kernel: set up, step 1 (code cell 4), its check twice,
    step 1 again, on to B's takeover, back to step 1, start the race over (the cell tagged
    `start-over`) and play it through with more re-runs. (Run All after cells run out of
    order is nbval's last pass of every notebook, `notebooks/conftest.py`.)"""
    path = NOTEBOOK_DIR / "26b-takeover-race.ipynb"
    # Code cell 3 lists the steps (`lab.stage.script()`); step 1 is code cell 4.
    order: list[int | str] = [0, 1, 4, 5, 5, 4, 6, 7, 8, 9, 8, 4, "reset", 4, 5, 6, 7, 8, 9,
                              10, 11, 12, 11, 14, 15, 14, 16]
    run = await run_notebook(path, order)
    assert run.executed
