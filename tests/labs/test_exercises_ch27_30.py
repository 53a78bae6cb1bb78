"""The write-it-yourself exercises of notebooks 27 and 30 are judged by the real system,
and each judge names why it refuses what it refuses (what the runs found: `verdict.facts`;
that the starter and each wrong answer are refused and the solution accepted is the
registry test's, `test_exercise_registry.py`). Also: the map of the book's tests (ch. 26
§7–§8) to our scenes and pytest tests cites only tests and sections that exist."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from labs.scenes import ch27
from tests.labs.test_exercises import NOTEBOOKS

ROOT = NOTEBOOKS.parent


def _cell_source(notebook: str, tag: str, name: str) -> str:
    """The source of the cell tagged `tag` that defines the function `name`."""
    cells = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        source = "".join(cell["source"])
        if tag in cell["metadata"].get("tags", []) and re.search(
                rf"^(async )?def {name}\(", source, re.M):
            return source
    raise AssertionError(f"{notebook}: no cell tagged {tag!r} defines {name}")


# ------------------------------------------------------------------ 27 练习 A

def test_27_starter_does_not_hold_the_answer():
    """(ours) the starter has a fixed prefix and no clean-up: no `finally`, no uuid (why
    each answer is refused or accepted: `exercise_reasons`, on the registry's runs)."""
    source = _cell_source("27-test-isolation.ipynb", "exercise", "my_isolation")
    assert "finally" not in source and "uuid4" not in source


# ------------------------------------------------------------------ the book's tests, ours

def _test_ids(path: Path) -> dict[str, set[str]]:
    """Test function name → the ids of its `pytest.mark.parametrize` values (read with
    `ast`, never run): a plain value's id is itself."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or not (
                node.name.startswith("test_")):
            continue
        ids: set[str] = set()
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("parametrize"):
                values = ast.literal_eval(deco.args[1])
                ids |= {v if isinstance(v, str) else repr(v) for v in values}
        found[node.name] = ids
    return found


def test_every_test_the_map_cites_exists():
    """Each `path::name[param]` of `ch27.BOOK_TEST_MAP` is a test function in that file
    (collected with `ast`), and a `[param]` is one of its parametrize values."""
    cited = [name for row in ch27.BOOK_TEST_MAP for name in row.tests]
    assert len(cited) >= 9
    for name in cited:
        path, _, test = name.partition("::")
        func, _, param = test.partition("[")
        tests = _test_ids(ROOT / path)
        assert func in tests, f"{name}: no such test in {path}"
        if param:
            assert param.rstrip("]") in tests[func], f"{name}: no such parameter"


def _headings(notebook_prefix: str) -> list[str]:
    [path] = NOTEBOOKS.glob(f"{notebook_prefix}-*.ipynb")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]).split("\n", 1)[0].lstrip("#").strip() for c in cells
            if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("#")]


def test_every_section_the_map_cites_exists_and_the_book_rows_are_nine():
    """Each staged section of the map is a heading of that notebook; the rows are the
    book's six real-worker tests (§7, item 1 as two) and three reminder tests (§8)."""
    for row in ch27.BOOK_TEST_MAP:
        for notebook, *sections in row.staged:
            headings = _headings(notebook)
            for section in sections:
                assert any(h.startswith(section) for h in headings), (
                    f"{row.book}: no section {section!r} in notebook {notebook}")
    book = [r.book for r in ch27.BOOK_TEST_MAP if "ch. 30" not in r.book]
    assert len([b for b in book if b.startswith("§7")]) == 6
    assert len([b for b in book if b.startswith("§8")]) == 3


def test_the_map_is_the_same_in_notebook_27_and_the_course_map():
    """The table is rendered from `BOOK_TEST_MAP` into both places; neither may drift."""
    table = ch27.map_markdown()
    cells = json.loads((NOTEBOOKS / "27-test-isolation.ipynb").read_text(encoding="utf-8"))
    assert any(table in "".join(c["source"]) for c in cells["cells"]
               if c["cell_type"] == "markdown")
    assert table in (ROOT / "docs" / "teaching" / "course-map.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("row", ch27.BOOK_TEST_MAP, ids=lambda r: r.book)
def test_a_row_without_a_test_says_not_covered(row):
    """A book test with no test of ours is shown as "not covered", never left blank."""
    line = next(r for r in ch27.map_markdown().splitlines() if r.startswith(f"| {row.book} |"))
    assert row.tests or line.rstrip().endswith("| not covered |")


# ------------------------------------------------------------------ 30 练习 B

def _function_source(notebook: str, tag: str, name: str) -> str:
    """Only the definition of `name` from its cell (a solution cell also runs the judge)."""
    source = _cell_source(notebook, tag, name)
    node = next(n for n in ast.parse(source).body
                if isinstance(n, ast.AsyncFunctionDef) and n.name == name)
    segment = ast.get_source_segment(source, node)
    assert segment is not None
    return segment


def test_30_starter_does_not_hold_the_answer():
    """W4: the starter closes the connections and says 0; the order and the exit code are
    the learner's to write (why each answer is refused or accepted: `exercise_reasons`)."""
    starter = _function_source("30-worker-process.ipynb", "exercise", "my_drain")
    assert "close_worker" not in starter and "EXIT_DRAIN_TIMEOUT" not in starter


def test_the_drain_seam_is_for_the_worker_command_only(tmp_path, capsys):
    """W4's seam is the worker process's: the drain's entry point refuses any other
    command, and the product's own command line takes no drain."""
    from labs.drain_worker import main

    drain = tmp_path / "drain.py"
    drain.write_text("async def d(stopping):\n    return 0\nDRAIN = d\n")
    assert main([str(drain), "tasks"]) == 2
    assert "usage: python -m labs.drain_worker <drain.py> worker" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main([str(drain), "worker", "--concurrency", "0"])
    assert exit_.value.code == 2
    assert "is not a whole number of at least 1" in capsys.readouterr().err


async def test_30_timeline_holds_what_the_swimlane_draws(lab):
    """W4, P5: the processes' timeline (notebook 30 §5's swimlane) records a process's
    start, the lease it claimed at its hold, SIGTERM, the drain, the commit and the exit,
    and its lease lane ends in that process's own commit."""
    import signal

    from labs.scenes import ch30
    from labs.timings import SCENE_WORKER

    procs = ch30.Processes(lab, SCENE_WORKER.to_env())
    w = procs.spawn("w", hold="export.after_read")
    task = await lab.request_export({"status": ["OPEN"]}, user="ben")
    await procs.held("w")
    w.send(signal.SIGTERM)
    await procs.logged("w", "worker.draining")
    procs.release("w")
    assert await w.wait_exit(30) == 0
    ops = [r["op"] for r in procs.timeline.rows if r["actor"] == "w"]
    assert ops == ["start", "claim", "held", "SIGTERM", "draining", "released", "result",
                   "exit 0"], ops
    [lease] = procs.timeline.leases()
    assert (lease.task_id, lease.actor, lease.ended_by) == (task.id, "w", "commit")
    assert procs.timeline.plot() is not None
    await procs.stop_all()
