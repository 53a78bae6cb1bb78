"""Why each answer of an exercise was refused (or accepted), checked on the verdicts the
registry test (`test_exercise_registry.py`) already has: exercise key → answer name ("the
starter", a registered wrong answer's name, "the solution") → a check of the verdict.
Checked here, on the registry's runs, instead of running each judge again in a test of
its own (a judged run opens worlds of its own: real outages, real worker processes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from labs.exercises import Verdict
from teamdesk.tasks.queue import redis_client


async def _drain_starter(v: Verdict, context: dict[str, Any]) -> None:
    """W4: the starter (close the connections, exit 0) leaves the export RUNNING under its
    lease, and says 0 after abandoning a job."""
    problems = v.facts["problems"]
    assert any(p.startswith("released: the running export was left RUNNING under")
               for p in problems), str(v)
    assert any(p.startswith("never released: exit 0 after abandoning") for p in problems), str(v)


async def _drain_always_0(v: Verdict, context: dict[str, Any]) -> None:
    """W4: the right order with a constant exit 0 hides only the abandoned job."""
    problems = v.facts["problems"]
    assert len(problems) == 1, str(v)
    assert problems[0].startswith("never released: exit 0 after abandoning"), str(v)


async def _drain_solution(v: Verdict, context: dict[str, Any]) -> None:
    """W4: exit 0 when the job finished within the bound, 3 when it was abandoned; the held
    export completed and the waiting one untouched."""
    runs = v.facts["runs"]
    assert {name: run.code for name, run in runs.items()} == {
        "released": 0, "never released": 3}, str(v)
    assert runs["released"].held == ("COMPLETED", None), str(v)
    assert runs["released"].waiting == ("WAITING", 0), str(v)


async def _isolation_starter(v: Verdict, context: dict[str, Any]) -> None:
    """(ours) a fixed prefix, no clean-up: test B counts A's jobs, and every clone and key
    is left behind."""
    leaks = v.facts["leaks"]
    assert any("share the queue prefix 'ex27'" in line for line in leaks), str(v)
    assert any("database(s) of tests A, B, C" in line for line in leaks), str(v)
    assert any("Redis keys of tests A, B, C" in line for line in leaks), str(v)
    client = redis_client(context["base"])  # the judge removed what the fixture left
    try:
        assert not [k async for k in client.scan_iter(match="ex27:*")]
    finally:
        await client.aclose()


async def _isolation_shared_database(v: Verdict, context: dict[str, Any]) -> None:
    """`base`'s database shared: test B counts the others' rows."""
    assert any(line.startswith("rows: test B") and "share a database" in line
               for line in v.facts["leaks"]), str(v)


async def _isolation_outside_finally(v: Verdict, context: dict[str, Any]) -> None:
    """A clean-up outside `finally` is skipped by the failing test C, and only by it."""
    leaks = v.facts["leaks"]
    assert len(leaks) == 2, str(v)
    assert all("of test C" in line and "`finally`" in line for line in leaks), str(v)


async def _isolation_solution(v: Verdict, context: dict[str, Any]) -> None:
    """One clone and one prefix per test: each test saw only its own rows and jobs."""
    assert v.facts["seen"] == {"A": (2, 2), "B": (1, 1)}, str(v)


#: key → answer name → `check(verdict, context)` (context: the judge's keywords).
def _order_reason(lost: bool, calm_ok: bool) -> Callable[[Verdict, dict[str, Any]],
                                                         Awaitable[None]]:
    """D1, D3, D8: under a real Redis outage, marking before the add succeeded loses the row
    (marked dispatched with no job, skipped by the first tick after recovery); an order
    that never marks is refused already with Redis up."""

    async def reason(v: Verdict, context: dict[str, Any]) -> None:
        assert (v.facts["lost"], v.facts["calm_ok"]) == (lost, calm_ok), str(v)
        if not calm_ok:
            assert any("dispatched_at was not marked" in n for n in v.facts["calm"]), str(v)

    return reason


async def _stale_starter(v: Verdict, context: dict[str, Any]) -> None:
    """M1, O3, P10: closed tickets only — still reminds for a moved and a cleared due date."""
    assert v.facts["right"] == 2 and "twice for one ticket" in str(v), str(v)


async def _stale_never(v: Verdict, context: dict[str, Any]) -> None:
    """A check that never finds a reminder stale gets only the current one right."""
    assert v.facts["right"] == 1, str(v)


async def _filters_too_many(v: Verdict, context: dict[str, Any]) -> None:
    """X1: the filters a retry keeps match more than the limit: refused by the count."""
    assert v.facts["refused"] == "ExportTooLarge", str(v)


async def _filters_invalid(v: Verdict, context: dict[str, Any]) -> None:
    """X1, P8: an unknown status is refused by the request's validation."""
    assert v.facts["refused"] == "InvalidFilters", str(v)


