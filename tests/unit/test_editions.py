"""Two editions from one source (devkit.editions): the 中文 edition is the English notebook
with its catalogue's translations, and nothing else — same cells, ids, tags, order and
code; every prose cell translated, from the English as it is now; committed as built."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from devkit import editions, i18n, notebook_cells

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
#: Notebooks whose 中文 edition is not written yet. It only shrinks: a new notebook gets
#: its catalogue (`teamdesk editions --draft NAME`) with its English.
PENDING: set[str] = set()
CATALOGUED = editions.catalogued(ROOT)
CJK = re.compile(f"[{i18n.CJK}]")
LATIN = re.compile(r"[A-Za-z]")


def test_every_notebook_has_its_catalogue_or_is_pending():
    names = {p.stem for p in SOURCES}
    assert set(CATALOGUED) | PENDING == names, "a notebook is neither translated nor pending"
    assert not set(CATALOGUED) & PENDING, "translated notebooks must leave PENDING"


@pytest.mark.parametrize("name", CATALOGUED)
def test_the_edition_is_whole_and_committed_as_built(name):
    built = editions.build_one(ROOT, name)
    assert not built.problems, f"{name}: {built.problems}"
    committed = ROOT / "notebooks" / "zh" / f"{name}.ipynb"
    assert committed.exists(), f"run `teamdesk editions` to build {committed.name}"
    assert notebook_cells.read(committed) == built.notebook, \
        f"{committed.name} is not what the build makes"


@pytest.mark.parametrize("name", CATALOGUED)
def test_the_editions_have_the_same_cells_tags_and_code(name):
    en = notebook_cells.cells(ROOT / "notebooks" / f"{name}.ipynb")
    zh = notebook_cells.cells(ROOT / "notebooks" / "zh" / f"{name}.ipynb")
    assert [(c["id"], c["cell_type"], notebook_cells.tags(c)) for c in en] == \
        [(c["id"], c["cell_type"], notebook_cells.tags(c)) for c in zh]
    for a, b in zip(en, zh, strict=True):
        if a["cell_type"] == "code":
            assert editions.code_skeleton(notebook_cells.source(a)) == \
                editions.code_skeleton(notebook_cells.source(b)), a["id"]


def _prose(text: str) -> str:
    """A cell's prose: without code (fenced and inline), links' targets and HTML."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"<[^>]+>", "", text)


@pytest.mark.parametrize("name", CATALOGUED)
def test_the_chinese_editions_prose_is_chinese(name):
    """CJK characters outnumber Latin letters in every prose cell (code and links aside)."""
    for cell in notebook_cells.cells(ROOT / "notebooks" / "zh" / f"{name}.ipynb"):
        if cell["cell_type"] != "markdown":
            continue
        prose = _prose(notebook_cells.source(cell))
        cjk, latin = len(CJK.findall(prose)), len(LATIN.findall(prose))
        assert cjk > latin, f"{name} cell {cell['id']}: {cjk} CJK against {latin} Latin"


SOURCE_NB = {"metadata": {}, "nbformat": 4, "nbformat_minor": 5, "cells": [
    {"id": "m1", "cell_type": "markdown", "metadata": {}, "source": ["## Title\n", "Look."]},
    {"id": "c1", "cell_type": "code", "metadata": {"tags": ["predict"]}, "outputs": [],
     "execution_count": 3, "source": ["# step: go\n", "x = 1  # the answer\n"]},
    {"id": "c2", "cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 4,
     "source": ["# contract: P3\n", "assert x"]}]}


def _catalogue(**texts: str) -> dict:
    fps = {c["id"]: editions.fingerprint(notebook_cells.source(c)) for c in SOURCE_NB["cells"]}
    return editions.parse_catalogue("header\n" + "".join(
        f"<!-- cell {cid} en {fps.get(cid, '00000000')} -->\n{t}\n" for cid, t in texts.items()))


def test_a_whole_catalogue_builds_the_edition_without_outputs():
    built = editions.build(SOURCE_NB, _catalogue(m1="## 标题\n看。",
                                                 c1="# step: go\nx = 1  # 答案\n"))
    assert not built.problems, built.problems
    cells = built.notebook["cells"]
    assert notebook_cells.source(cells[0]) == "## 标题\n看。"
    assert "答案" in notebook_cells.source(cells[1]) and cells[1]["outputs"] == []
    assert cells[1]["execution_count"] is None and cells[1]["metadata"]["tags"] == ["predict"]
    assert cells[2]["source"] == SOURCE_NB["cells"][2]["source"]  # rule ids only: as is
    assert built.notebook["metadata"]["teamdesk"]["edition"] == "zh"


@pytest.mark.parametrize(("texts", "problem"), [
    ({"m1": "## 标题"}, "no translation: c1"),
    ({"m1": "## 标题", "c1": "# step: go\nx = 2  # 答案\n"}, "changes the code: c1"),
    ({"m1": "## 标题", "c1": "# step: 走\nx = 1  # 答案\n"}, "changes the code: c1"),
    ({"m1": "## 标题", "c1": "# step: go\nx = 1  # 答案\n", "zz": "?"}, "in the source: zz")])
