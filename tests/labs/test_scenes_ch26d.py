"""`labs.scenes.ch26d`: a ledger row for people, a run driven to FAILED, and Exercise C's
rounds and judge (notebook 26d). Real PostgreSQL and Redis, a real worker."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum

from labs.lab import Lab
from labs.names import Names
from labs.scenes import ch26d


class _Status(Enum):
    FAILED = "FAILED"


def test_fields_reads_a_row_for_people():
    """NULL, "(a time)", enum values, leases by name or "(a lease)", long text cut."""
    names = Names()
    named, unnamed = "3f9c0a1b-0000-4000-8000-000000000001", "77777777-0000-4000-8000-0000"
    unnamed += "00000002"
    names.lease(named, "E1")
    row = {"a": None, "b": datetime.now(UTC), "c": _Status.FAILED, "d": named, "e": unnamed,
           "f": "x" * 50, "g": 3}
    assert ch26d.fields(row, list(row), names) == {
        "a": "NULL", "b": "(a time)", "c": "FAILED", "d": "E1", "e": "(a lease)",
        "f": "x" * 42 + "…", "g": 3}
    assert ch26d.fields(row, ["d"]) == {"d": "(a lease)"}


async def test_exhaust_run_then_rounds_with(service_settings):
    """`exhaust_run` leaves a task FAILED after three attempts, written by the processor
    (P7); `rounds_with(4)` needs two rounds (3 failures, then 1 failure and a success) and
    is remembered, so asking again starts nothing (R2, I3). The backoff is shortened as in
    the notebook (Q2), so three attempts fit the bounded waits."""
    async with Lab.open("scenes26d", settings=service_settings, tickets=60,
                        backoff_delay_ms=30, close_timeout=3) as lab:
        await _exhaust_and_rounds(lab)


async def _exhaust_and_rounds(lab: Lab) -> None:
    await lab.start_worker("W")
    task = await lab.request_export({"status": ["CLOSED"]}, user="ben")
    await ch26d.exhaust_run(lab, task.id)
    row = await lab.task(task.id)
    assert (row.status, row.run, row.attempts) == ("FAILED", 0, 3)

    memo: dict[int, list[ch26d.Round]] = {}
    rounds = await ch26d.rounds_with(lab, 4, memo)
    assert [(r[1], r[2], r[3]) for r in rounds] == [(3, 3, "FAILED"), (2, 2, "COMPLETED")]
    assert await ch26d.rounds_with(lab, 4, memo) is rounds
    assert len(lab.errors_of(source="worker failed", contains="connection reset")) == 3 + 4