async def _filters_empty(v: Verdict, context: dict[str, Any]) -> None:
    """R4: a filter that matches nothing runs and saves 0 rows."""
    assert v.facts["rows"] == 0 and "0 rows" in str(v), str(v)


async def _filters_dropped(v: Verdict, context: dict[str, Any]) -> None:
    """Dropping Ben's wish is refused before anything runs."""
    assert "keep Ben's wish" in str(v), str(v)


_OWNER_GONE = "the export's owner is no longer a member of the team"
_REDIS_TIMEOUT = "Redis timed out while the progress was reported"


async def _kinds_retry_all(v: Verdict, context: dict[str, Any]) -> None:
    """P7: retrying a lasting problem fails it only after three executions."""
    assert "only after 3 executions" in str(v), str(v)
    assert v.facts["outcomes"][_OWNER_GONE] == ("retry", "FAILED", 3), str(v)


async def _kinds_reject_all(v: Verdict, context: dict[str, Any]) -> None:
    """P8: rejecting a passing problem fails a task a retry would have finished."""
    assert "a retry would have finished" in str(v), str(v)
    assert v.facts["outcomes"][_REDIS_TIMEOUT] == ("reject", "FAILED", 1), str(v)


async def _gate_starter(v: Verdict, context: dict[str, Any]) -> None:
    """P10, P12: a gate that ignores the row count lets G's effects commit after the
    recovery scan cleared its lease; the redelivery then fails on them."""
    facts = v.facts
    assert facts["alone"] and not facts["rolled_back"], str(v)
    assert facts["final_status"] == "FAILED" and "UniqueViolation" in str(v), str(v)


async def _gate_wall(v: Verdict, context: dict[str, Any]) -> None:
    """A gate that always rolls back stops an executor alone."""
    assert not v.facts["alone"], str(v)


async def _gate_other_error(v: Verdict, context: dict[str, Any]) -> None:
    """P6: rolling back with an ordinary error is a failure of the task, not a lost lease."""
    assert v.facts["rolled_back"] and "raise LeaseLost" in str(v), str(v)


async def _last_point_counts(v: Verdict, context: dict[str, Any]) -> None:
    """P10, P7: a fault at a point inside the reminder's transaction leaves nothing between
    the attempts, and attempt 2 gives one of each effect; the earlier point is refused only
    for not being the last one."""
    before, between, after = v.facts["counts"]
    assert between == before and after == (before[0] + 1, before[1] + 1, before[2] + 1), v
    assert v.ok or "not the last point" in v.heading, str(v)


def _recovery_reason(*, stopped: bool, redispatched: bool, mark_first: str
                     ) -> Callable[[Verdict, dict[str, Any]], Awaitable[None]]:
    """O1, D3, D8: what a test of "dispatch failed, then recovered" practised with the
    product's dispatcher (a real outage, a tick after it), and how it ended with the one
    that marks first."""

    async def reason(v: Verdict, context: dict[str, Any]) -> None:
        facts = v.facts
        assert facts["product"].outcome == "passed", str(v)
        assert (facts["redis_stopped"], facts["redispatched"]) == (stopped, redispatched), str(v)
        assert facts["mark_first"].outcome == mark_first, str(v)

    return reason


async def _recovery_solution(v: Verdict, context: dict[str, Any]) -> None:
    """D3: with the dispatcher that marks first, the solution fails on `dispatched_at`, inside
    the outage."""
    assert v.facts["completed"], str(v)
    assert "dispatched_at" in v.facts["mark_first"].detail, str(v)


def _budget_reason(*notes: str) -> Callable[[Verdict, dict[str, Any]], Awaitable[None]]:
    """Q1, P7, D4: a job added with two attempts runs twice and leaves the ledger WAITING
    (the processor's own budget is three); the next tick fails it. A refusal names each
    half that is wrong, and only those."""

    async def reason(v: Verdict, context: dict[str, Any]) -> None:
        run = v.facts["run"]
        assert (run.executions, run.status, run.after_tick) == (2, "WAITING", "FAILED"), str(v)
        wrong = [n for n in v.notes if n.startswith("✗")]
        assert [n.split(":")[0] for n in wrong] == list(notes), str(v)

    return reason


async def _keys_too_broad(v: Verdict, context: dict[str, Any]) -> None:
    """Ours: the world's or the queue's whole pattern matches this world's other keys."""
    assert any(n.startswith("it also matches keys of this world") for n in v.notes), str(v)


