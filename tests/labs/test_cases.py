"""The diagnosis judge (`labs.cases`): right only when both the cause and a rule are, and a
wrong cause is answered by what in that case's evidence contradicts it."""

from __future__ import annotations

import pandas as pd
import pytest

from labs.cases import Case, CaseSpec, spec


async def _never(lab):  # pragma: no cover - the judge needs no staged world
    raise AssertionError


SPEC = CaseSpec("demo", "demo case", _never,
                {"late": "a late write", "lost": "a lost job", "slow": "a slow scan"},
                cause="late", rules=frozenset({"P3", "P5"}), why="the lease refused it",
                refutes={"lost": "the job is on the board", "slow": "the scan ran just now"})
CASE = Case(SPEC, "T1", pd.DataFrame(), pd.DataFrame())


@pytest.mark.parametrize(("cause", "rule", "ok", "says"), [
    (None, None, False, "not attempted"), ("late", None, False, "not attempted"),
    ("nope", "P5", False, "not one of the choices"),
    ("lost", "P5", False, "not 'lost': the job is on the board"),
    ("slow", "P5", False, "not 'slow': the scan ran just now"),
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
    with pytest.raises(ValueError, match="each wrong cause"):
        CaseSpec("x", "x", _never, {"a": "", "b": "", "c": ""}, "a", frozenset({"P1"}), "",
                 refutes={"b": "…"})


def test_a_case_speaks_the_editions_language(monkeypatch):
    """The words are English in the scene module and Chinese in the harness catalogue,
    under keys made from the case's name; the book's name of a case is its Chinese in both
    editions."""
    case = Case(spec("fault-a"), "T1", pd.DataFrame(), pd.DataFrame())
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert case.choices["takeover"] == "被更新的认领接手了"
    assert case.spec.word("title") == "故障 A：旧执行者返回，却没有报告 100"
    assert str(case.judge(cause="takeover", rule="P3")).startswith("✓ 被更新的认领接手了")
    assert "task.lease_lost" in str(case.judge(cause="crashed", rule="P3"))
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert case.spec.word("title") == "故障 A: the old executor returned, but never reported 100"
    assert str(case.judge(cause="takeover", rule="P3")).startswith("✓ taken over by a newer")
    assert ("case.fault-a.choice.takeover", case.spec.choices["takeover"]) in \
        case.spec.messages()


def test_a_cases_words_place_no_field_but_the_books_name():
    with pytest.raises(ValueError, match=r"case\.x\.why may place only \{book\}"):
        CaseSpec("x", "x", _never, {"a": "", "b": "", "c": ""}, "a", frozenset({"P1"}),
                 "see {there}", refutes={"b": "", "c": ""})


def test_every_case_answers_each_wrong_cause_with_its_own_evidence():
    """Diagnosis as reasoning: the choices are short labels that do not explain themselves,
    and each wrong cause of each case gets a sentence of its own about that case's evidence
    (not one sentence for every case)."""
    from labs.cases import declared

    sentences = []
    for case_spec in declared().values():
        case = Case(case_spec, "T1", pd.DataFrame(), pd.DataFrame())
        assert all(len(label) <= 40 for label in case_spec.choices.values()), case_spec.name
        for wrong in set(case_spec.choices) - {case_spec.cause}:
            verdict = str(case.judge(cause=wrong, rule=min(case_spec.rules)))
            assert case_spec.refutes[wrong] in verdict, (case_spec.name, wrong, verdict)
            sentences.append(case_spec.refutes[wrong])
    assert len(sentences) >= 24
    assert len(set(sentences)) >= len(sentences) - 2  # two "one claim only" are alike