def test_what_keeps_an_edition_from_being_whole_is_named(texts, problem):
    assert any(problem in p for p in editions.build(SOURCE_NB, _catalogue(**texts)).problems)


def test_an_english_cell_changed_after_translation_is_stale():
    changed = json.loads(json.dumps(SOURCE_NB))
    catalogue = _catalogue(m1="## 标题", c1="# step: go\nx = 1  # 答案\n")
    changed["cells"][0]["source"] = ["## Title\n", "Look again."]
    assert editions.build(changed, catalogue).problems == [
        "English changed since translated: m1"]


def test_draft_keeps_fresh_translations_and_marks_the_rest(tmp_path):
    (tmp_path / "notebooks" / "i18n" / "zh").mkdir(parents=True)
    (tmp_path / "notebooks" / "x.ipynb").write_text(json.dumps(SOURCE_NB), encoding="utf-8")
    cat = tmp_path / "notebooks" / "i18n" / "zh" / "x.md"
    fp = editions.fingerprint("## Title\nLook.")
    cat.write_text(f"<!-- cell m1 en {fp} -->\n## 标题\n", encoding="utf-8")
    entries = editions.parse_catalogue(editions.draft(tmp_path, "x").read_text("utf-8"))
    assert set(entries) == {"m1", "c1"}
    assert (entries["m1"].text, entries["m1"].todo) == ("## 标题", False)
    assert entries["c1"].todo and "the answer" in entries["c1"].text


@pytest.mark.parametrize(("english", "chinese", "same"), [
    ('learn.reveal(g, n, why="The request only wrote the ledger row.")',
     'learn.reveal(g, n, why="申请只写了账本那一行。")', True),
    ('X = "the CSV holds the closed tickets"', 'X = "CSV 恰好是已关闭的工单"', False),
    ('await lab.request_export({"status": ["CLOSED"]})',
     'await lab.request_export({"status": ["已关闭"]})', False),
    ('learn.reveal(g, n, why="x")', 'learn.reveal(g, m, why="x")', False),
    # Printed labels are text: their words may change, their fields (code) may not.
    ('print("the ledger row")', 'print("账本那一行")', True),
    ('print("rows:", n, "| jobs:", j)', 'print("行数：", n, "| job 数：", j)', True),
    ('print(f"{n} of {total} rows")', 'print(f"共 {total} 行中的 {n} 行")', True),
    ('print(f"rows: {n}")', 'print(f"行：{m}")', False),
    ('print(f"rows: {n + 1}")', 'print(f"行：{n + 2}")', False),
    ('print(f"{t:.2f} s")', 'print(f"{t:.1f} 秒")', False),
    ('print("rows:", 3)', 'print("行：", 4)', False),
    ('print("rows:", n)', 'print("行：", m)', False),
    ('print("a", sep=" | ")', 'print("甲", sep="｜")', False),
    ('show("the ledger row")', 'show("账本那一行")', False)])
def test_a_translation_may_change_messages_comments_and_printed_labels_only(english, chinese,
                                                                            same):
    """Messages to the learner (reveal's why=) and the labels a cell prints are prose;
    every other string is code — a filter value, a separator, an argument of any other
    call — and every identifier, number and `{field}` (with its format) must stay as it
    is."""
    assert (editions.code_skeleton(english) == editions.code_skeleton(chinese)) is same


LABELLED_NB = {**SOURCE_NB, "cells": [
    {"id": "p1", "cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1,
     "source": ["print(f\"rows: {n}\")"]}]}


def test_a_cell_with_printed_labels_only_may_be_translated_and_need_not_be(tmp_path):
    """A cell whose only text is what it prints needs no block; a block given is used
    (when it keeps the code), and `draft` keeps it for the translator."""
    fp = editions.fingerprint('print(f"rows: {n}")')
    assert not editions.build(LABELLED_NB, {}).problems
    given = editions.parse_catalogue(f'<!-- cell p1 en {fp} -->\nprint(f"行数：{{n}}")\n')
    built = editions.build(LABELLED_NB, given)
    assert not built.problems and built.notebook["cells"][0]["source"] == ['print(f"行数：{n}")']
    wrong = editions.parse_catalogue(f'<!-- cell p1 en {fp} -->\nprint(f"行数：{{m}}")\n')
    assert editions.build(LABELLED_NB, wrong).problems == ["translation changes the code: p1"]
    (tmp_path / "notebooks" / "i18n" / "zh").mkdir(parents=True)
    (tmp_path / "notebooks" / "x.ipynb").write_text(json.dumps(LABELLED_NB), encoding="utf-8")
    cat = tmp_path / "notebooks" / "i18n" / "zh" / "x.md"
    cat.write_text(f'<!-- cell p1 en {fp} -->\nprint(f"行数：{{n}}")\n', encoding="utf-8")
    kept = editions.parse_catalogue(editions.draft(tmp_path, "x").read_text("utf-8"))
    assert kept["p1"].text == 'print(f"行数：{n}")' and not kept["p1"].todo