async def _keys_other_worlds(v: Verdict, context: dict[str, Any]) -> None:
    """Ours, §2: without the prefix the pattern finds the same task id in another world."""
    assert v.facts["same_id"], str(v)
    assert any(n.startswith("it also matches keys of other worlds") for n in v.notes), str(v)


# ---------------------------------------------------------------- 26d.rounds, 90.invariant

def _rounds_reason(statuses: list[str]) -> Callable[[Verdict, dict[str, Any]],
                                                     Awaitable[None]]:
    """I3, Q1, R2: N reads in a row fail; each round (run) has its own three attempts, so
    the rounds end as `statuses`."""

    async def reason(v: Verdict, context: dict[str, Any]) -> None:
        assert [r[3] for r in v.facts["rounds"]] == statuses, str(v)

    return reason


async def _rows_starter(v: Verdict, context: dict[str, Any]) -> None:
    """The starter runs and returns None: refused as not a number, nothing exported."""
    assert v.facts["rows"] is None and v.facts["exports"] == [], str(v)
    assert "return the number of rows" in v.heading, str(v)


async def _rows_header(v: Verdict, context: dict[str, Any]) -> None:
    """X2: the CLOSED export completed, but the count took the header line for a row."""
    facts = v.facts
    assert facts["rows"] == facts["truth"] + 1 and "header" in v.heading, str(v)
    assert facts["exports"] == [("COMPLETED", {"status": ["CLOSED"]}, facts["truth"])], str(v)


async def _rows_all_tickets(v: Verdict, context: dict[str, Any]) -> None:
    """X1: an export without the filter completed, so no export of the CLOSED tickets."""
    [(status, filters, rows)] = v.facts["exports"]
    assert (status, filters) == ("COMPLETED", {}) and rows > v.facts["truth"], str(v)
    assert "no export of the CLOSED tickets" in v.heading, str(v)


async def _rows_no_export(v: Verdict, context: dict[str, Any]) -> None:
    """The right number from the tickets table, without an export: refused for that."""
    assert v.facts["rows"] == v.facts["truth"] and v.facts["exports"] == [], str(v)
    assert "no export of the CLOSED tickets" in v.heading, str(v)


async def _rows_solution(v: Verdict, context: dict[str, Any]) -> None:
    """X1, X2: one CLOSED export, completed, one CSV row per closed ticket."""
    truth = v.facts["truth"]
    assert truth > 0 and v.facts["rows"] == truth, str(v)
    assert v.facts["exports"] == [("COMPLETED", {"status": ["CLOSED"]}, truth)], str(v)


def _due_now_reason(new: tuple[Any, ...] | None, d1: tuple[str, str], words: str
                    ) -> Callable[[Verdict, dict[str, Any]], Awaitable[None]]:
    """O3, O4, M1: what became of the task returned as D's new reminder (status, reminded,
    for D, at D's current revision) and of d1 (ledger status, queue state), and the words
    the verdict uses."""

    async def reason(v: Verdict, context: dict[str, Any]) -> None:
        facts = v.facts
        got = facts["new"] and (facts["new"][0], facts["new"][1].startswith("Reminder sent"),
                                facts["new"][2] == facts["d_id"],
                                facts["new"][3] == facts["d_revision"])
        assert (got, facts["d1"]) == (new, d1), str(v)
        assert words in v.heading, str(v)

    return reason


async def _rounds_out_of_range(v: Verdict, context: dict[str, Any]) -> None:
    """Nothing is run for an N outside 0–8: the verdict says the range."""
    assert "rounds" not in v.facts and "0 to 8" in v.heading, str(v)


async def _rounds_solution(v: Verdict, context: dict[str, Any]) -> None:
    """I3, R2: three rounds, 3 + 3 + 1 executions: more than attempts=3."""
    rounds = v.facts["rounds"]
    assert [r[1] for r in rounds] == [3, 3, 1] and v.facts["executions"] == 7, str(v)


async def _invariant_names_clean(v: Verdict, context: dict[str, Any]) -> None:
    """P3, P5: an answer that names tasks of the product's run (its takeovers, or every
    COMPLETED row) is refused for that run, where the lease held."""
    assert v.facts["on_clean"] and "product's run" in v.heading, str(v)


async def _invariant_starter(v: Verdict, context: dict[str, Any]) -> None:
    """The starter names nothing: it misses the clobbered task(s)."""
    assert not v.facts["on_cx"] and v.facts["clobbered"], str(v)


async def _invariant_solution(v: Verdict, context: dict[str, Any]) -> None:
    """P3, P5, W2: exactly the tasks the checker's own invariant named, and none of the
    product's run."""
    from labs.scenes.ch90 import clobbered_ids

    assert not v.facts["on_clean"], str(v)
    assert v.facts["on_cx"] == clobbered_ids(context["cx_report"]), str(v)




