"""The suite executes each notebook once for three purposes (`notebooks/conftest.py`): its
stored outputs under nbval, every cell run twice, then Run All again in the 中文 edition.
These tests run that conftest on small notebooks of their own, in a real kernel, and show
that each pass bites: a cell that breaks only on its second run, a 中文 cell that breaks
only in the 中文 edition, and a stored output that differs each fail their notebook,
naming the pass; the 中文 pass runs with the lab speaking Chinese. All the small notebooks
run in one pytest process (one start instead of six); each test reads its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
COUNT = "runs = globals().get('runs', 0) + 1"
#: Appends "<TEAMDESK_LANG or -> <runs>" to the file the run names in PASSES_SEEN.
RECORD = ("import os; open(os.environ['PASSES_SEEN'], 'a').write("
          "f\"{os.environ.get('TEAMDESK_LANG', '-')} {runs}\\n\")")


@dataclass(frozen=True)
class Case:
    en: list[str]
    zh: list[str]
    outputs: dict[int, str] | None = None


CASES = {
    "every_pass": Case([COUNT, RECORD], [COUNT, RECORD + "  # 中文"]),
    "second_run_breaks": Case([COUNT + "\nassert runs == 1, 'ran twice'", "x = 1"],
                              [COUNT + "\nassert runs == 1, 'ran twice'", "x = 1"]),
    "chinese_breaks": Case(["x = 1", "y = 2"], ["x = 1", "y = 2 / 0  # 中文"]),
    "output_same": Case(["print('one')", "x = 1"], ["print('one')", "x = 1"], {0: "one\n"}),
    "output_differs": Case(["print('one')", "x = 1"], ["print('one')", "x = 1"], {0: "two\n"}),
    "other_cells": Case(["x = 1", "y = 2"], ["x = 1"]),
}


@dataclass(frozen=True)
class Outcome:
    """One small notebook's items after the run: whether any failed, and their reports."""

    failed: bool
    text: str


@dataclass(frozen=True)
class Passes:
    """The run of every case: case → its outcome, and the lines `RECORD` wrote."""

    outcomes: dict[str, Outcome]
    seen: list[str]

    def __getitem__(self, name: str) -> Outcome:
        return self.outcomes[name]


def _notebook(path: Path, sources: list[str], outputs: dict[int, str] | None = None) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    for k, src in enumerate(sources):
        cell = nbformat.v4.new_code_cell(src)
        if outputs and k in outputs:
            cell.execution_count = k + 1
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=outputs[k])]
        nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> Passes:
    """Every case's notebook (and its 中文 twin) run by the chapters' conftest, in one
    pytest process; case → its outcome, read from the run's JUnit report."""
    top = tmp_path_factory.mktemp("passes")
    folder = top / "notebooks"
    for name, case in CASES.items():
        _notebook(folder / f"{name}.ipynb", case.en, case.outputs)
        _notebook(folder / "zh" / f"{name}.ipynb", case.zh)
    shutil.copy(ROOT / "notebooks" / "conftest.py", folder / "conftest.py")
    report, seen = top / "report.xml", top / "seen.txt"
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-q", f"--junitxml={report}", "notebooks"],
                         cwd=top, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PASSES_SEEN": str(seen)})
    assert report.exists(), run.stdout + run.stderr
    found: dict[str, list[ET.Element]] = {name: [] for name in CASES}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("classname", "").removeprefix("notebooks.").removesuffix(".ipynb")
        found[name].append(case)
    assert all(found.values()), (found, run.stdout)
    return Passes({name: Outcome(any(c.find("failure") is not None
                                     or c.find("error") is not None for c in cases),
                                 "\n".join(ET.tostring(c, encoding="unicode") for c in cases))
                   for name, cases in found.items()},
                  seen.read_text().splitlines() if seen.exists() else [])


def test_every_pass_runs_and_the_chinese_one_speaks_chinese(outcomes):
    assert not outcomes["every_pass"].failed, outcomes["every_pass"].text
    # Cell 0 twice, then cell 1 twice (English), then the 中文 Run All: 0 counts on, 1 records.
    assert outcomes.seen == ["- 2", "- 2", "zh 3"]


def test_a_cell_that_fails_when_run_again_fails_the_run(outcomes):
    out = outcomes["second_run_breaks"]
    assert out.failed and "[run again]" in out.text and "ran twice" in out.text, out.text


def test_a_chinese_cell_that_fails_fails_the_run_and_names_the_pass(outcomes):
    out = outcomes["chinese_breaks"]
    assert out.failed, out.text
    assert "[Run All again, 中文 edition, code cell 1]" in out.text
    assert "ZeroDivisionError" in out.text


def test_a_stored_output_that_differs_still_fails(outcomes):
    assert not outcomes["output_same"].failed, outcomes["output_same"].text
    out = outcomes["output_differs"]
    assert out.failed and "Cell outputs differ" in out.text, out.text


def test_a_chinese_edition_with_other_cells_is_refused(outcomes):
    out = outcomes["other_cells"]
    assert out.failed and "teamdesk editions" in out.text, out.text
