"""The learner's copies (`devkit.copies`) and the lab's read-only repository notebooks
(`devkit.contents`): no answer on screen before a cell runs, the learner's work never
overwritten, a copy they have not modified following its notebook's updates (running cells
is not a modification), the regression source never written by a lab session."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from devkit import copies, notebook_cells

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks",
                    ignore=shutil.ignore_patterns("*.py", "*.cfg", "*.md"))
    return tmp_path


def test_a_copy_has_no_answers_but_keeps_code_tags_and_hidden_sources(project: Path):
    report = copies.ensure_copies(project)
    sources = copies.source_notebooks(project)
    assert report.created == [s.name for s in sources] and len(sources) == 11
    stored = sum(len(c.get("outputs", [])) for s in sources for c in notebook_cells.cells(s))
    assert stored > 100  # the repository's copies do carry answers
    for source in sources:
        original = notebook_cells.read(source)
        copy = notebook_cells.read(project / copies.LEARNER_DIR / source.name)
        kept = [c for c in original["cells"]
                if copies.PRESENTER_TAG not in c["metadata"].get("tags", [])]
        assert [c["source"] for c in copy["cells"]] == [c["source"] for c in kept]
        assert [c["metadata"].get("tags") for c in copy["cells"]] == [
            c["metadata"].get("tags") for c in kept]
        assert [c["metadata"].get("jupyter") for c in copy["cells"]] == [
            c["metadata"].get("jupyter") for c in kept]  # hidden sources stay hidden
        assert copy["metadata"] == original["metadata"]
        code = [c for c in copy["cells"] if c["cell_type"] == "code"]
        assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_presenter_notes_stay_out_of_the_copy():
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {"tags": ["presenter"]}, "source": "say X"},
        {"cell_type": "code", "metadata": {"tags": ["predict"]}, "source": "guess = None",
         "outputs": [{"output_type": "stream", "name": "stdout", "text": "42"}],
         "execution_count": 3}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    copy = copies.learner_copy(nb)
    assert [c["source"] for c in copy["cells"]] == ["guess = None"]
    assert copy["cells"][0]["outputs"] == [] and nb["cells"][1]["outputs"]  # not mutated


def test_an_existing_copy_is_never_overwritten(project: Path):
    copies.ensure_copies(project)
    mine = project / copies.LEARNER_DIR / "26b-takeover-race.ipynb"
    mine.write_text('{"my": "work"}')
    report = copies.ensure_copies(project)
    assert "26b-takeover-race.ipynb" in report.kept and not report.created
    assert mine.read_text() == '{"my": "work"}'


def test_a_fresh_copy_puts_the_old_one_aside(project: Path):
    copies.ensure_copies(project)
    mine = project / copies.LEARNER_DIR / "26b-takeover-race.ipynb"
    mine.write_text('{"my": "work"}')
    report = copies.fresh_copies(project, ["26b"])
    assert report.created == ["26b-takeover-race.ipynb"] and len(report.replaced) == 1
    aside = project / copies.LEARNER_DIR / report.replaced[0]
    assert aside.read_text() == '{"my": "work"}'
    assert notebook_cells.cells(mine)  # a real notebook again
    assert len(copies.fresh_copies(project, ["all"]).created) == 11


def test_an_unknown_notebook_name_lists_the_choices(project: Path):
    with pytest.raises(ValueError, match=r"no notebook '26z'; choose one of 00, 23, .*, or all"):
        copies.resolve_names(project, ["26z"])
    assert [p.name for p in copies.resolve_names(project, ["26b-takeover-race.ipynb", "90"])
            ] == ["26b-takeover-race.ipynb", "90-chaos.ipynb"]


async def test_the_lab_serves_repository_notebooks_read_only(project: Path):
    from tornado.web import HTTPError

    from devkit.contents import LabContentsManager

    copies.ensure_copies(project)
    manager = LabContentsManager(root_dir=str(project))
    repo = "notebooks/26b-takeover-race.ipynb"
    model = await manager.get(repo)
    assert model["writable"] is False
    before = (project / repo).read_bytes()
    with pytest.raises(HTTPError) as refused:
        await manager.save(model, repo)
    assert refused.value.status_code == 403
    assert "my-notebooks/26b-takeover-race.ipynb" in refused.value.log_message
    assert (project / repo).read_bytes() == before
    mine = await manager.get("my-notebooks/26b-takeover-race.ipynb")
    assert mine["writable"] is True
    await manager.save(mine, "my-notebooks/26b-takeover-race.ipynb")  # the learner's: saved


def test_the_chinese_edition_has_its_own_folder_of_copies(project: Path):
    """One folder per edition: my-notebooks/zh/ from notebooks/zh/, the English where a
    notebook's 中文 edition is not written yet, and the English copies left alone."""
    copies.ensure_copies(project)
    report = copies.ensure_copies(project, "zh")
    zh_dir = project / copies.LEARNER_DIR / "zh"
    assert copies.learner_dir(project, "zh") == zh_dir and len(report.created) == 11
    built = {p.name for p in (project / "notebooks" / "zh").glob("*.ipynb")}
    assert "00-start-here.ipynb" in built
    for name in report.created:
        source = (project / "notebooks" / ("zh" if name in built else "") / name)
        assert [c["source"] for c in notebook_cells.cells(zh_dir / name)] == [
            c["source"] for c in copies.learner_copy(notebook_cells.read(source))["cells"]]
    zh_text = json.dumps(notebook_cells.read(zh_dir / "00-start-here.ipynb"), ensure_ascii=False)
    en_text = json.dumps(notebook_cells.read(project / copies.LEARNER_DIR / "00-start-here.ipynb"))
    assert "你将学到" in zh_text and "What you will learn" not in zh_text
    assert "What you will learn" in en_text
    assert copies.fresh_copies(project, ["00"], "zh").replaced[0].startswith(".replaced/")


