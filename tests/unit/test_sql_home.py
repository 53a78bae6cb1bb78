"""Every SQL statement of the harness and the benchmarks lives in a `.sql` file under a
name (STYLE: SQL treated as code), loaded by the product's `load_queries(path)`: the book's
old statements and the counterexamples sit beside the product's own in the same form, and
nothing re-spells a statement the product runs. Python string literals that are SQL
statements are found by reading the sources (docstrings, which talk about SQL, are not
statements)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A string that starts as a statement does: a keyword in capitals and what must follow it.
STATEMENT = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\s"
    r"|CREATE\s+(DATABASE|TABLE|INDEX|ROLE|USER)\s|DROP\s+(DATABASE|TABLE|ROLE|USER)\s"
    r"|ALTER\s+(DATABASE|TABLE|ROLE|USER)\s|TRUNCATE\s|LISTEN\s|NOTIFY\s)")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def statements_in(path: Path, root: Path = ROOT) -> list[str]:
    """`path:line: text` of each string literal (or f-string's literal start) that is SQL,
    in line order; `path` is named relative to `root`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            text = first.value if isinstance(first, ast.Constant) else ""
            skip.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in skip:
                continue
            text = node.value
        else:
            continue
        if STATEMENT.match(text):
            found.append((node.lineno, f"{path.relative_to(root)}:{node.lineno}: "
                                       f"{text.strip()[:60]}"))
    return [line for _, line in sorted(found)]


def test_no_sql_statement_is_written_in_python_in_the_harness_or_the_benchmarks():
    found = [s for room in ("labs", "benchmarks") for p in sorted((ROOT / room).rglob("*.py"))
             for s in statements_in(p)]
    assert not found, "SQL belongs in a .sql file:\n" + "\n".join(found)


def test_the_finder_sees_statements_and_not_prose(tmp_path):
    """The check above could pass by finding nothing: here it finds what it must."""
    src = tmp_path / "m.py"
    src.write_text('"""UPDATE a statement in prose: SELECT … FROM is talked about."""\n'
                   'A = ("UPDATE background_tasks SET progress = %(p)s "\n     "WHERE id = 1")\n'
                   'B = text("SELECT count(*) FROM notifications")\n'
                   'C = f"DELETE FROM {table}"\n'
                   'D = "Select what to export"\n'
                   'E = "UPDATE: nothing changed"\n')
    found = statements_in(src, tmp_path)
    assert [f.split(":")[1] for f in found] == ["2", "4", "5"], found
