"""About how long a notebook takes a first-time learner: an estimate model, not a timed
learner.

Nobody was timed. The figure in each notebook's header ("About N minutes; optional part
M more") and in the course map (`docs/teaching/course-map.md`) is computed from the
notebook itself by this model, so it changes when the notebook does:

- **reading**: the prose of the markdown cells at `WORDS_PER_MIN` English words a minute
  and `HANZI_PER_MIN` 汉字 a minute (the 中文 edition is read at its own pace), and the
  code cells at `CODE_LINES_PER_MIN` non-blank lines a minute (a learner reads what they
  run and skims the checks). Presenter notes and hidden solutions are not read.
- **predictions**: `PREDICT_MIN` for each `predict` cell (read the question, write a guess).
- **diagnosis cases**: `CASE_MIN` for each exercise tagged `case.…` (read the evidence,
  choose a cause and a rule).
- **other exercises**: the minutes the course map lists in a row naming the exercise
  ("`23-outbox` 练习 A"), else `EXERCISE_MIN`.
- **running**: the cells' measured seconds (`CELL_SECONDS`, written by
  `python -m devkit.minutes --measure notebooks/NAME.ipynb`), else `RUN_S_PER_CELL` for a
  code cell not measured yet.

The *main path* is everything but the optional part (from a `## 选读` heading to the recap
or the closing section, 小结 / 收尾, which every learner reads) and the exercises the course
map marks optional (with their sections, when the section is the exercise's own); those
and the optional part are the "M more". Each figure is rounded to
`ROUND_TO` minutes. `python -m devkit.minutes` prints the figures of every notebook.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from devkit import notebook_cells, services
from devkit.copies import PRESENTER_TAG, source_notebooks
from devkit.i18n import HAN
from devkit.site import CELL_TIMEOUT_S
from devkit.slides import SOLUTION_TAG

PROJECT = Path(__file__).resolve().parents[1]
COURSE_MAP = PROJECT / "docs" / "teaching" / "course-map.md"
#: Measured seconds per code cell, by notebook and cell id (`--measure`).
CELL_SECONDS = PROJECT / "docs" / "teaching" / "cell-seconds.json"

WORDS_PER_MIN = 200
HANZI_PER_MIN = 300
CODE_LINES_PER_MIN = 20
PREDICT_MIN = 1.0
CASE_MIN = 5.0
EXERCISE_MIN = 10.0
RUN_S_PER_CELL = 3.0
ROUND_TO = 5

#: The heading that opens a notebook's optional part.
OPTIONAL_PART = re.compile(r"^##\s+选读")
#: A notebook's header figures: "About 60 minutes; optional part 25 more" (the 中文 edition:
#: "大约 60 分钟；选读部分另需 25 分钟").
HEADER = re.compile(r"About (\d+) minutes(?:; optional part (\d+) more)?")
HEADER_ZH = re.compile(r"大约 (\d+) 分钟(?:；选读部分另需 (\d+) 分钟)?")
_HANZI = re.compile(f"[{HAN}]")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_'’.-]*")
_EXERCISE_LABEL = re.compile(r"练习\s*([A-Z])")
_ROW_EXERCISE = re.compile(r"`([\w-]+)` 练习 ([A-Z])")


@dataclass
class Estimate:
    """The model's minutes for one notebook, unrounded, with what went into them."""

    main: float = 0.0
    optional: float = 0.0
    #: (part, what, minutes) for every term: "main"/"optional", e.g. "reading cell 12".
    terms: list[tuple[str, str, float]] = field(default_factory=list)

    def add(self, part: str, what: str, minutes: float) -> None:
        setattr(self, part, getattr(self, part) + minutes)
        self.terms.append((part, what, minutes))

    @property
    def rounded(self) -> tuple[int, int]:
        """(main, optional) rounded to `ROUND_TO` minutes; the main path at least one step."""
        return max(ROUND_TO, round_minutes(self.main)), round_minutes(self.optional)


def round_minutes(minutes: float) -> int:
    return math.floor(minutes / ROUND_TO + 0.5) * ROUND_TO


