""""About N minutes" is the estimate model's figure (`devkit.minutes`), in both editions'
headers and in the course map: an explicit model computed from the notebook itself — its
prose, code, predictions, cases and exercises, the course map's exercise minutes and the
cells' running time — not a timed learner. Edit a notebook so that its figure moves, and
these tests name the header or the course-map row to update (`python -m devkit.minutes`
prints the figures)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from devkit import notebook_cells, site
from devkit.minutes import (
    CASE_MIN,
    PREDICT_MIN,
    Estimate,
    course_map_exercises,
    estimate,
    header_figures,
    measure,
    notebook_estimate,
    reading_minutes,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
COURSE_MAP = ROOT / "docs" / "teaching" / "course-map.md"
#: A row of the course map's "Minutes per notebook" table: `NAME` | 4 figures.
FIGURES_ROW = re.compile(r"^\| `([\w-]+)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", re.M)
#: A row of the course map's table of our own notebooks: `NAME` (ours…) | sections | min.
OURS_ROW = re.compile(r"^\| `([\w-]+)` \(ours[^|]*\| [^|]+\| (\d+) \|", re.M)


def mismatches(cells: list[dict], model: Estimate) -> str | None:
    """What the header says against the model, or None when they agree."""
    said = header_figures(cells)
    if said != model.rounded:
        return f"the header says {said}, the model {model.rounded}"
    return None


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_header_says_the_models_figures(path: Path, lang: str) -> None:
    edition = path if lang == "en" else path.parent / "zh" / path.name
    cells = notebook_cells.cells(edition)
    problem = mismatches(cells, notebook_estimate(edition))
    assert problem is None, f"{edition.relative_to(ROOT)}: {problem} (python -m devkit.minutes)"


def test_the_course_map_lists_the_models_figures_for_every_notebook() -> None:
    text = COURSE_MAP.read_text(encoding="utf-8")
    listed = {name: tuple(map(int, figures)) for name, *figures in FIGURES_ROW.findall(text)}
    assert sorted(listed) == [p.stem for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        want = (*notebook_estimate(path).rounded,
                *notebook_estimate(path.parent / "zh" / path.name).rounded)
        assert listed[path.stem] == want, f"course map row {path.stem}: {listed[path.stem]}, " \
                                          f"the model {want}"
    ours = dict(OURS_ROW.findall(text))
    assert len(ours) == 5, ours
    for name, minutes in ours.items():
        assert int(minutes) == listed[name][0], f"our notebooks' table, {name}: {minutes}"


def test_the_docs_say_it_is_a_model_not_a_timed_learner() -> None:
    assert "a model, not a timed learner" in COURSE_MAP.read_text(encoding="utf-8")
    assert "一个模型，不是实测" in (ROOT / "docs/teaching/zh/course-map.md").read_text(
        encoding="utf-8")


def _md(text: str, **meta) -> dict:
    return {"cell_type": "markdown", "id": "m", "metadata": meta, "source": text}


def _code(text: str, *tags: str, hidden: bool = False, cid: str = "c") -> dict:
    meta: dict = {"tags": list(tags)}
    if hidden:
        meta["jupyter"] = {"source_hidden": True}
    return {"cell_type": "code", "id": cid, "metadata": meta, "source": text}


COURSE = """| § | title | notebook · section | min | |
|---|---|---|---|---|
| 练习 A | … | `99-demo` 练习 A (a test) | 12 | core |
| 练习 B | … | `99-demo` 练习 B | 15 | optional |
"""


def test_the_model_counts_reading_predictions_cases_exercises_and_running() -> None:
    words = " ".join(["word"] * 200)
    cells = [_md("# 99 · demo"), _md(f"**About 5 minutes**\n\n{words}"),
             _md("## §1 一\n" + "汉" * 300),
             _code("guess = None", "predict", cid="p"),
             _md("**Presenter:** " + words, tags=["presenter"]),  # not read
             _md("## 练习 A：写\n"), _code("my = None", "exercise", cid="a"),
             _code("solution = 1\n" * 40, "solution", hidden=True),  # not read
             _md("## 练习 B：另一个\n" + words), _code("mine = None", "exercise", cid="b"),
             _md("## 选读 (ours)\n"), _code("case = None", "exercise", "case.x", cid="x"),
             _md("## 收尾\n"), _code("await lab.close()", cid="z")]
    model = estimate(cells, "99-demo", course_map=COURSE, seconds={"z": 60.0})
    main = {what.split(" (")[0].rsplit(" cell", 1)[0]: 0.0 for _, what, _ in model.terms}
    for part, what, minutes in model.terms:
        if part == "main":
            main[what.split(" (")[0].rsplit(" cell", 1)[0]] += minutes
    assert main["prediction"] == PREDICT_MIN
    assert main["exercise"] == 12  # the course map's minutes for a core exercise
    assert main["running"] == pytest.approx(1 + 3 * 3 / 60)  # measured 60 s, else 3 s
    assert main["reading"] == pytest.approx(1 + 1 + 4 / 20, abs=0.1)  # 200 words, 300 汉字
    optional = sum(m for part, _, m in model.terms if part == "optional")
    # 练习 B is optional on the course map: its section goes along (its 200 words), and
    # the case in the optional part counts its fixed minutes
    assert optional == pytest.approx(15 + 1 + CASE_MIN + 2 / 20 + 2 * 3 / 60, abs=0.1)
    assert model.rounded == (round(model.main / 5) * 5, round(optional / 5) * 5)


def test_a_header_the_model_disagrees_with_is_named() -> None:
    cells = [_md("# t"), _md("**About 40 minutes; optional part 10 more**"), _md("x")]
    model = Estimate(main=41, optional=12)
    assert mismatches(cells, model) is None
    model.main = 33
    assert mismatches(cells, model) == "the header says (40, 10), the model (35, 10)"
    assert header_figures([_md("# t"), _md("**大约 25 分钟**——按笔记本本身估算")]) == (25, 0)


def test_the_course_map_rows_that_name_an_exercise() -> None:
    assert course_map_exercises(COURSE) == {("99-demo", "练习 A"): (12.0, True),
                                            ("99-demo", "练习 B"): (15.0, False)}
    assert reading_minutes("```ts\nx\ny\n```\n" + "w " * 100) == pytest.approx(0.5 + 4 / 20)


def test_measuring_runs_on_servers_of_its_own(tmp_path, monkeypatch) -> None:
    """`--measure` runs a notebook that stops and restarts its servers, so not on the
    lab's (`.teamdesk/`, what an open JupyterLab uses): on a sibling folder of its own, with
    the lab's noted for a pytest run inside the notebook; each cell's seconds come from
    the timestamps nbclient records (ISO 8601 with a `Z`)."""
    lab = tmp_path / ".teamdesk"
    monkeypatch.setenv("TEAMDESK_DATA_DIR", str(lab))
    monkeypatch.delenv("TEAMDESK_LAB_DATA_DIR", raising=False)
    seen = {}

    def run(cmd, *, check, cwd, env=None):
        seen.update(env=env or dict(os.environ), cmd=cmd)  # no env: the caller's
        out = Path(cmd[cmd.index("--output") + 1])
        cell = {"cell_type": "code", "id": "c1", "source": "", "outputs": [],
                "execution_count": 1, "metadata": {"execution": {
                    "iopub.execute_input": "2026-01-01T10:00:00.250000Z",
                    "shell.execute_reply": "2026-01-01T10:00:02.000000Z"}}}
        out.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                   "nbformat_minor": 5}), encoding="utf-8")

    monkeypatch.setattr("devkit.minutes.subprocess.run", run)
    assert measure(tmp_path / "23-outbox.ipynb") == {"c1": 1.75}
    assert seen["env"]["TEAMDESK_DATA_DIR"] == f"{lab.resolve()}-measure"
    assert seen["env"]["TEAMDESK_LAB_DATA_DIR"] == str(lab.resolve())
    assert f"--ExecutePreprocessor.timeout={site.CELL_TIMEOUT_S}" in seen["cmd"]
