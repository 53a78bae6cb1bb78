"""Every registered exercise (`labs.exercises`), judged the same way by the real system:
the notebook's own starter is refused, its hidden solution accepted, and each named wrong
answer refused — a judge that cannot tell them apart judges nothing — and, where
`exercise_reasons.REASONS` says so, for the reason the exercise is about. The starter and
the solution are read from the cells that carry the exercise's key as a tag, so the test
follows the notebook."""

from __future__ import annotations

import ast
import contextlib
import linecache
from pathlib import Path
from typing import Any

import pytest

from devkit import notebook_cells as nb
from labs.exercises import check, load_all
from tests.labs.exercise_reasons import REASONS

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
EXERCISES = load_all()


def _tagged(key: str, role: str) -> tuple[Path, dict[str, Any]]:
    """The English notebook and its cell tagged both `key` and `role`."""
    for notebook in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")):
        for cell in nb.cells(notebook):
            tags = nb.tags(cell)
            if key in tags and role in tags:
                return notebook, cell
    raise AssertionError(f"no notebook cell is tagged {key!r} and {role!r}")


def _setup_namespace(notebook: Path) -> dict[str, Any]:
    """What the notebook's first code cell binds without awaiting anything (its imports and
    constants): what a learner's cell may use."""
    first = next(c for c in nb.cells(notebook) if c["cell_type"] == "code")
    tree = ast.parse(nb.source(first))
    keep = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom | ast.Assign)
            and not any(isinstance(x, ast.Await) for x in ast.walk(n))]
    ns: dict[str, Any] = {}
    for node in keep:  # one by one: a line built on an awaited one (the lab) is left out
        with contextlib.suppress(NameError):
            exec(compile(ast.Module([node], []), notebook.name, "exec"), ns)
    return ns


def bound_in(key: str, role: str, name: str | tuple[str, ...]) -> Any:
    """`_bound_in` of one name, or the tuple of several (a diagnosis: cause and rule)."""
    if isinstance(name, tuple):
        return tuple(_bound_in(key, role, n) for n in name)
    return _bound_in(key, role, name)


def _bound_in(key: str, role: str, name: str) -> Any:
    """The value the cell tagged `key` and `role` binds to `name` (an assignment or a
    definition), run alone in the notebook's set-up namespace with the imports of the
    exercise's own cells; the cell's top-level `await`s are not run."""
    notebook, cell = _tagged(key, role)
    source = nb.source(cell)
    ns = _setup_namespace(notebook)
    for own in {id(c): c for c in (_tagged(key, "exercise")[1], cell)}.values():
        # The imports the exercise's own cells make (a solution uses the exercise cell's).
        imports = [n for n in ast.parse(nb.source(own)).body
                   if isinstance(n, ast.Import | ast.ImportFrom)]
        exec(compile(ast.Module(imports, []), notebook.name, "exec"), ns)
    for node in ast.parse(source).body:
        defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        assigns = (isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                   and not any(isinstance(x, ast.Await) for x in ast.walk(node)))
        if defines or assigns:
            where = f"<{notebook.name} {role} cell>"  # so a failing line can be quoted
            linecache.cache[where] = (len(source), None, source.splitlines(True), where)
            exec(compile(ast.Module([node], []), where, "exec"), ns)
            return ns[name]
    raise AssertionError(f"{notebook.name}: the {role} cell of {key!r} binds no {name}")


async def _no_more(verdict: Any, context: dict[str, Any]) -> None:
    """No reason to check beyond refused or accepted."""


@pytest.mark.parametrize("key", sorted(EXERCISES))
async def test_the_judge_refuses_the_starter_and_wrong_answers_and_accepts_the_solution(
        key, service_settings):
    exercise = EXERCISES[key]
    starter = bound_in(key, "exercise", exercise.answer)
    solution = bound_in(key, "solution", exercise.solution)
    async with exercise.context(service_settings) as context:
        reasons = REASONS.get(key, {})
        for name, answer in {"the starter": starter, **exercise.wrong}.items():
            verdict = await check(key, answer, **context)
            assert not verdict.ok, f"{name}: {verdict}"
            # A written answer is refused for what it did: not as unwritten, and not
            # because a run of the judge stopped.
            assert verdict.attempted or name == "the starter", f"{name}: {verdict}"
            assert not any(n.startswith("the run stopped") for n in verdict.notes), verdict
            await reasons.get(name, _no_more)(verdict, context)
        accepted = await check(key, solution, **context)
        assert accepted.ok, str(accepted)
        await reasons.get("the solution", _no_more)(accepted, context)


def test_every_exercise_cell_is_registered_and_every_registered_one_has_its_cells():
    """A tag naming no registered exercise, or an exercise without its three cells, would
    leave an exercise that nothing checks."""
    tagged = set()
    for notebook in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")):
        for cell in nb.cells(notebook):
            tags = nb.tags(cell)
            if {"exercise", "check", "solution"} & set(tags):
                tagged |= {t for t in tags if "." in t}
    assert tagged <= set(EXERCISES), tagged - set(EXERCISES)
    for key in EXERCISES:
        for role in ("exercise", "check", "solution"):
            _tagged(key, role)


async def test_an_answer_not_written_is_not_attempted_whatever_the_exercise():
    for key, exercise in EXERCISES.items():
        verdict = await check(key, None)
        assert not verdict.ok and not verdict.attempted, key
        names = exercise.answer if isinstance(exercise.answer, tuple) else (exercise.answer,)
        assert all(n in str(verdict) for n in names), key
