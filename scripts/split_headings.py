"""Give every markdown heading a cell of its own (`python scripts/split_headings.py [--check]`).

A heading that starts inside a cell ("… what it proved.\n\n## 7. …") breaks JupyterLab's
section collapsing and any slide view: both work per cell. This splits such cells at each
heading (outside code fences), giving the new cells fresh ids; `--check` only lists them
and exits 1 if any (`tests/unit/test_notebook_structure.py` runs the same check).
"""

from __future__ import annotations

import itertools
import json
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout

from devkit.copies import write_notebook  # noqa: E402 - after the path line above


def split_points(text: str) -> list[int]:
    """Line numbers (after the first) where a heading starts, outside ``` fences."""
    points, fenced = [], False
    for i, line in enumerate(text.split("\n")):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif i > 0 and not fenced and line.startswith("#"):
            points.append(i)
    return points


def _source(lines: list[str]) -> list[str]:
    text = "\n".join(lines).strip("\n")
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + [parts[-1]]


def split_cells(nb: dict) -> int:
    """Split `nb`'s markdown cells in place; returns how many cells were added."""
    out, added = [], 0
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        points = split_points(text) if cell["cell_type"] == "markdown" else []
        if not points:
            out.append(cell)
            continue
        lines = text.split("\n")
        bounds = [0, *points, len(lines)]
        for k, (a, b) in enumerate(itertools.pairwise(bounds)):
            if not "\n".join(lines[a:b]).strip():
                continue
            piece = dict(cell, source=_source(lines[a:b]))
            if k:
                piece["id"] = uuid.uuid4().hex[:8]
                piece["metadata"] = {}
                added += 1
            out.append(piece)
    nb["cells"] = out
    return added


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = 0
    for path in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        n = sum(len(split_points("".join(c["source"]))) for c in nb["cells"]
                if c["cell_type"] == "markdown")
        if not n:
            continue
        bad += n
        if check:
            print(f"{path.name}: {n} heading(s) inside a cell")
        else:
            split_cells(nb)
            write_notebook(path, nb)
            print(f"{path.name}: {n} heading(s) given a cell of their own")
    return 1 if check and bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
