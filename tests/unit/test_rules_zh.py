"""RULES.zh-CN.md, the 中文 companion of RULES.md, and the rules tools in the edition's
language (`devkit.rules`, `teamdesk rules --lang`). The checks against the real files look
the rules up by id in code only, and the synthetic tree uses made-up ids (A1, B2), so this
file cites no real rule by accident: it proves the translation, not the rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devkit import cli, rules
from devkit.i18n import HAN, columns

ROOT = Path(__file__).resolve().parents[2]
#: The rule the checks below show in both languages (a string, not a citation).
SHOWN = "P3"

MINI_EN = """\
# rules

## Group A

- **A1** *First* — the first rule. *Why:* because.

## Group B

- **B2** *Second* (ours) — the second rule. *Why:* two.
"""

MINI_ZH = """\
# 规则

## 甲组

- **A1** *第一条* — 第一条规则。 *为什么：* 因为如此。

## 乙组

- **B2** *第二条* (ours) — 第二条规则。 *为什么：* 二。
"""

_CODE_SPAN = re.compile(r"`[^`]*`")
_CJK = re.compile(f"[{HAN}]")
_LATIN = re.compile(r"[A-Za-z]")


@pytest.fixture(autouse=True)
def _english_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test chooses its language; none inherits the shell's TEAMDESK_LANG."""
    monkeypatch.delenv("TEAMDESK_LANG", raising=False)


