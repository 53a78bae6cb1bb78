"""Tables and lines the harness prints speak the edition's language: in 中文 the words
(row labels, headings, what a lease became) are Chinese and the identifiers (task and job
ids, statuses, fault kinds, workers) stay as they are; the English prints as it always did,
so the English edition's stored outputs do not move."""

from __future__ import annotations

from types import SimpleNamespace

from devkit.i18n import columns
from labs import tables
from labs.chaos.config import ChaosConfig
from labs.chaos.report import ChaosReport, Strike
from labs.chaos.schedule import FaultEvent
from labs.scenes import ch26a, ch26b
from teamdesk.db.models import TaskStatus


def _rounds() -> tuple[SimpleNamespace, ...]:
    return (SimpleNamespace(id="TTBKD8", run=0, attempts=3, status=TaskStatus.FAILED),
            SimpleNamespace(id="TTBKD8", run=1, attempts=1, status=TaskStatus.COMPLETED),
            SimpleNamespace(id="TTBKD8-0", attemptsMade=3),
            SimpleNamespace(id="TTBKD8-1", attemptsMade=1))


def test_pad_counts_a_chinese_character_as_two_columns():
    assert tables.pad("run", 6) == "run   " == f"{'run':<6}"
    assert tables.pad("轮次", 6) == "轮次  " and columns("轮次 run") == 8
    assert tables.pad("too long", 3) == "too long"


def test_the_identities_table_is_the_same_english_and_lines_up_in_chinese(monkeypatch):
    """I1–I3: §1's table of 26a. English: as stored in the notebook. 中文: labels and round
    headings are Chinese, ids and statuses stay, and every value column starts at the same
    terminal column on every line."""
    english = ch26a.identities(*_rounds())
    assert english.splitlines()[:3] == [
        f"{'':<17}{'round 1':<11}{'round 2':<11}",
        f"{'task id':<17}{'TTBKD8':<11}{'TTBKD8':<11}the ledger row: one for the task's "
        "whole life",
        f"{'run':<17}{'0':<11}{'1':<11}the round; the page shows \"round run+1\""]
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    lines = ch26a.identities(*_rounds()).splitlines()
    assert "第 1 轮" in lines[0] and lines[1].startswith("任务 id")
    assert "FAILED" in lines[-1] and "COMPLETED" in lines[-1]
    starts = {columns(line[:line.index(value)])
              for line, value in zip(lines[1:], ("TTBKD8", "0", "TTBKD8-0", "3", "3",
                                                 "FAILED"), strict=True)}
    assert len(starts) == 1, lines
    assert columns(lines[0][:lines[0].index("第 1 轮")]) == starts.pop()


def test_the_story_of_26b_has_the_same_keys_and_chinese_words(monkeypatch):
    english = ch26b.story_lines()
    assert english["a-claims"] == "A claims the task"
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    chinese = ch26b.story_lines()
    assert chinese.keys() == english.keys()
    assert all(not line.isascii() for line in chinese.values()), chinese


def test_the_fault_table_speaks_the_edition_and_its_rows_stay_english(monkeypatch):
    """One row per scheduled fault; a fault that never struck is "missed". In 中文 the
    headers and the words among the values are Chinese; kinds, workers and task ids stay;
    `fault_rows` (what code reads) is English in both editions."""
    schedule = [FaultEvent(0.5, "sigstop", 0, 1.0), FaultEvent(1.5, "cut", 0, 1.0)]
    report = ChaosReport(config=ChaosConfig(seed=1), schedule=schedule)
    report.strikes.append(Strike(0.6, "sigstop", "w1", "w1", "T1", "e-T1", on_running=True,
                                 fault=0, due=0.5, lease_after="taken over"))
    english = report.fault_table()
    assert list(english.columns) == ["due_s", "kind", "target", "struck_s", "held_by", "task",
                                     "execution", "on_RUNNING", "lease_after"]
    assert list(english["lease_after"]) == ["taken over", "missed"]
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    chinese = report.fault_table()
    assert all(not str(c).isascii() for c in chinese.columns), list(chinese.columns)
    assert list(chinese.iloc[:, 8]) == ["已被接手", "没打中"]
    assert list(chinese.iloc[:, 1]) == ["sigstop", "cut"] and chinese.iloc[0, 5] == "T1"
    assert chinese.iloc[0, 7] == "是" and chinese.iloc[1, 7] == "否"
    assert [r["lease_after"] for r in report.fault_rows()] == ["taken over", "missed"]


