"""The notebooks' shape that the lab's readers rely on: every heading opens its own
markdown cell, so JupyterLab collapses sections and a slide view can start one per
heading (`scripts/split_headings.py` fixes what this finds)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("split_headings",
                                               ROOT / "scripts" / "split_headings.py")
split_headings = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(split_headings)  # type: ignore[union-attr]

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_heading_opens_its_own_cell(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    inside = [("".join(c["source"]).split("\n")[i])
              for c in nb["cells"] if c["cell_type"] == "markdown"
              for i in split_headings.split_points("".join(c["source"]))]
    assert not inside, f"headings inside a cell (run scripts/split_headings.py): {inside}"


def test_the_check_finds_a_heading_inside_a_cell_but_not_in_a_code_fence() -> None:
    text = "What it proved.\n\n## 7. 下一节\n```python\n# a comment\n```\n"
    assert split_headings.split_points(text) == [2]
    nb = {"cells": [{"cell_type": "markdown", "id": "a", "metadata": {"tags": ["x"]},
                     "source": text}]}
    assert split_headings.split_cells(nb) == 1
    assert [c["source"][0] for c in nb["cells"]] == ["What it proved.", "## 7. 下一节\n"]
    assert nb["cells"][1]["id"] != "a" and nb["cells"][1]["metadata"] == {}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_second_cell_says_what_you_learn_what_comes_before_and_how_long(path: Path):
    """A learner or an instructor sees at once what a notebook is for."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    intro = "".join(cells[1]["source"])
    assert cells[1]["cell_type"] == "markdown"
    for part in ("**What you will learn**", "**Before this**", "minutes"):
        assert part in intro, f"{path.name}: the second cell lacks {part!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_presenter_notes_are_tagged_and_say_so(path: Path):
    """A presenter note is left out of learner copies by its tag; its first words say
    whom it is for, so a note without the tag shows as one in the repository."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        tagged = "presenter" in cell["metadata"].get("tags", [])
        says = "".join(cell["source"]).startswith("**Presenter:**")
        assert tagged == says, f"{path.name}: {''.join(cell['source'])[:60]!r}"