def reading_minutes(text: str, *, code: bool = False) -> float:
    """Minutes to read one cell: code by its non-blank lines; prose by its English words
    and its 汉字 (a fenced block inside prose is read as code)."""
    if code:
        return sum(1 for line in text.splitlines() if line.strip()) / CODE_LINES_PER_MIN
    fenced = "\n".join(m.group(0) for m in notebook_cells.FENCE.finditer(text))
    prose = notebook_cells.FENCE.sub("", text)
    return (len(_WORD.findall(_HANZI.sub(" ", prose))) / WORDS_PER_MIN
            + len(_HANZI.findall(prose)) / HANZI_PER_MIN
            + reading_minutes(fenced, code=True))


def course_map_exercises(text: str) -> dict[tuple[str, str], tuple[float, bool]]:
    """(notebook ref, "练习 X") → (minutes, core) for each course-map row naming an
    exercise of a notebook ("`23-outbox` 练习 A", "`26b` 练习 A")."""
    found: dict[tuple[str, str], tuple[float, bool]] = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[-2].isdigit() or cells[-1] not in ("core", "optional"):
            continue
        minutes = float(cells[-2])  # the row's "min" column, before core / optional
        for ref, letter in _ROW_EXERCISE.findall(" | ".join(cells[1:-2])):
            found.setdefault((ref, f"练习 {letter}"), (minutes, cells[-1] == "core"))
    return found


def _refers_to(ref: str, name: str) -> bool:
    return name == ref or name.startswith(f"{ref}-")


def measured_seconds(name: str) -> dict[str, float]:
    """The measured seconds of notebook `name`'s code cells, by cell id ({} if none)."""
    if not CELL_SECONDS.is_file():
        return {}
    return json.loads(CELL_SECONDS.read_text(encoding="utf-8")).get(name, {})


def estimate(cells: list[dict[str, Any]], name: str, *, course_map: str | None = None,
             seconds: dict[str, float] | None = None) -> Estimate:
    """The model's minutes for notebook `name` (its stem, e.g. "23-outbox") from its
    `cells`, in either edition (the same cells, ids and tags; only the text differs)."""
    listed = course_map_exercises(course_map if course_map is not None
                                  else COURSE_MAP.read_text(encoding="utf-8"))
    seconds = measured_seconds(name) if seconds is None else seconds
    sections = parts(cells)
    # An exercise the course map marks optional takes its own section ("## 练习 B") along.
    optional_sections = {
        sections[i][0] for i, cell in enumerate(cells) if "exercise" in notebook_cells.tags(cell)
        and _EXERCISE_LABEL.search(sections[i][1])
        and not _exercise(cell, name, sections[i][1], listed)[1]}
    result = Estimate()
    for i, cell in enumerate(cells):
        text, tags = notebook_cells.source(cell), notebook_cells.tags(cell)
        number, heading, part = sections[i]
        where = "optional" if number in optional_sections else part
        if PRESENTER_TAG in tags:
            continue
        if "exercise" in tags:
            what, core, minutes = _exercise(cell, name, heading, listed)
            result.add(where if core else "optional", f"{what} (cell {i})", minutes)
        if "predict" in tags:
            result.add(where, f"prediction (cell {i})", PREDICT_MIN)
        hidden = SOLUTION_TAG in tags and cell.get("metadata", {}).get("jupyter", {}).get(
            "source_hidden", False)
        if not hidden:
            result.add(where, f"reading cell {i}",
                       reading_minutes(text, code=cell["cell_type"] == "code"))
        if cell["cell_type"] == "code":
            run_s = seconds.get(cell.get("id", ""), RUN_S_PER_CELL)
            result.add(where, f"running cell {i}", run_s / 60)
    return result


