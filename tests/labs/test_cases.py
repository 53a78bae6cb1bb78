"""The diagnosis judge (`labs.cases`): right only when both the cause and a rule are."""

from __future__ import annotations

import pandas as pd
import pytest

from labs.cases import Case, CaseSpec, spec


async def _never(lab):  # pragma: no cover - the judge needs no staged world
    raise AssertionError


SPEC = CaseSpec("demo", "demo case", _never,
                {"late": "a late write", "lost": "a lost job", "slow": "a slow scan"},
                cause="late", rules=frozenset({"P3", "P5"}), why="the lease refused it")
CASE = Case(SPEC, "T1", pd.DataFrame(), pd.DataFrame())


@pytest.mark.parametrize(("cause", "rule", "ok", "says"), [
    (None, None, False, "not attempted"), ("late", None, False, "not attempted"),
    ("nope", "P5", False, "not one of the choices"), ("lost", "P5", False, "not 'lost'"),
    ("late", "D4", False, "not the rule"), ("late", " p5 ", True, "✓"),
    ("late", "P3", True, "the lease refused it")])
def test_the_judge_needs_both_the_cause_and_a_rule(cause, rule, ok, says):
    verdict = CASE.judge(cause=cause, rule=rule)
    assert verdict.ok is ok and says in str(verdict), str(verdict)


def test_a_case_needs_its_cause_among_three_choices_and_a_known_name():
    with pytest.raises(ValueError, match="≥ 3 choices"):
        CaseSpec("x", "x", _never, {"a": "", "b": ""}, "a", frozenset({"P1"}), "")
    with pytest.raises(ValueError, match="≥ 3 choices"):
        CaseSpec("x", "x", _never, {"a": "", "b": "", "c": ""}, "d", frozenset({"P1"}), "")
    with pytest.raises(KeyError, match="no case 'nope'"):
        spec("nope")


def test_a_case_speaks_the_editions_language(monkeypatch):
    """The words are English in the scene module and Chinese in the harness catalogue,
    under keys made from the case's name; the book's name of a case is its Chinese in both
    editions."""
    case = Case(spec("fault-a"), "T1", pd.DataFrame(), pd.DataFrame())
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert case.choices["takeover"].startswith("一个更新的认领（E2）接手了这一轮")
    assert case.spec.word("title") == "故障 A：旧执行者返回，却没有报告 100"
    assert str(case.judge(cause="takeover", rule="P3")).startswith("✓ 一个更新的认领")
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert case.spec.word("title") == "故障 A: the old executor returned, but never reported 100"
    assert str(case.judge(cause="takeover", rule="P3")).startswith("✓ a newer claim (E2)")
    assert ("case.fault-a.choice.takeover", case.spec.choices["takeover"]) in \
        case.spec.messages()


def test_a_cases_words_place_no_field_but_the_books_name():
    with pytest.raises(ValueError, match=r"case\.x\.why may place only \{book\}"):
        CaseSpec("x", "x", _never, {"a": "", "b": "", "c": ""}, "a", frozenset({"P1"}),
                 "see {there}")
