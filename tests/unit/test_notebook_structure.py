"""The notebooks' shape that the lab's readers rely on: every heading opens its own
markdown cell, so JupyterLab collapses sections and a slide view can start one per
heading (`scripts/split_headings.py` fixes what this finds)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

from devkit import minutes, notebook_cells

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("split_headings",
                                               ROOT / "scripts" / "split_headings.py")
split_headings = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(split_headings)  # type: ignore[union-attr]

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_heading_opens_its_own_cell(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    inside = [(notebook_cells.source(c).split("\n")[i])
              for c in nb["cells"] if c["cell_type"] == "markdown"
              for i in split_headings.split_points(notebook_cells.source(c))]
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
    cells = notebook_cells.cells(path)
    intro = notebook_cells.source(cells[1])
    assert cells[1]["cell_type"] == "markdown"
    for part in ("**What you will learn**", "**Before this**", "minutes"):
        assert part in intro, f"{path.name}: the second cell lacks {part!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_presenter_notes_are_tagged_and_say_so(path: Path):
    """A presenter note is left out of learner copies by its tag; its first words say
    whom it is for, so a note without the tag shows as one in the repository."""
    for cell in notebook_cells.cells(path):
        tagged = "presenter" in notebook_cells.tags(cell)
        says = notebook_cells.source(cell).startswith("**Presenter:**")
        assert tagged == says, f"{path.name}: {''.join(cell['source'])[:60]!r}"


#: The notebooks a class is shown as slides (`docs/teaching/README.md`, "Slides"): each
#: carries the kit's slide metadata on every cell the rule below names.
SLIDE_NOTEBOOKS = ("26b-takeover-race", "26c-reminder-commit-gate",
                   "26d-manual-retry-and-recovery")


def slide_type_wanted(cell: dict) -> str | None:
    """The kit's rule for one cell, or None where any slide type will do: a slide per
    `#`/`##` heading, a subslide per `###` heading and per `predict` cell (the question on
    a screen of its own), a fragment per "What it proved/showed", notes for presenter
    cells, skip for hidden solutions and the assert-only checkpoints (`# contract:`)."""
    text = notebook_cells.source(cell)
    tags = notebook_cells.tags(cell)
    if "presenter" in tags:
        return "notes"
    if cell["cell_type"] == "markdown":
        if text.startswith(("# ", "## ")):
            return "slide"
        if text.startswith("### "):
            return "subslide"
        if text.startswith(("What it proved", "What it showed")):
            return "fragment"
        return None
    if "predict" in tags:
        return "subslide"
    if "solution" in tags or text.startswith("# contract:"):
        return "skip"
    return None


def _top_level_names(source: str) -> set[str]:
    """Names a code cell binds at the notebook's top level: not a comprehension's, a
    lambda's or a function body's own (top-level `await` is allowed, as in IPython)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    tree = compile(code, "<cell>", "exec",
                   flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    names: set[str] = set()

    class Binds(ast.NodeVisitor):
        def visit_FunctionDef(self, node: ast.AST) -> None:
            names.add(node.name)  # type: ignore[attr-defined]

        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

        def visit_Lambda(self, node: ast.AST) -> None:
            pass

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Store):
                names.add(node.id)

        def visit_alias(self, node: ast.alias) -> None:
            names.add((node.asname or node.name).split(".")[0])

    Binds().visit(tree)
    return names


@pytest.mark.parametrize("name", SLIDE_NOTEBOOKS)
def test_slide_notebooks_carry_the_kits_slide_metadata(name: str) -> None:
    """Every cell the kit's rule names has its slide type, and a cell the slideshow skips
    (not shown, not run) binds no name that a shown cell uses, so the race runs the same."""
    cells = notebook_cells.cells(ROOT / "notebooks" / f"{name}.ipynb")
    wrong = [(i, notebook_cells.source(c)[:50], slide_type_wanted(c),
              c["metadata"].get("slideshow", {}).get("slide_type"))
             for i, c in enumerate(cells)
             if slide_type_wanted(c) not in (None, c["metadata"].get("slideshow", {}).get(
                 "slide_type"))]
    assert not wrong, f"{name}: (cell, start, wanted, found): {wrong}"
    shown = [c for c in cells if c["cell_type"] == "code"
             and c["metadata"].get("slideshow", {}).get("slide_type") != "skip"]
    bound_when_shown = set().union(*(_top_level_names(notebook_cells.source(c)) for c in shown))
    for i, c in enumerate(cells):
        if c["cell_type"] != "code" or c["metadata"].get("slideshow", {}).get(
                "slide_type") != "skip":
            continue
        only_here = _top_level_names(notebook_cells.source(c)) - bound_when_shown
        used = [n for n in only_here for later in cells[i + 1:] if later in shown
                and re.search(rf"\b{re.escape(n)}\b", notebook_cells.source(later))]
        assert not used, f"{name}: skipped cell {i} binds {used}, used by a shown cell"


def test_the_slide_rule_sees_a_missing_slide_type() -> None:
    heading = {"cell_type": "markdown", "metadata": {}, "source": "### 练习 D"}
    predict = {"cell_type": "code", "metadata": {"tags": ["predict"]}, "source": "guess = None"}
    assert slide_type_wanted(heading) == "subslide"
    assert slide_type_wanted(predict) == "subslide"
    assert _top_level_names("x = 1\nfor k in []: pass\n[j for j in []]\nawait f()") == {"x", "k"}


#: A pointer left on the main path where an optional scene used to be.
POINTER = "*Optional, at the end (选读):"


def unannounced(cells: list[dict]) -> list[str]:
    """The sections of a notebook's optional part (`## 选读` up to the recap or the closing
    section) that no pointer on the main path names, by their heading's key (the text
    before "：" or "(": "§2 源码节选 ↔ Python", "练习 D"). A part that opens where the core
    path ends ("The core path ends here") moved nothing, and needs no pointer."""
    texts = [notebook_cells.source(c) for c in cells]
    # Where the optional part runs: the minutes model's own reading (devkit.minutes.parts).
    optional = [i for i, (_, _, part) in enumerate(minutes.parts(cells)) if part == "optional"]
    if not optional or "The core path ends here" in texts[optional[0]]:
        return []
    pointers = " ".join(t for t in texts[:optional[0]] if t.startswith(POINTER))
    keys = [re.split(r"[：(]", texts[i].splitlines()[0].lstrip("# "))[0].strip()
            for i in optional[1:] if cells[i]["cell_type"] == "markdown"
            and texts[i].startswith("#")]
    return [key for key in keys if key not in pointers]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_optional_part_is_pointed_at_from_the_main_path(path: Path) -> None:
    """An optional scene moved to the end (选读) leaves a one-line pointer where it was, so
    the main path still shows that it exists and where to find it."""
    cells = notebook_cells.cells(path)
    assert not unannounced(cells), f"{path.name}: no pointer names {unannounced(cells)}"


def test_a_moved_scene_without_a_pointer_is_named() -> None:
    md = lambda s, *tags: {"cell_type": "markdown", "metadata": {"tags": list(tags)},  # noqa: E731
                           "source": s}
    cells = [md("## §1 一"), md(f"{POINTER} 公平 — a scene.*"), md("## 小结", "recap"),
             md("## 选读 (ours)\n*Optional part (ours)*"), md("### 公平：一大批 (ours)"),
             md("### 练习 D：一个案例 (ours)"), md("## 收尾")]
    assert unannounced(cells) == ["练习 D"]
    cells[3] = md("## 选读 (ours)\n\nThe core path ends here. What follows is optional.")
    assert unannounced(cells) == []
