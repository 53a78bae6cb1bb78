"""Go back to any step of a race, or enter a scene directly: the earlier steps replayed.

A race notebook (26b, 26c, 26d) is a sequence of `# step:` cells (`labs.stage`). Two
things a presenter wants that the cells alone cannot give:

- **go to a step**: `await lab.stage.go_to("B takes over with E2")` starts the race over
  (the notebook's `start-over` cell) and replays every step before that one, so the world
  is exactly as it was right before it; then run that step's cell.
- **enter a scene directly**: running a step's cell while earlier steps of the race have
  not run (a fresh kernel, the setup cells run, then a jump to §4.4) first replays the
  missing ones, in order, then runs the step.

The script is the notebook itself: the lab's name is its file name (`Lab.open("26b-…")`),
found beside the kernel (the copy being run) or in `notebooks/`. Replayed are the
start-over cell, the step cells before the target, and the plain cells that bind a name a
later cell reads (a helper function, a value a later check compares with): found from the
code, not listed by hand. Predictions, checks, reveals, exercises and solutions are never replayed.
Their prints are swallowed; one line per replayed step says what ran. A replayed cell that
raises stops the replay with its step named.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.i18n import say

#: The first line of an acting cell (`labs.stage`): `# step: <name>`. Here, in the leaf
#: module, because both the stage and the script read it.
MARKER = re.compile(r"^#\s*step:\s*(?P<name>.*?)\s*$")

#: Cells never replayed: they ask, judge or show, and a later step never needs them.
NOT_REPLAYED = frozenset({"predict", "exercise", "check", "solution", "raises-exception",
                          "presenter"})
START_OVER = "start-over"
PROJECT = Path(__file__).resolve().parents[1]


class RewindError(RuntimeError):
    """The script cannot be found, the step is not in it, or a replayed cell raised."""


@dataclass(frozen=True)
class ScriptCell:
    """One replayable cell: `kind` is "start-over", "step" (with its `name`) or "support"
    (a plain cell binding names a later step reads)."""

    kind: str
    source: str
    name: str | None = None


def _binds(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names - {"_"}  # the throwaway name binds nothing anyone reads


def _reads(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # IPython-only syntax (a magic): not ours to replay
        return None


def script_from_cells(cells: list[dict[str, Any]]) -> list[ScriptCell]:
    """The replayable cells of a notebook's `cells` (its JSON), in order, from its
    `start-over` cell on (what comes before is set-up, run once by the presenter)."""
    code = [("".join(c["source"]), c.get("metadata", {}).get("tags", []))
            for c in cells if c["cell_type"] == "code"]
    start = next((i for i, (_, tags) in enumerate(code) if START_OVER in tags), None)
    if start is None:
        return []
    script: list[ScriptCell] = [ScriptCell(START_OVER, code[start][0])]
    candidates: list[tuple[ScriptCell, set[str], set[str]]] = []
    #: Names only a prediction or an exercise binds (a learner's guess): a plain cell that
    #: reads one is a reveal, never replayable.
    guesses: set[str] = set()
    for source, tags in code[start + 1:]:
        tree = _parse(source)
        if tree is not None and NOT_REPLAYED & set(tags):
            guesses |= _binds(tree)
        if tree is None or NOT_REPLAYED & set(tags):
            continue
        if not MARKER.match(source.split("\n", 1)[0]) and _reads(tree) & guesses:
            continue
        first = source.split("\n", 1)[0]
        found = MARKER.match(first)
        cell = (ScriptCell("step", source, found["name"]) if found
                else ScriptCell("support", source))
        candidates.append((cell, _binds(tree), _reads(tree)))
    # A plain cell is kept when any later cell reads a name it binds — a step, a helper,
    # or a check of a later scene (a presenter who jumps there runs that check too).
    needed: set[str] = set()
    kept: list[ScriptCell] = []
    for cell, binds, reads in reversed(candidates):
        if cell.kind == "step" or binds & needed:
            kept.append(cell)
        needed |= reads
    script.extend(reversed(kept))
    return script


def find_notebook(lab_name: str) -> Path | None:
    """The notebook a lab named `lab_name` belongs to: beside the kernel (the copy being
    run), else the learner's copy, else the repository's."""
    for folder in (Path.cwd(), PROJECT / "my-notebooks", PROJECT / "notebooks"):
        path = folder / f"{lab_name}.ipynb"
        if path.is_file():
            return path
    return None


_CACHE: dict[tuple[Path, float], list[ScriptCell]] = {}


def load_script(lab_name: str) -> list[ScriptCell]:
    """The script of the notebook `find_notebook` finds (read again when it changed)."""
    path = find_notebook(lab_name)
    if path is None:
        raise RewindError(f"no notebook {lab_name}.ipynb found to replay its steps from")
    key = (path, path.stat().st_mtime)
    if key not in _CACHE:
        _CACHE[key] = script_from_cells(json.loads(path.read_text(encoding="utf-8"))["cells"])
    return _CACHE[key]


def step_names(script: list[ScriptCell]) -> list[str]:
    return [c.name for c in script if c.kind == "step" and c.name]


def before(script: list[ScriptCell], name: str,
           shown: Callable[[str], str] = str) -> list[ScriptCell]:
    """The cells to replay to stand right before step `name` (start-over excluded). An
    unknown name is refused with the notebook's steps, each as `shown` words it (the
    stage passes its titles, so the Chinese edition lists them in Chinese)."""
    names = step_names(script)
    if name not in names:
        raise RewindError(say("rewind.no-step", "no step {name!r} in this notebook; its "
                              "steps: {steps}", name=name, steps="; ".join(
                                  f"{i + 1}. {shown(n)}" for i, n in enumerate(names))))
    cut = next(i for i, c in enumerate(script) if c.kind == "step" and c.name == name)
    return script[1:cut]


async def run_source(source: str, ns: dict[str, Any]) -> None:
    """Run one cell's source in namespace `ns`, top-level `await` allowed, its prints
    swallowed (IPython syntax is transformed first when a shell is there)."""
    lines = source.split("\n")
    if lines and MARKER.match(lines[0]):
        lines = lines[1:]  # the step's bookkeeping is the caller's
    body = "\n".join(lines)
    with contextlib.suppress(ImportError):
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            body = shell.transform_cell(body)
    code = compile(body, "<replayed cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    with contextlib.redirect_stdout(io.StringIO()):
        result = eval(code, ns)  # the notebook's own cell, as a re-run of it would
        if inspect.iscoroutine(result):
            await result


def namespace() -> dict[str, Any]:
    """The kernel's user namespace (where the notebook's `lab` and helpers live)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RewindError("going to a step needs a notebook kernel")
    return shell.user_ns