def parts(cells: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    """For each cell: (its section's number, the section's heading line, "main" or
    "optional"). A section opens at a heading and runs to the next heading of the same or
    a higher level; the optional part runs from its `## 选读` heading to the recap (小结)
    or the closing section (收尾), which every learner reads and runs wherever they sit."""
    out: list[tuple[int, str, str]] = []
    number, heading, level, part = 0, "", 0, "main"
    for cell in cells:
        text = notebook_cells.source(cell)
        if cell["cell_type"] == "markdown" and text.startswith("#"):
            first = text.splitlines()[0]
            new_level = len(first) - len(first.lstrip("#"))
            if OPTIONAL_PART.match(first):
                part = "optional"
            elif new_level <= 2 and ("recap" in notebook_cells.tags(cell)
                                     or first.lstrip("# ").startswith("收尾")):
                part = "main"  # the recap and the closing cell: every learner's
            if new_level <= level or not _EXERCISE_LABEL.search(heading):
                number, heading, level = number + 1, first, new_level
        out.append((number, heading, part))
    return out


def _exercise(cell: dict[str, Any], name: str, heading: str,
              listed: dict[tuple[str, str], tuple[float, bool]]) -> tuple[str, bool, float]:
    """(what, core, minutes) of one exercise cell under `heading`."""
    tags = notebook_cells.tags(cell)
    label = _EXERCISE_LABEL.search(heading)
    row = next((v for (ref, lab), v in listed.items()
                if label and lab == f"练习 {label.group(1)}" and _refers_to(ref, name)), None)
    core = row[1] if row else True
    if any(t.startswith("case.") for t in tags):
        return "diagnosis case", core, CASE_MIN
    return "exercise", core, row[0] if row else EXERCISE_MIN


def notebook_estimate(path: Path) -> Estimate:
    """The model applied to a notebook file (the 中文 edition: `notebooks/zh/NAME.ipynb`)."""
    cells = notebook_cells.cells(path)
    return estimate(cells, path.stem)


def header_figures(cells: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(main, optional) as the notebook's header (its second cell) says them, in either
    edition; optional 0 when the header names no optional part."""
    text = notebook_cells.source(cells[1]) if len(cells) > 1 else ""
    found = HEADER.search(text) or HEADER_ZH.search(text)
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2) or 0)


# ------------------------------------------------------------------ measuring the cells

def measure(path: Path) -> dict[str, float]:
    """Run a copy of the notebook headless (nbconvert, which records each cell's timing)
    and return each code cell's seconds by cell id; the notebook itself is not touched.
    The run has embedded servers of its own (`.teamdesk-measure/`, a sibling of the lab's,
    as the suite's and the site's are): the notebooks stop and restart their servers,
    which must never be an open lab's. A pytest run inside a notebook keeps them
    (TEAMDESK_LAB_DATA_DIR set, as in the suite)."""
    lab = services.data_dir()
    env = {**os.environ, "TEAMDESK_DATA_DIR": f"{lab}-measure"}
    env.setdefault("TEAMDESK_LAB_DATA_DIR", str(lab))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / path.name
        subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook",
                        "--execute", f"--ExecutePreprocessor.timeout={CELL_TIMEOUT_S}",
                        "--output", str(out), str(path)], check=True, cwd=path.parent, env=env)
        cells = notebook_cells.cells(out)
    timed: dict[str, float] = {}
    for cell in cells:
        stamps = cell.get("metadata", {}).get("execution", {})
        began, ended = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if cell["cell_type"] == "code" and began and ended:
            timed[cell["id"]] = round(
                (datetime.fromisoformat(ended) - datetime.fromisoformat(began)).total_seconds(), 2)
    return timed


def _record(name: str, timed: dict[str, float]) -> None:
    data = (json.loads(CELL_SECONDS.read_text(encoding="utf-8"))
            if CELL_SECONDS.is_file() else {})
    data[name] = timed
    CELL_SECONDS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n",
                            encoding="utf-8")


def main(argv: list[str]) -> int:
    """`python -m devkit.minutes`: every notebook's figures (English, then 中文);
    `--measure notebooks/NAME.ipynb …`: run each and record its cells' seconds first."""
    if argv[:1] == ["--measure"]:
        for arg in argv[1:]:
            path = Path(arg).resolve()
            _record(path.stem, measure(path))
            print(f"measured {path.name}")
    for path in source_notebooks(PROJECT):
        en = notebook_estimate(path).rounded
        zh_path = PROJECT / "notebooks" / "zh" / path.name
        zh = notebook_estimate(zh_path).rounded if zh_path.is_file() else None
        print(f"{path.stem:32s} about {en[0]:3d} min, optional part {en[1]:3d} more"
              + (f"  | 中文 {zh[0]} + {zh[1]}" if zh else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
