"""The harness's scenes and helpers take the learner's lab typed (`Lab`, under
`TYPE_CHECKING`), so an editor follows the learner's path from a cell into the harness;
`Any` stays for true boundaries, never for the lab."""

from __future__ import annotations

import ast
from pathlib import Path

LABS = Path(__file__).resolve().parents[2] / "labs"


def test_no_lab_parameter_of_the_harness_is_typed_any():
    untyped = []
    for path in sorted(LABS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                untyped += [f"{path.relative_to(LABS.parent)}:{node.lineno} {node.name}"
                            for a in args if a.arg == "lab" and (
                                a.annotation is None or "Any" in ast.unparse(a.annotation))]
    assert not untyped, untyped
