"""A presenter jumps around a race notebook (`labs.rewind`): a scene entered directly in a
fresh kernel replays the earlier steps first, and `lab.stage.go_to(step)` from a later
step puts the world back right before that step. Both in a real kernel on the real
notebook: no cell raises, and the scene's own check cells (`# contract:` asserts) pass on
the state the replay built."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from labs.stage import MARKER
from tests.notebooks.runner import run_notebook

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"

#: notebook → (the scene entered directly, the earlier step gone back to from there)
CASES = {
    "26b-takeover-race": ("A returns late", "the tickets change under A"),
    "26c-reminder-commit-gate": ("A returns late", "A enters the reminder transaction"),
    "26d-manual-retry-and-recovery": ("the shortcut's add", "Ben retries: run 1"),
}


def _code_cells(path: Path) -> list[tuple[str, list[str]]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [("".join(c["source"]), c["metadata"].get("tags", []))
            for c in cells if c["cell_type"] == "code"]


def _scene(code: list[tuple[str, list[str]]], step: str) -> list[int]:
    """The code cells of `step`'s scene: its step cell and what follows up to the next
    step cell (reveals and checks), after the predictions whose guesses those cells read
    (a prediction may sit before an earlier step of the same section)."""
    first = next(i for i, (src, _) in enumerate(code)
                 if (m := MARKER.match(src.split("\n", 1)[0])) and m["name"] == step)
    end = next((i for i in range(first + 1, len(code))
                if MARKER.match(code[i][0].split("\n", 1)[0])), len(code))
    read = {n.id for i in range(first, end) for n in ast.walk(ast.parse(code[i][0]))
            if isinstance(n, ast.Name)}
    guesses = [i for i, (src, tags) in enumerate(code[:first]) if "predict" in tags
               and {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)} & read]
    return [*guesses, *range(first, end)]


@pytest.mark.integration
@pytest.mark.parametrize("name", list(CASES))
async def test_enter_a_scene_directly_then_go_back(name: str) -> None:
    path = NOTEBOOK_DIR / f"{name}.ipynb"
    code = _code_cells(path)
    start = next(i for i, (_, tags) in enumerate(code) if "start-over" in tags)
    entered, back_to = CASES[name]
    order: list[int | str] = [*range(start + 1), *_scene(code, entered),
                              f"assert lab.stage.is_done({entered!r})",
                              f"await lab.stage.go_to({back_to!r})",
                              f"assert not lab.stage.is_done({back_to!r})",
                              *_scene(code, back_to),
                              f"assert lab.stage.is_done({back_to!r}) and not "
                              f"lab.stage.is_done({entered!r})"]
    run = await run_notebook(path, order)
    assert len(run.executed) == len(order)