async def test_the_chinese_edition_in_the_repository_is_read_only_too(project: Path):
    from tornado.web import HTTPError

    from devkit.contents import LabContentsManager, protected

    assert protected("notebooks/zh/00-start-here.ipynb")
    assert not protected("notebooks/i18n/zh/00-start-here.md")
    assert not protected("my-notebooks/zh/00-start-here.ipynb")
    manager = LabContentsManager(root_dir=str(project))
    repo = "notebooks/zh/00-start-here.ipynb"
    model = await manager.get(repo)
    assert model["writable"] is False
    with pytest.raises(HTTPError) as refused:
        await manager.save(model, repo)
    assert "my-notebooks/zh/00-start-here.ipynb" in refused.value.log_message


# ---------------------------------------------------------------- following updates
# A small course in a temporary folder: two chapters, a 中文 edition of one of them.

RACE = "26b-takeover-race.ipynb"
START = "00-start-here.ipynb"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)  # how nbformat stores a source


def _chapter(title: str, *, run: int = 1, python: str = "3.11.7") -> dict:
    """A chapter as the repository stores it: a finished run's outputs and timings, a
    prediction, a presenter note."""
    return {"cells": [
        {"cell_type": "markdown", "id": "c1", "metadata": {}, "source": _lines(f"# {title}\n")},
        {"cell_type": "code", "id": "c2", "metadata": {"tags": ["predict"]},
         "source": _lines("guess = None  # who commits?\n"), "outputs": [],
         "execution_count": run},
        {"cell_type": "code", "id": "c3", "metadata": {"execution": {"took": run}},
         "source": _lines("print(race())\n"), "execution_count": run + 1,
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["B commits\n"]}]},
        {"cell_type": "markdown", "id": "c4", "metadata": {"tags": ["presenter"]},
         "source": _lines("Ask the room first.\n")}],
        "metadata": {"kernelspec": {"name": "python3"},
                     "language_info": {"name": "python", "version": python}},
        "nbformat": 4, "nbformat_minor": 5}


def _publish(project: Path, name: str, nb: dict, lang: str = "en") -> None:
    """A notebook of the course as a `git pull` brings it."""
    folder = project / "notebooks" / ("" if lang == "en" else lang)
    folder.mkdir(parents=True, exist_ok=True)
    copies.write_notebook(folder / name, nb)


