"""`labs.rewind`'s script: which cells a replay runs, read from the notebook's code."""

from __future__ import annotations

import pytest

from labs.rewind import RewindError, before, script_from_cells, step_names


def _code(source: str, *tags: str) -> dict:
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source}


CELLS = [
    _code("import x\nlab = None"),  # set-up: before the start-over cell, never replayed
    _code("lab = await lab.start_over()", "start-over"),
    _code("# step: one\ntask = 1"),
    _code("guess = None", "predict"),
    _code("def helper():\n    return task"),  # read by step three: kept
    _code("shown = task  # a look nobody reads later"),
    _code("_ = reveal(guess, task)"),  # reads a guess: a reveal, never replayed
    _code("# step: two\nx = 2"),
    _code("assert task == 1", "check"),
    _code("# step: three\nhelper()"),
]


def test_a_replay_runs_the_start_over_the_steps_and_only_the_helpers_they_read():
    script = script_from_cells([{"cell_type": "markdown", "source": "# t"}, *CELLS])
    assert [(c.kind, c.name) for c in script] == [
        ("start-over", None), ("step", "one"), ("support", None), ("step", "two"),
        ("step", "three")]
    assert step_names(script) == ["one", "two", "three"]
    assert [c.name or c.source[:3] for c in before(script, "three")] == ["one", "def", "two"]
    assert before(script, "one") == []


def test_an_unknown_step_lists_the_steps():
    with pytest.raises(RewindError, match=r"no step 'four'.*1\. one; 2\. two; 3\. three"):
        before(script_from_cells(CELLS), "four")


def test_a_notebook_without_a_start_over_cell_has_no_script():
    assert script_from_cells([_code("# step: one\nx = 1")]) == []


def test_an_unknown_step_lists_the_steps_in_the_editions_words(monkeypatch):
    """In the 中文 edition the refusal is Chinese and lists each step as `shown` words it
    (the stage passes its titles): a presenter who mistyped a step reads the steps as the
    notebook shows them."""
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    titles = {"one": "第一步", "two": "第二步", "three": "第三步"}
    with pytest.raises(RewindError, match=r"没有步骤 'four'.*1\. 第一步；?;? ?2\. 第二步"):
        before(script_from_cells(CELLS), "four", titles.__getitem__)
