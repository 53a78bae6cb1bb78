"""The scene helpers of notebooks 23–25 that judge or diagnose (`labs/scenes/ch23.py`,
`ch24.py`, `ch25.py`): each verdict built from a real lab (real scans, a real loss of the
job record), the pure judges from the facts they are given."""

from __future__ import annotations

from labs.names import Names
from labs.scenes import ch23, ch24


async def test_scan_preview_sees_a_dispatched_row_again_only_after_30_s(lab):
    """D1: the scan preview picks a never-dispatched row, not the same row right after a
    tick marked it, and again 31 s later (the re-check; 练习 C's case is a delayed one)."""
    names = Names()
    names("e", await lab.request_export({"status": ["OPEN"]}))
    assert await ch23.scan_preview(lab, names) == ["e"]
    assert (await lab.dispatch()).added == 1
    assert await ch23.scan_preview(lab, names) == []
    assert await ch23.scan_preview(lab, names, later=31) == ["e"]


def test_d_judged_wants_d_s_new_reminder_sent_and_d1_still_delayed():
    """Exercise 24.d's judge on given facts (O3; O4: nothing cancelled in Redis; M1); the
    registry test runs it on real moves (`exercise_reasons.REASONS["24.d"]`). Returning d1
    itself, run early, is refused as not D's new reminder."""
    sent = ("COMPLETED", "Reminder sent to eve (revision 2).", 7, 2)
    right = {"new": sent, "d_id": 7, "d_revision": 2, "d1_returned": False,
             "d1": ("WAITING", "delayed")}
    assert ch24.d_judged(right)
    assert "return D's new REMINDER task" in ch24.d_judged({**right, "new": None}).heading
    assert "not yet completed" in ch24.d_judged(
        {**right, "new": ("WAITING", "", 7, 2)}).heading
    assert "not for a new due date" in ch24.d_judged(
        {**right, "new": ("COMPLETED", "Reminder sent to eve (revision 1).", 7, 1),
         "d1_returned": True, "d_revision": 1, "d1": ("COMPLETED", "completed")}).heading
    assert ch24.d_judged({**right, "d1": ("WAITING", "none")}).heading.startswith("✗ d1 is")