@pytest.fixture
def course(tmp_path: Path) -> Path:
    _publish(tmp_path, START, _chapter("Start here"))
    _publish(tmp_path, RACE, _chapter("The takeover race"))
    _publish(tmp_path, START, _chapter("从这里开始"), "zh")
    return tmp_path


def _run_cells(path: Path) -> None:
    """What JupyterLab saves after the learner ran every cell and collapsed one: outputs,
    execution counts, timings, UI state; sources as one string each."""
    nb = notebook_cells.read(path)
    for n, cell in enumerate(nb["cells"], 1):
        cell["source"] = notebook_cells.source(cell)
        if cell["cell_type"] == "code":
            cell["execution_count"] = n
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "mine\n"}]
            cell["metadata"]["execution"] = {"iopub.status.idle": "2024-05-01T10:00:00Z"}
    nb["cells"][0]["metadata"]["jupyter"] = {"source_hidden": True}
    nb["metadata"]["language_info"]["version"] = "3.12.1"
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def _answer(path: Path, guess: str = "guess = 'A'  # mine\n") -> None:
    """The learner answers the prediction (their work)."""
    nb = notebook_cells.read(path)
    nb["cells"][1]["source"] = guess
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def _made_from(project: Path, name: str, lang: str = "en") -> dict:
    folder = project / "notebooks" / ("" if lang == "en" else lang)
    return copies.learner_copy(notebook_cells.read(folder / name))


def _sources(nb: dict) -> list[str]:
    return [notebook_cells.source(c) for c in nb["cells"]]


def test_an_unmodified_copy_follows_its_updated_notebook(course: Path):
    assert copies.ensure_copies(course).created == [START, RACE]
    _publish(course, RACE, _chapter("The takeover race, revised"))
    report = copies.ensure_copies(course)
    mine = course / copies.LEARNER_DIR / RACE
    assert report.refreshed == [RACE] and report.kept == [START] and not report.beside
    assert notebook_cells.read(mine) == _made_from(course, RACE)
    assert not (course / copies.LEARNER_DIR / copies.updated_name(RACE)).exists()
    assert "refreshed from their updated notebooks (you had not changed them): 26b" in (
        copies.describe(report, course))
    again = copies.ensure_copies(course)
    assert again.kept == [START, RACE] and not again.refreshed


def test_a_copy_whose_cells_were_only_run_is_unmodified(course: Path):
    """Running cells adds outputs, counts and timings and Jupyter's UI state; it writes
    nothing of the learner's own, so the copy still follows its notebook."""
    copies.ensure_copies(course)
    mine = course / copies.LEARNER_DIR / RACE
    _run_cells(mine)
    _publish(course, RACE, _chapter("The takeover race, revised"))
    assert copies.ensure_copies(course).refreshed == [RACE]
    assert _sources(notebook_cells.read(mine))[0] == "# The takeover race, revised\n"


def test_a_notebook_run_again_is_not_an_update(course: Path):
    """CI regenerating a notebook changes outputs, counts, timings and the Python version
    only: no copy is made again (the learner's outputs stay) and nothing is put beside."""
    copies.ensure_copies(course)
    ran, answered = course / copies.LEARNER_DIR / START, course / copies.LEARNER_DIR / RACE
    _run_cells(ran)
    _answer(answered)
    before = ran.read_bytes(), answered.read_bytes()
    _publish(course, START, _chapter("Start here", run=7, python="3.11.9"))
    _publish(course, RACE, _chapter("The takeover race", run=7, python="3.11.9"))
    report = copies.ensure_copies(course)
    assert report.kept == [START, RACE] and not report.refreshed and not report.beside
    assert (ran.read_bytes(), answered.read_bytes()) == before


