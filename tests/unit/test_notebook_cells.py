"""The one reader of notebook cells (devkit.notebook_cells) that the editions, minutes,
rules, slides, learner copies and these tests share: a source stored either way is one
text, missing tags are none, and a fenced block ends only at its own fence."""

from __future__ import annotations

import json
from pathlib import Path

from devkit import notebook_cells


def test_a_cell_reads_the_same_whichever_way_its_source_is_stored(tmp_path: Path):
    nb = {"cells": [{"cell_type": "code", "source": ["a = 1\n", "b = 2"],
                     "metadata": {"tags": ["exercise"]}},
                    {"cell_type": "markdown", "source": "a = 1\nb = 2", "metadata": {}}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    listed, stored = notebook_cells.cells(path)
    assert notebook_cells.read(path) == nb
    assert notebook_cells.source(listed) == notebook_cells.source(stored) == "a = 1\nb = 2"
    assert notebook_cells.tags(listed) == ["exercise"] and notebook_cells.tags(stored) == []
    assert notebook_cells.source({"cell_type": "raw"}) == ""


def test_a_fence_ends_at_the_same_fence_on_a_line_of_its_own():
    text = ("prose\n```python\nx = 1\n```\nmore\n~~~\n```\nstill code\n~~~  \nend\n"
            "```\nnot closed ```\n")
    blocks = [m.group(0) for m in notebook_cells.FENCE.finditer(text)]
    assert blocks == ["```python\nx = 1\n```", "~~~\n```\nstill code\n~~~  "]
    assert notebook_cells.FENCE.sub("", text) == "prose\n\nmore\n\nend\n```\nnot closed ```\n"