def _exit_reason(released: bool, code: int
                 ) -> Callable[[Verdict, dict[str, Any]], Awaitable[None]]:
    """W4: w5's real exit code with the answer's choice: 0 when released during the drain,
    EXIT_DRAIN_TIMEOUT (3) when never."""

    async def reason(v: Verdict, context: dict[str, Any]) -> None:
        assert (v.facts["released"], v.facts["code"]) == (released, code), str(v)

    return reason


REASONS: dict[str, dict[str, Callable[[Verdict, dict[str, Any]], Awaitable[None]]]] = {
    "23.order": {"the starter": _order_reason(lost=True, calm_ok=True),
                 "add, then mark in finally": _order_reason(lost=True, calm_ok=True),
                 "add, never mark": _order_reason(lost=False, calm_ok=False)},
    "23.test": {"the starter": _recovery_reason(stopped=True, redispatched=False,
                                                mark_first="passed"),
                "the chapter's test as it stands": _recovery_reason(
                    stopped=False, redispatched=False, mark_first="passed"),
                "nothing after the recovery": _recovery_reason(
                    stopped=True, redispatched=False, mark_first="failed"),
                "no look at the row during the outage": _recovery_reason(
                    stopped=True, redispatched=True, mark_first="timed out"),
                "the solution": _recovery_solution},
    "00.rows": {"the starter": _rows_starter, "the header counted too": _rows_header,
                "every ticket exported": _rows_all_tickets,
                "counted in the tickets table, no export": _rows_no_export,
                "the solution": _rows_solution},
    "24.d": {"the starter": _due_now_reason(None, ("WAITING", "delayed"),
                                            "return D's new REMINDER task"),
             "no dispatch, no wait": _due_now_reason(("WAITING", False, True, True),
                                                     ("WAITING", "delayed"), "not yet completed"),
             "a new ticket due now": _due_now_reason(("COMPLETED", True, False, True),
                                                     ("WAITING", "delayed"), "not for a new due"),
             "d1's job removed": _due_now_reason(("COMPLETED", True, True, True),
                                                 ("WAITING", "none"),
                                                 "nothing needs cancelling"),
             "the solution": _due_now_reason(("COMPLETED", True, True, True),
                                             ("WAITING", "delayed"),
                                             "sent now")},
    "24.stale": {"the starter": _stale_starter, "never stale": _stale_never},
    "25.narrowed": {"the starter": _filters_too_many, "an invalid status": _filters_invalid,
                    "a filter that matches nothing": _filters_empty,
                    "dropping Ben's wish": _filters_dropped},
    "26a.kinds": {"the starter": _kinds_retry_all, "reject everything": _kinds_reject_all},
    "26a.budget": {"the table's last row": _budget_reason("✗ 3 execution(s)", "✗ FAILED"),
                   "the queue decides": _budget_reason("✗ FAILED"),
                   "the solution": _budget_reason()},
    "26c.gate": {"the starter": _gate_starter, "a gate that always rolls back": _gate_wall,
                 "another error than LeaseLost": _gate_other_error},
    "26c.last-point": {"a point before the completion": _last_point_counts,
                       "the solution": _last_point_counts},
    "30.exit": {"never released, yet exit 0": _exit_reason(False, 3),
                "released, yet exit 3": _exit_reason(True, 0),
                "the signal's own code": _exit_reason(False, 3),
                "the solution": _exit_reason(False, 3)},
    "30.drain": {"the starter": _drain_starter,
                 "the right order, exit 0 always": _drain_always_0,
                 "the solution": _drain_solution},
    "27.keys": {"the starter": _keys_too_broad, "the whole queue": _keys_too_broad,
                "the task id anywhere": _keys_other_worlds},
    "27.isolation": {"the starter": _isolation_starter,
                     "a shared database": _isolation_shared_database,
                     "a clean-up outside finally": _isolation_outside_finally,
                     "the solution": _isolation_solution},
    "26d.rounds": {"every read fails in round 1 only": _rounds_reason(["COMPLETED"]),
                   "round 2 completes": _rounds_reason(["FAILED", "COMPLETED"]),
                   "out of range": _rounds_out_of_range,
                   "the solution": _rounds_solution},
    "90.invariant": {"the starter": _invariant_starter,
                     "every task claimed twice": _invariant_names_clean,
                     "the ledger's execution_id differs": _invariant_names_clean,
                     "any result after a second claim": _invariant_names_clean,
                     "the solution": _invariant_solution},
}
