"""D4: what the dispatcher does with a WAITING row, given its queue job's state.

One pure function, `decide`, is the whole table (ch. 23 §4 and the contract's D4, with our
one inferred row): the dispatcher's bulk path and its per-row path both ask it, so the
table cannot drift between them, and `tests/unit/test_reconcile.py` checks it row by row.

| queue job of `(id, run)`                              | decision  |
|-------------------------------------------------------|-----------|
| none (no record)                                      | ADD (D2)  |
| waiting, delayed, active, prioritized, waiting-children, paused | REFRESH (D3 only) |
| failed, the row holds no lease                        | FAIL (conditional UPDATE) |
| failed, the row holds a lease                         | LEAVE     |
| completed, or a record in no state (`unknown`)        | RE_ADD (inferred) |
"""

from __future__ import annotations

import enum

#: Queue states that mean "already queued, an executor will get it" (D4): refresh only.
#: `paused` is what older Redis versions' getState script reports for a paused queue.
QUEUED_STATES = frozenset(
    {"waiting", "delayed", "active", "prioritized", "waiting-children", "paused"})


class Decision(enum.Enum):
    """What the dispatcher does with one scanned row (D4)."""

    #: No job record: add it (D2), then mark (D3).
    ADD = "added"
    #: Already queued: only `dispatched_at` is refreshed (D3).
    REFRESH = "refreshed"
    #: A completed or orphaned record while the ledger still waits for this run: remove the
    #: record and add again, or it would de-duplicate every new add for about 24 h.
    RE_ADD = "re_added"
    #: The queue gave up and nobody holds the row: set FAILED, conditionally (D4, W3).
    FAIL = "fail"
    #: The queue gave up but the row carries a lease: leave it; D6 decides later.
    LEAVE = "left"


def decide(state: str | None, *, leased: bool) -> Decision:
    """D4 for one WAITING row whose queue job is in `state` (None: no job record).

    `leased`: the row's `execution_id` is set. A WAITING row with a lease should not exist
    (P7, D6 and R2 clear it); if one does, a failed job does not fail a task someone may
    own. Our decision for `completed` and for `unknown` (a record in no list, e.g. after
    partial key loss): re-add, since a plain add on top of the record would be swallowed
    as a duplicate and the task would never run."""
    if state is None:
        return Decision.ADD
    if state in QUEUED_STATES:
        return Decision.REFRESH
    if state == "failed":
        return Decision.LEAVE if leased else Decision.FAIL
    return Decision.RE_ADD