def test_a_history_detail_the_history_writes_is_shown_in_the_edition(monkeypatch):
    """Every note the history writes for a processor log line (`LOG_OPS`) has its 中文;
    a detail recorded by a gate or a cell is shown as it was (rows match on it)."""
    from labs.history import LOG_OPS, History

    notes = [detail for _, _, detail in LOG_OPS.values()]
    assert [History.detail({"detail": d}) for d in notes] == notes
    assert History.detail({"detail": "lease lost: error not reported: OSError"}) == (
        "lease lost: error not reported: OSError")
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert all(not History.detail({"detail": d}).isascii() for d in notes)
    assert History.detail({"detail": "lease lost"}) == "失去租约"
    # a note that begins with another is itself, not the shorter note and some English
    assert History.detail({"detail": "lease lost: error not reported"}) == "失去租约：错误没有上报"
    assert History.detail({"detail": "paused at export.after_read"}) == (
        "paused at export.after_read")
    assert History.detail({"detail": None}) == ""
    assert History.detail({"detail": "lease lost: error not reported: OSError"}) == (
        "失去租约：错误没有上报：OSError")


def test_the_invariant_table_reads_chinese_and_is_selected_by_its_english_columns(monkeypatch):
    """90 selects `invariant_table()[["rules", "violations"]]` in both editions: the
    columns stay English underneath; the 中文 edition shows 规则, 违反次数 and 不变量."""
    report = ChaosReport(config=ChaosConfig(seed=1), schedule=[])
    english = repr(report.invariant_table()[["rules", "violations"]])
    assert "rules" in english and "invariant" in english
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    table = report.invariant_table()[["rules", "violations"]]
    assert list(table.columns) == ["rules", "violations"] and table.index.name == "invariant"
    shown = repr(table)
    assert "规则" in shown and "违反次数" in shown and "不变量" in shown
    assert "rules" not in shown and "violations" not in shown


async def test_an_old_fences_lines_stay_english_data_and_are_shown_in_chinese(monkeypatch):
    """P3, P10: what `forgot-row-count` let through is compared as English in both editions
    (26c's cells assert on it in the 中文 run too) and printed in the edition's words."""
    from labs.counterexamples import Switch
    from labs.fences import ForgotRowCount
    from teamdesk.tasks.lease import Lease, LeaseLost

    async def lost(conn, lease, statement=None, *, during="write", **values):
        raise LeaseLost(lease, during)  # the completion matched 0 rows

    monkeypatch.setattr("labs.fences.leased_update", lost)
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    fence = ForgotRowCount(effects=[])
    await fence(None, Lease("T1", 0, "e1"), during="reminder completion")
    switch = Switch("forgot-row-count", board=None, effects=fence.effects)  # type: ignore[arg-type]
    assert switch.effects == ["reminder completion: 0 rows matched, carried on"]
    assert switch.shown() == ["reminder completion：匹配了 0 行，照样继续往下走"]
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert switch.shown() == switch.effects


def test_a_shown_frame_with_two_index_levels_is_shown_in_chinese(monkeypatch):
    """23 shows `pd.concat({"before": a, "after": b})` of two boards: two index levels,
    the first unnamed; in 中文 its headers are translated and its levels kept."""
    import pandas as pd

    board = tables.Shown(pd.DataFrame({"status": ["WAITING"]},
                                      index=pd.Index(["T1"], name="task_id")))
    both = pd.concat({"before": board, "after": board})
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    shown = both.translated()
    assert list(shown.columns) == [tables.headers()["status"]] and shown.index.nlevels == 2
    assert shown.index.names == [None, tables.headers()["task_id"]]
    assert "WAITING" in repr(both) and "<table" in both._repr_html_()
