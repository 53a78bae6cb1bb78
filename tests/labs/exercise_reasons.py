"""Why each answer of an exercise was refused (or accepted), checked on the verdicts the
registry test (`test_exercise_registry.py`) already has: exercise key → answer name ("the
starter", a registered wrong answer's name, "the solution") → a check of the verdict.
Judges whose runs are dear (real worker processes, three tests side by side) are checked
here, on the registry's runs, instead of being run again by a test of their own."""

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
REASONS: dict[str, dict[str, Callable[[Verdict, dict[str, Any]], Awaitable[None]]]] = {
    "30.drain": {"the starter": _drain_starter,
                 "the right order, exit 0 always": _drain_always_0,
                 "the solution": _drain_solution},
    "27.isolation": {"the starter": _isolation_starter,
                     "a shared database": _isolation_shared_database,
                     "a clean-up outside finally": _isolation_outside_finally,
                     "the solution": _isolation_solution},
}
