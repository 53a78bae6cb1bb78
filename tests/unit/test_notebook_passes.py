"""The suite executes each notebook once for three purposes (`notebooks/conftest.py`): its
stored outputs under nbval, every cell run twice, then Run All again in the 中文 edition.
These tests run that conftest on small notebooks of their own, in a real kernel, and show
that each pass bites: a cell that breaks only on its second run, a 中文 cell that breaks
only in the 中文 edition, and a stored output that differs each fail the run, naming the
pass; the 中文 pass runs with the lab speaking Chinese."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]


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


def _run(tmp_path: Path, en: list[str], zh: list[str], outputs: dict[int, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "notebooks"
    _notebook(folder / "x.ipynb", en, outputs)
    _notebook(folder / "zh" / "x.ipynb", zh)
    shutil.copy(ROOT / "notebooks" / "conftest.py", folder / "conftest.py")
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-q", "notebooks/x.ipynb"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


COUNT = "runs = globals().get('runs', 0) + 1"


def test_every_pass_runs_and_the_chinese_one_speaks_chinese(tmp_path):
    seen = tmp_path / "seen.txt"
    record = (f"import os; open({str(seen)!r}, 'a').write("
              "f\"{os.environ.get('TEAMDESK_LANG', '-')} {runs}\\n\")")
    en = [COUNT, record]
    out = _run(tmp_path, en, [COUNT, record + "  # 中文"])
    assert out.returncode == 0, out.stdout + out.stderr
    # Cell 0 twice, then cell 1 twice (English), then the 中文 Run All: 0 counts on, 1 records.
    assert seen.read_text().splitlines() == ["- 2", "- 2", "zh 3"]


def test_a_cell_that_fails_when_run_again_fails_the_run(tmp_path):
    en = [COUNT + "\nassert runs == 1, 'ran twice'", "x = 1"]
    out = _run(tmp_path, en, en)
    assert out.returncode == 1, out.stdout
    assert "[run again]" in out.stdout and "ran twice" in out.stdout


def test_a_chinese_cell_that_fails_fails_the_run_and_names_the_pass(tmp_path):
    en = ["x = 1", "y = 2"]
    out = _run(tmp_path, en, ["x = 1", "y = 2 / 0  # 中文"])
    assert out.returncode == 1, out.stdout
    assert "[Run All again, 中文 edition, code cell 1]" in out.stdout
    assert "ZeroDivisionError" in out.stdout


def test_a_stored_output_that_differs_still_fails(tmp_path):
    en = ["print('one')", "x = 1"]
    assert _run(tmp_path, en, en, outputs={0: "one\n"}).returncode == 0
    out = _run(tmp_path, en, en, outputs={0: "two\n"})
    assert out.returncode == 1 and "Cell outputs differ" in out.stdout, out.stdout


def test_a_chinese_edition_with_other_cells_is_refused(tmp_path):
    out = _run(tmp_path, ["x = 1", "y = 2"], ["x = 1"])
    assert out.returncode == 1 and "teamdesk editions" in out.stdout, out.stdout