def test_an_edited_copy_is_kept_and_the_update_put_beside_it(course: Path):
    copies.ensure_copies(course)
    mine = course / copies.LEARNER_DIR / RACE
    _answer(mine)
    _publish(course, RACE, _chapter("The takeover race, revised"))
    report = copies.ensure_copies(course)
    beside = course / copies.LEARNER_DIR / "26b-takeover-race.updated.ipynb"
    assert report.kept == [START, RACE] and not report.refreshed
    assert report.beside == [copies.Beside(RACE, beside.name, changed=True)]
    # the learner's, as it was
    assert _sources(notebook_cells.read(mine))[1] == "guess = 'A'  # mine\n"
    assert notebook_cells.read(beside) == _made_from(course, RACE)
    assert ("26b: you changed your copy; the updated notebook is beside it as "
            "26b-takeover-race.updated.ipynb") in copies.describe(report, course).splitlines()
    assert copies.source_notebooks(course) == [course / "notebooks" / START,
                                               course / "notebooks" / RACE]
    again = copies.ensure_copies(course)  # said once, not at every start
    assert not again.beside and notebook_cells.read(beside) == _made_from(course, RACE)


def _edited_then_updated(course: Path) -> Path:
    """Copies made, the race copy answered by the learner, then the race notebook updated
    and the copies brought up to date (the update goes beside it); the learner folder."""
    copies.ensure_copies(course)
    folder = course / copies.LEARNER_DIR
    _answer(folder / RACE)
    _publish(course, RACE, _chapter("The takeover race, revised"))
    copies.ensure_copies(course)
    return folder


def test_a_second_update_replaces_the_notebook_beside_the_copy(course: Path):
    folder = _edited_then_updated(course)
    _publish(course, RACE, _chapter("The takeover race, revised again"))
    report = copies.ensure_copies(course)
    assert [b.file for b in report.beside] == [copies.updated_name(RACE)]
    assert sorted(p.name for p in folder.iterdir()) == [
        copies.MANIFEST, START, RACE, copies.updated_name(RACE)]  # one beside, no clutter
    assert _sources(notebook_cells.read(folder / copies.updated_name(RACE)))[0] == (
        "# The takeover race, revised again\n")


def test_a_notebook_beside_a_copy_that_the_learner_edited_is_put_aside(course: Path):
    folder = _edited_then_updated(course)
    _answer(folder / copies.updated_name(RACE), "guess = 'B'  # worked in the new one\n")
    _publish(course, RACE, _chapter("The takeover race, revised again"))
    report = copies.ensure_copies(course)
    assert len(report.replaced) == 1
    assert _sources(notebook_cells.read(folder / report.replaced[0]))[1] == (
        "guess = 'B'  # worked in the new one\n")
    assert _sources(notebook_cells.read(folder / copies.updated_name(RACE)))[0] == (
        "# The takeover race, revised again\n")


def test_copies_made_before_updates_were_followed_are_never_overwritten(course: Path):
    """No record: a copy is only taken for unmodified when it equals the copy the current
    notebook makes; any other is kept, the current notebook beside it."""
    folder = course / copies.LEARNER_DIR
    folder.mkdir()
    copies.write_notebook(folder / START,
                          copies.learner_copy(notebook_cells.read(course / "notebooks" / START)))
    copies.write_notebook(folder / RACE, copies.learner_copy(_chapter("The old race")))
    _run_cells(folder / START)
    before = (folder / RACE).read_bytes()
    report = copies.ensure_copies(course)
    assert report.kept == [START, RACE] and not report.refreshed
    assert report.beside == [copies.Beside(RACE, copies.updated_name(RACE), changed=False)]
    assert (folder / RACE).read_bytes() == before
    assert ("26b: your copy dates from before the lab followed updates and differs from the "
            "current notebook, so it is kept; the current notebook is beside it as "
            "26b-takeover-race.updated.ipynb") in copies.describe(report, course)
    _publish(course, START, _chapter("Start here, revised"))
    _publish(course, RACE, _chapter("The takeover race, revised"))
    report = copies.ensure_copies(course)
    assert report.refreshed == [START]  # 00 was the current notebook's copy: now followed
    assert (folder / RACE).read_bytes() == before  # 26b is still not known to be unmodified
    assert [b.changed for b in report.beside] == [False]


