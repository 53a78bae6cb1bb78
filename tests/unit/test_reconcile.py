"""D4's decision table, row by row (`teamdesk.tasks.reconcile.decide`): the bulk and the
per-row paths of the dispatcher both ask this one function."""

from __future__ import annotations

import pytest

from teamdesk.tasks.reconcile import QUEUED_STATES, Decision, decide

TABLE = [
    # state,              leased, decision
    (None,                False,  Decision.ADD),
    (None,                True,   Decision.ADD),
    ("waiting",           False,  Decision.REFRESH),
    ("delayed",           False,  Decision.REFRESH),
    ("active",            True,   Decision.REFRESH),
    ("prioritized",       False,  Decision.REFRESH),
    ("waiting-children",  False,  Decision.REFRESH),
    ("paused",            False,  Decision.REFRESH),
    ("failed",            False,  Decision.FAIL),
    ("failed",            True,   Decision.LEAVE),
    ("completed",         False,  Decision.RE_ADD),
    ("completed",         True,   Decision.RE_ADD),
    ("unknown",           False,  Decision.RE_ADD),
]


@pytest.mark.parametrize(("state", "leased", "decision"), TABLE)
def test_d4_decision_table(state: str | None, leased: bool, decision: Decision) -> None:
    """D4: no job → add; queued → refresh; failed → fail only without a lease; completed
    or unknown → remove and add again (ours, inferred)."""
    assert decide(state, leased=leased) is decision


def test_every_queued_state_is_in_the_table() -> None:
    """D4: a queued state added to QUEUED_STATES without a row here would go untested."""
    assert QUEUED_STATES == {s for s, _, d in TABLE if d is Decision.REFRESH}
