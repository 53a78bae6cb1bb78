"""The suite's split across workers (`tests/parallel.py`) names modules and tests by their
node ids: a renamed test or exercise key would silently drop out of its group (the chaos
pair built twice) or out of the long list (started last). Every name must still point at
something pytest collects."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.parallel import GROUPS, LONG, WHOLE_MODULES

ROOT = Path(__file__).resolve().parents[2]


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")}


def test_every_name_in_the_plan_points_at_a_collected_module_test_or_exercise():
    from labs.exercises import load_all

    exact = {*GROUPS, *WHOLE_MODULES}  # matched whole by `scope_of`; LONG holds prefixes
    names = [*exact, *(n for n in LONG if "/" in n)]
    exercises = load_all()
    for name in names:
        path, _, test = name.partition("::")
        assert (ROOT / path).is_file(), name
        if not test:
            continue
        function, _, param = test.partition("[")
        found = _tests_in(ROOT / path)
        if name in exact:
            assert function in found, name
        else:
            assert any(f.startswith(function) for f in found), name
        if param:
            assert param.rstrip("]") in exercises, name


def test_every_group_in_the_long_list_is_a_group():
    groups = set(GROUPS.values())
    assert {n for n in LONG if "/" not in n} <= groups