def test_a_lost_or_broken_record_overwrites_nothing(course: Path):
    copies.ensure_copies(course)
    folder = course / copies.LEARNER_DIR
    (folder / START).write_text('{"my": "work"}', encoding="utf-8")
    _answer(folder / RACE)
    (folder / copies.MANIFEST).write_text("{not json", encoding="utf-8")
    _publish(course, START, _chapter("Start here, revised"))
    _publish(course, RACE, _chapter("The takeover race, revised"))
    report = copies.ensure_copies(course)
    assert report.kept == [START, RACE] and not report.refreshed
    assert (folder / START).read_text(encoding="utf-8") == '{"my": "work"}'
    assert _sources(notebook_cells.read(folder / RACE))[1] == "guess = 'A'  # mine\n"
    assert json.loads((folder / copies.MANIFEST).read_text())["format"] == 1  # rewritten


def test_the_chinese_edition_follows_its_own_notebooks(course: Path):
    copies.ensure_copies(course)
    copies.ensure_copies(course, "zh")
    zh = course / copies.LEARNER_DIR / "zh"
    _answer(zh / START)
    _publish(course, START, _chapter("从这里开始（修订）"), "zh")
    _publish(course, RACE, _chapter("接手竞态"), "zh")  # its 中文 edition, written at last
    report = copies.ensure_copies(course, "zh")
    assert report.refreshed == [RACE]
    assert notebook_cells.read(zh / RACE) == _made_from(course, RACE, "zh")
    assert report.beside == [copies.Beside(START, copies.updated_name(START))]
    assert notebook_cells.read(zh / copies.updated_name(START)) == _made_from(course, START, "zh")
    assert ("00：你改动过自己的副本；更新后的笔记本放在它旁边，文件名是 "
            "00-start-here.updated.ipynb") in copies.describe(report, course, "zh")
    english = copies.ensure_copies(course)  # the English copies follow the English only
    assert english.kept == [START, RACE] and not english.refreshed and not english.beside
    assert (zh / copies.MANIFEST).exists() and (course / copies.LEARNER_DIR / copies.MANIFEST
                                                ).exists()


def test_a_fresh_copy_is_recorded_and_follows_updates(course: Path):
    folder = _edited_then_updated(course)
    report = copies.fresh_copies(course, ["26b"])
    assert report.created == [RACE] and len(report.replaced) == 1
    assert _sources(notebook_cells.read(folder / report.replaced[0]))[1] == "guess = 'A'  # mine\n"
    assert notebook_cells.read(folder / RACE) == _made_from(course, RACE)
    assert not (folder / copies.updated_name(RACE)).exists()  # taken, so no longer beside
    _run_cells(folder / RACE)
    _publish(course, RACE, _chapter("The takeover race, revised again"))
    assert copies.ensure_copies(course).refreshed == [RACE]


def test_a_failed_write_leaves_no_file_half_written(tmp_path: Path):
    copies.write_notebook(tmp_path / RACE, _chapter("The takeover race"))
    before = (tmp_path / RACE).read_bytes()
    with pytest.raises(TypeError):
        copies.write_notebook(tmp_path / RACE, {"cells": [object()]})
    (tmp_path / START).mkdir()  # a rename onto a folder fails after the text is written
    with pytest.raises(OSError):
        copies.write_notebook(tmp_path / START, _chapter("Start here"))
    assert (tmp_path / RACE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [START, RACE]  # no temporary left


def test_fresh_from_a_cell_works_in_the_lab_root_it_runs_in(tmp_path, monkeypatch):
    """On a hub a kernel runs in `~/teamdesk-lab/my-notebooks/` (links to the shared,
    read-only repository beside it): `fresh()` must replace the learner's copy there, not
    write into the repository the module was installed from."""
    from devkit.copies import LEARNER_DIR, fresh, lab_root

    repo = Path(__file__).resolve().parents[2]
    root = tmp_path / "teamdesk-lab"
    (root / LEARNER_DIR / "zh").mkdir(parents=True)
    (root / "notebooks").symlink_to(repo / "notebooks")
    assert lab_root(root / LEARNER_DIR / "zh") == root
    assert lab_root(root / LEARNER_DIR) == root
    assert lab_root(tmp_path) == repo  # outside any lab root: the checkout
    monkeypatch.chdir(root / LEARNER_DIR)
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    fresh("26b")
    assert (root / LEARNER_DIR / "26b-takeover-race.ipynb").is_file()
