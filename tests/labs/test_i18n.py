"""The edition's language for what the lab prints (devkit.i18n): chosen by TEAMDESK_LANG,
else by the notebook's folder (`zh` for the 中文 edition), else English."""

from __future__ import annotations

import pytest

from devkit import i18n
from labs import learn


@pytest.mark.parametrize(("env", "folder", "expected"), [
    ("", "notebooks", "en"), ("", "zh", "zh"), ("en", "zh", "en"), ("zh", "notebooks", "zh"),
    ("ZH", "x", "zh"), ("fr", "zh", "zh"), ("fr", "x", "en")])
def test_the_language_comes_from_the_env_then_the_folder(env, folder, expected, tmp_path,
                                                         monkeypatch):
    (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / folder)
    monkeypatch.setenv("TEAMDESK_LANG", env)
    assert i18n.lang() == expected


def test_feedback_speaks_the_editions_language(monkeypatch, capsys):
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert learn.reveal(2, 2) and not learn.reveal(None, 1)
    out = capsys.readouterr().out
    assert "猜对了：2" in out and "没有写猜测" in out
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    learn.reveal(1, 2)
    assert "You guessed 1; what happened: 2." in capsys.readouterr().out


@pytest.mark.parametrize(("env", "expected"), [
    ({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LANG": "en_US.UTF-8"}, "en"),
    ({"LC_ALL": "zh_TW.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),
    ({"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}, "zh"), ({"LANG": "de_DE.UTF-8"}, "en")])
def test_the_lab_opens_the_edition_of_the_system_locale(env, expected, monkeypatch):
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert i18n.system_lang() == expected


def test_a_board_reads_in_the_editions_language_but_keeps_its_values(monkeypatch):
    """Display only: the 中文 edition shows Chinese headers and verdicts, while the frame
    keeps the English values a check cell (the same code in both editions) asserts on."""
    import pandas as pd

    from labs import tables

    shown = tables.show(pd.DataFrame({"task_id": ["T1"], "status": [None],
                                      "verdict": [tables.QUEUE_BEHIND]}))
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert "队列落后" in repr(shown) and "判定" in shown._repr_html_()
    assert shown["verdict"].tolist() == ["queue behind"] and "WAITING" not in repr(shown)
    assert set(tables.VERDICTS) <= set(tables.verdict_words("zh"))
    assert all(key == word for key, word in tables.verdict_words("en").items())
    assert all(key == word for key, word in tables.headers("en").items())
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert "queue behind" in repr(shown) and "判定" not in repr(shown)


async def test_a_bounded_wait_that_ran_out_says_so_in_the_editions_language(monkeypatch):
    """A gate that is never reached: the error is one line in the edition's language."""
    from labs.gates import Gate, GateTimeout

    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    gate = Gate("claim.after", timeout=0.01)
    try:
        with pytest.raises(GateTimeout, match="秒内一直没有执行者到达"):
            await gate.reached()
    finally:
        gate.close()


def test_say_speaks_the_language_it_is_told_over_the_editions(monkeypatch):
    """The harness's words: the English at the call, the Chinese from its catalogue
    (devkit.i18n; the catalogue itself is checked by tests/unit/test_harness_catalogue.py)."""
    from labs.i18n import listing, say

    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert say("tables.column.progress", "progress") == "进度"
    assert say("tables.column.progress", "progress", lang="en") == "progress"
    assert listing(["a", "b", "c"]) == "a、b、c"
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert say("tables.column.progress", "progress", lang="zh") == "进度"
    assert say("tables.column.progress", "progress", lang=None) == "progress"
    assert listing(["a", "b", "c"]) == "a, b, c"
    assert listing(["a", "b"], conjunction=True) == "a and b" and listing([]) == ""
