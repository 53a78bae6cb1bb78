"""labs.learn: the predict/reveal helpers the notebooks use."""

import re
from pathlib import Path

from devkit import notebook_cells as nb
from labs import learn
from labs.learn import reveal
from labs.messages import made

ROOT = Path(__file__).resolve().parents[2]


def test_reveal_compares_kindly(capsys):
    assert reveal(" Lease Lost ", "lease lost") is True
    assert reveal([2, 1], (1, 2)) is True
    assert reveal(3, 4) is False
    assert reveal(None, "COMPLETED", why="P1: a finished task is skipped") is False
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Right: 'lease lost'."
    assert out[2] == "You guessed 3; what happened: 4."
    assert out[3].startswith("No guess written") and out[4] == "P1: a finished task is skipped"


def test_a_word_answer_is_taken_in_either_language_in_the_chinese_edition(monkeypatch, capsys):
    """A prediction asking for words takes the English or the catalogue's Chinese in the
    Chinese edition, and shows what happened in Chinese; the English edition takes the
    English only. Identifiers (statuses) are not translated."""
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert reveal("两个都有", "both") and reveal(" Both ", "both") and reveal("跳过", "skip it")
    assert reveal("没有结果写在较新的租约之上", "no result written over a newer lease")
    assert not reveal("都有", "nothing") and reveal("FAILED", "FAILED")
    reveal(None, "fails it for good")
    out = capsys.readouterr().out
    assert "猜对了：'两个都有'" in out and "'永久判失败'" in out
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert not reveal("两个都有", "both")
    assert "You guessed '两个都有'; what happened: 'both'." in capsys.readouterr().out


def _choices(source: str) -> list[str]:
    line = next((ln for ln in source.splitlines() if re.search(r"#\s*你的猜测", ln)), "")
    return re.findall(r'"([^"]+)"', re.split(r"写英文|英文名", line, maxsplit=1)[0])


def test_the_chinese_choices_of_a_prediction_are_taken_by_its_reveal(monkeypatch):
    """Each word a 中文 predict cell offers (before its note on English) is one of the
    English choices, or a Chinese form of one (`learn.forms`), so a learner who writes what
    the page offers is judged on the answer, not the language."""
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    checked = 0
    for path in sorted((ROOT / "notebooks" / "zh").glob("*.ipynb")):
        english = nb.cells(ROOT / "notebooks" / path.name)
        for en, zh in zip(english, nb.cells(path), strict=True):
            if "predict" not in nb.tags(zh):
                continue
            offered = _choices(nb.source(zh))
            line = next((ln for ln in nb.source(en).splitlines()
                         if "your guess" in ln), "")
            options = [o for o in re.findall(r'"([^"]+)"', line) if "{" not in o]
            for word in offered:
                if "{" in word or word.startswith(("v4", "B-era")):
                    continue
                assert word in options or any(
                    word in learn.forms(o) for o in options), (path.name, word, options)
                checked += 1
    assert checked >= 20


def test_every_word_answer_has_its_chinese(monkeypatch):
    """`WORDS` and the chaos invariant names each have Chinese forms in the catalogue (the
    catalogue test checks they are current)."""
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    lacking = [c.en for c in made() if c.key.startswith("answer.")
               and learn.forms(c.en) == [c.en]]
    assert not lacking


def test_every_word_answer_is_one_a_notebook_asks_for():
    """No stale entry in `WORDS`: each is a quoted choice in some notebook's code (a
    predict cell's options, an exercise's starter), so its Chinese form is one a learner
    can meet."""
    code = " ".join(nb.source(c) for path in (ROOT / "notebooks").glob("[0-9]*.ipynb")
                    for c in nb.cells(path) if c["cell_type"] == "code")
    assert [w for w in learn.WORDS if f'"{w}"' not in code] == []