@pytest.fixture(scope="module")
def both() -> dict[str, dict[str, rules.RuleReport]]:
    """The project's index in each language, computed once for the module."""
    return {lang: rules.index(ROOT, lang=lang) for lang in ("en", "zh")}


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    (tmp_path / "RULES.md").write_text(MINI_EN, encoding="utf-8")
    (tmp_path / "RULES.zh-CN.md").write_text(MINI_ZH, encoding="utf-8")
    (tmp_path / "teamdesk").mkdir()
    (tmp_path / "teamdesk" / "store.py").write_text('def save():\n    """Keeps A1."""\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_store.py").write_text('def test_save():\n    """A1."""\n')
    return tmp_path


def _mostly_chinese(text: str) -> bool:
    """More CJK characters than Latin letters once the `code spans` are taken out."""
    prose = _CODE_SPAN.sub("", text)
    return len(_CJK.findall(prose)) > len(_LATIN.findall(prose))


def _sections(path: Path) -> list[tuple[int, list[str]]]:
    """(heading level, ids of the entries under it) for each heading, in file order."""
    out: list[tuple[int, list[str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^(#{1,6}) ", line):
            out.append((len(m[1]), []))
        elif m := re.match(r"^- \*\*([A-Z]\d{1,2})\*\*", line):
            out[-1][1].append(m[1])
    return out


# ---------------------------------------------------------------- the two files


def test_the_translation_has_the_same_ids_order_tags_and_sections():
    en = rules.load_rules(ROOT, lang="en")
    zh = rules.load_rules(ROOT, lang="zh")
    assert rules.rules_path(ROOT, "zh").name == "RULES.zh-CN.md"
    assert list(zh) == list(en) and len(zh) == 46
    assert [r.tags for r in zh.values()] == [r.tags for r in en.values()]
    assert _sections(ROOT / "RULES.zh-CN.md") == _sections(ROOT / "RULES.md")
    # The same grouping, each group under its own translated heading.
    groups = {en[i].group: zh[i].group for i in en}
    assert len(set(groups.values())) == len(groups)
    assert all(en[i].group != zh[i].group for i in en)


def test_every_chinese_entry_is_written_in_chinese():
    zh = rules.load_rules(ROOT, lang="zh")
    en = rules.load_rules(ROOT, lang="en")
    for rule_id, r in zh.items():
        for part in ("title", "statement", "why"):
            text = getattr(r, part)
            assert _mostly_chinese(text), (rule_id, part, text)
            assert text != getattr(en[rule_id], part), (rule_id, part)
        # The code the English entry quotes is quoted unchanged.
        assert set(_CODE_SPAN.findall(r.statement)) >= set(_CODE_SPAN.findall(
            en[rule_id].statement)) - set(_CODE_SPAN.findall(r.title)), rule_id


def test_the_two_files_point_at_each_other():
    assert "RULES.zh-CN.md" in (ROOT / "RULES.md").read_text(encoding="utf-8")
    assert "(RULES.md)" in (ROOT / "RULES.zh-CN.md").read_text(encoding="utf-8")
    assert "(RULES.zh-CN.md)" in (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------- explain


def test_explain_in_chinese_shows_the_chinese_text_at_the_same_places(both):
    zh_rule = rules.load_rules(ROOT, lang="zh")[SHOWN]
    report = rules.explain(SHOWN, root=ROOT, lang="zh")
    english = both["en"][SHOWN]
    assert report.rule == zh_rule
    text = str(report)
    assert text.splitlines()[0] == f"{SHOWN} — {zh_rule.title}"
    assert zh_rule.statement in text and f"为什么：{zh_rule.why}" in text
    assert f"代码 ({len(english.code)}):" in text and f"测试 ({len(english.tests)}):" in text
    assert f"笔记本单元格 ({len(english.notebooks)}):" in text
    assert "Why:" not in text
    assert (report.code, report.tests, report.notebooks) == (
        english.code, english.tests, english.notebooks)
    assert report.code and report.tests and report.notebooks
    md = report._repr_markdown_()
    assert f"*为什么：*{zh_rule.why}" in md and "- 测试 (" in md


def test_every_rule_has_the_same_places_in_both_languages(both):
    for rule_id, english in both["en"].items():
        chinese = both["zh"][rule_id]
        assert (chinese.code, chinese.tests, chinese.notebooks) == (
            english.code, english.tests, english.notebooks), rule_id


def test_the_edition_chooses_the_language_by_default(monkeypatch, tmp_path: Path):
    zh_rule = rules.load_rules(ROOT, lang="zh")[SHOWN]
    en_rule = rules.load_rules(ROOT, lang="en")[SHOWN]
    assert rules.explain(SHOWN).rule == en_rule
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    report = rules.explain(SHOWN)
    assert report.rule == zh_rule and "为什么：" in str(report)
    assert rules.explain(SHOWN, lang="en").rule == en_rule  # an explicit lang wins
    # A kernel started in a notebook folder named zh (the 中文 edition) speaks Chinese.
    monkeypatch.delenv("TEAMDESK_LANG")
    (tmp_path / "zh").mkdir()
    monkeypatch.chdir(tmp_path / "zh")
    assert rules.explain(SHOWN).rule == zh_rule


def test_the_parser_reads_the_chinese_marker_and_names_the_file_it_read(mini: Path):
    loaded = rules.load_rules(mini, lang="zh")
    assert loaded["A1"] == rules.Rule("A1", "第一条", "第一条规则。", "因为如此。", "甲组")
    assert loaded["B2"].tags == ("ours",)
    (mini / "RULES.zh-CN.md").write_text("- **A1** 没有标题\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"RULES\.zh-CN\.md:1: not a rule entry"):
        rules.load_rules(mini, lang="zh")
    with pytest.raises(ValueError, match="unknown language"):
        rules.load_rules(mini, lang="fr")


def test_a_tree_without_the_translation_keeps_its_rules_in_english(mini: Path):
    (mini / "RULES.zh-CN.md").unlink()
    report = rules.explain("a1", root=mini, lang="zh")
    assert report.rule.statement == "the first rule."
    assert "测试 (1):" in str(report)


def test_unknown_id_in_chinese_names_the_valid_ones(mini: Path):
    with pytest.raises(rules.UnknownRule, match="没有这样的规则编号：Z9；有效的编号：A1 B2"):
        rules.explain("Z9", root=mini, lang="zh")


# ---------------------------------------------------------------- teamdesk rules --lang


def test_rules_command_speaks_chinese_with_lang_zh(capsys):
    zh_rule = rules.load_rules(ROOT, lang="zh")[SHOWN]
    assert cli.main(["rules", SHOWN, "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{SHOWN} — {zh_rule.title}"
    assert zh_rule.statement in out and "为什么：" in out
    assert "代码 (" in out and "测试 (" in out and "笔记本单元格 (" in out
    assert cli.main(["rules", SHOWN, "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert rules.load_rules(ROOT, lang="en")[SHOWN].statement in out and "Why:" in out


def test_rules_command_follows_the_edition_and_words_its_table(mini: Path, monkeypatch,
                                                               capsys):
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert cli.main(["rules", "--root", str(mini)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["编号", "标题", "代码", "测试", "笔记本单元格"]
    assert re.search(r"^B2\s+第二条 \(ours\)\s+0\s+0\s+0\s*$", out, re.MULTILINE), out
    assert "没有任何测试引用的规则有 1 条：B2" in out
    # Columns line up in a terminal: a 中文 character takes two columns.
    header = columns(lines[0][:lines[0].index("代码")])
    for row in lines[1:3]:
        start = re.search(r"\s(\d+)\s+\d+\s+\d+\s*$", row).start(1)
        assert columns(row[:start]) == header, lines
    (mini / "tests" / "test_more.py").write_text('def test_two():\n    """B2."""\n')
    assert cli.main(["rules", "--root", str(mini), "--lang", "zh"]) == 0
    assert "全部 2 条规则都至少有一个测试引用" in capsys.readouterr().out
    assert cli.main(["rules", "--root", str(mini), "--lang", "en"]) == 0
    assert "every one of the 2 rules is cited by at least one test" in capsys.readouterr().out
