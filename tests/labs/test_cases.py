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
    spec_zh = CaseSpec("demo", "demo case", _never,
                       {"late": "a late write", "lost": "a lost job", "slow": "a slow scan"},
                       cause="late", rules=frozenset({"P3"}), why="refused",
                       zh={"title": "示例", "why": "被拒绝了",
                           "choices": {"late": "迟到的写入", "lost": "丢失的任务",
                                       "slow": "扫描太慢"}})
    case = Case(spec_zh, "T1", pd.DataFrame(), pd.DataFrame())
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert case.choices["late"] == "迟到的写入"
    assert str(case.judge(cause="late", rule="P3")) == "✓ 迟到的写入 — 被拒绝了"
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert str(case.judge(cause="late", rule="P3")) == "✓ a late write — refused"
    with pytest.raises(ValueError, match="same keys"):
        CaseSpec("x", "x", _never, {"a": "", "b": "", "c": ""}, "a", frozenset({"P1"}), "",
                 zh={"choices": {"a": ""}})
