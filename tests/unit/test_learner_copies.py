"""The learner's copies (`devkit.copies`) and the lab's read-only repository notebooks
(`devkit.contents`): no answer on screen before a cell runs, the learner's work never
overwritten, the regression source never written by a lab session."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from devkit import copies

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks",
                    ignore=shutil.ignore_patterns("*.py", "*.cfg", "*.md"))
    return tmp_path


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_copy_has_no_answers_but_keeps_code_tags_and_hidden_sources(project: Path):
    report = copies.ensure_copies(project)
    sources = copies.source_notebooks(project)
    assert report.created == [s.name for s in sources] and len(sources) == 11
    stored = sum(len(c.get("outputs", [])) for s in sources for c in _nb(s)["cells"])
    assert stored > 100  # the repository's copies do carry answers
    for source in sources:
        original, copy = _nb(source), _nb(project / copies.LEARNER_DIR / source.name)
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
    assert _nb(mine)["cells"]  # a real notebook again
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
        assert [c["source"] for c in _nb(zh_dir / name)["cells"]] == [
            c["source"] for c in copies.learner_copy(_nb(source))["cells"]]
    zh_text = json.dumps(_nb(zh_dir / "00-start-here.ipynb"), ensure_ascii=False)
    en_text = json.dumps(_nb(project / copies.LEARNER_DIR / "00-start-here.ipynb"))
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
