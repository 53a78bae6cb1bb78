"""The scene helpers of notebooks 23–25 that judge or diagnose (`labs/scenes/ch23.py`,
`ch24.py`, `ch25.py`): each verdict built from a real lab (real scans, a real loss of the
job record), the pure judges from the facts they are given."""

from __future__ import annotations

from labs import tables
from labs.names import Names
from labs.scenes import ch23, ch24, ch25


async def test_scan_preview_sees_a_dispatched_row_again_only_after_30_s(lab):
    """D1: the scan preview picks a never-dispatched row, not the same row right after a
    tick marked it, and again 31 s later (the re-check; 练习 C's case is a delayed one)."""
    names = Names()
    names("e", await lab.request_export({"status": ["OPEN"]}))
    assert await ch23.scan_preview(lab, names) == ["e"]
    assert (await lab.dispatch()).added == 1
    assert await ch23.scan_preview(lab, names) == []
    assert await ch23.scan_preview(lab, names, later=31) == ["e"]


def test_d_judged_wants_the_new_reminder_sent_and_d1_still_delayed():
    """Exercise 24's judge (O4: nothing cancelled in Redis; M1)."""
    sent = ("COMPLETED", "Reminder sent to eve (revision 2).")
    assert ch24.d_judged(None) == "answer should be D's new REMINDER task"
    assert ch24.d_judged({"new": sent, "d1": ("WAITING", "delayed")}) is True
    assert "not yet completed" in ch24.d_judged({"new": ("WAITING", ""),
                                                 "d1": ("WAITING", "delayed")})
    assert ch24.d_judged({"new": sent, "d1": ("COMPLETED", "completed")}).startswith("d1 is")


async def test_matches_and_fits(lab):
    """Exercise 25: the service's own count (X1), read only; the judge keeps the status
    filter and wants 1..limit matches; invalid filters come back as the service's text."""
    everything_open = await ch25.matches(lab, "ben", {"status": ["OPEN"]})
    assert isinstance(everything_open, int) and everything_open > 0
    assert len(await tables.ledger(lab)) == 0  # counting writes nothing
    refused = await ch25.matches(lab, "ben", {"status": ["NOPE"]})
    assert isinstance(refused, str) and refused.startswith("InvalidFilters")

    assert ch25.fits({"status": ["OPEN"]}, 5, 30) is True
    assert ch25.fits({"status": ["OPEN"]}, 0, 30) == "they match 0 tickets; the aim is 1–30"
    assert ch25.fits({"status": ["OPEN"]}, 31, 30).startswith("they match 31")
    assert ch25.fits({"priority": ["HIGH"]}, 5, 30).startswith("keep the status filter")
    assert ch25.fits({"status": ["OPEN"]}, refused, 30).startswith("the service refuses")
