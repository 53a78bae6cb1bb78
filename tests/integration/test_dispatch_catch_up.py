"""A backlog drains at once: a tick's catch-up rounds, its budget, and one process at a
time (D8 made precise; D3, D5, D6, D7).

Proves that a scan that came back full (`dispatch_batch_size` rows) is followed at once by
the next, one at a time and each bounded by the batch, until a scan comes back short — all
within one tick, the D6/D7 tail running once after the rounds; that a full round which
changed nothing ends the rounds without counting as a backlog; that the tick's budget ends
the rounds with `backlog` set and the next tick follows at once, while a budget of 0 (or a
re-dispatch age of 0) is the book's one scan per tick; that a round that raises ends the
tick before its tail, the rows of earlier rounds staying marked (D3); and that while
another process's dispatcher holds the catch-up lock, a tick's first scan still runs but
its catch-up rounds yield (D5). The tick interval is a minute throughout, so no result here
waited for a timed tick; the stale RUNNING row is aged by 121 s with the kit's `age` (D6's
clock compressed).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import select, text

from teamdesk.db.models import BackgroundTask, TaskStatus
from teamdesk.tasks.dispatch_loop import DispatchLoop
from teamdesk.tasks.dispatcher import DispatchReport, dispatch_tasks
from teamdesk.testing import age, task_row
from tests.integration.dispatch_helpers import LoopEvents, insert_task, job_state


async def _insert_many(sessions, n: int) -> list[str]:
    """`n` WAITING rows, never dispatched, due (one INSERT)."""
    async with sessions() as s, s.begin():
        return list((await s.execute(text(
            "INSERT INTO background_tasks (type, status, run, owner_id, team_id, scope, "
            "filters, run_at) SELECT 'EXPORT', 'WAITING', 0, 'ben', 'acme', 'TEAM', "
            "'{}'::jsonb, now() - interval '1 minute' + g * interval '1 ms' "
            "FROM generate_series(1, :n) AS g RETURNING id"), {"n": n})).scalars())


async def _undispatched(sessions) -> int:
    """WAITING rows never dispatched (or recovered since, D6)."""
    async with sessions() as s:
        return len((await s.scalars(select(BackgroundTask.id).where(
            BackgroundTask.status == TaskStatus.WAITING,
            BackgroundTask.dispatched_at.is_(None)))).all())


async def _stale_running_row(sessions) -> str:
    """A RUNNING row last touched 121 s ago: the D6 tail recovers it."""
    stale = await insert_task(sessions, status=TaskStatus.RUNNING, execution_id="exec-old")
    await age(sessions, stale, 121)
    return stale


async def _loop_until(queue, settings, what: str, done
                      ) -> tuple[DispatchLoop, LoopEvents, dict[str, Any]]:
    """Run a dispatch loop (its own tick, as a worker process does) until an event `done`
    accepts has been seen, then stop it: the loop, every event it reported, and the fields
    of the one `done` accepted."""
    events = LoopEvents()
    loop = DispatchLoop(queue, settings, listener=events)
    loop.start()
    try:
        _, info, _ = await events.until(what, done)
    finally:
        await loop.stop()
    return loop, events, info


async def test_loop_tick_drains_a_backlog_round_after_round_until_a_short_scan(
        settings, sessions, demo, queue):
    """D8 (made precise): 35 due rows and a batch of 10 — the first scan comes back full
    (a backlog), so the next scan follows at once, one at a time, each bounded by the
    batch: 10, 10, 10, then 5 (short) ends the rounds. All of it in ONE tick — the tick
    interval is a minute, so nothing here waited for a second tick — and the D6/D7 tail
    ran once after the rounds (the stale RUNNING row is recovered)."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    ids = await _insert_many(sessions, 35)
    await _stale_running_row(sessions)
    loop, events, info = await _loop_until(queue, settings, "the first tick",
                                           lambda e, i: e in ("tick.done", "tick.fault"))
    report = info["report"]
    rounds = [i["report"].scanned for e, i, _ in events.seen if e == "tick.round"]
    assert rounds == [10, 10, 10, 5]
    assert (report.rounds, report.scanned, report.added, report.backlog) == (4, 35, 35, False)
    assert (report.recovered_stale, loop.ticks, loop.faults) == (1, 1, 0)
    assert await _undispatched(sessions) == 1  # only the row recovered after the rounds
    assert all([await job_state(queue, t) == "waiting" for t in ids])


async def test_loop_full_last_scan_then_a_short_one_of_none(settings, sessions, demo, queue):
    """D8: exactly two batches due: two full scans, then a third that comes back empty
    (short) ends the rounds; a full round that changed no row ends them too (the next scan
    would return the same rows), without counting as a backlog."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    await _insert_many(sessions, 20)
    loop = DispatchLoop(queue, settings)
    report = await loop.tick_once()
    assert (report.rounds, report.scanned, report.added, report.backlog) == (3, 20, 20, False)

    calls = 0

    async def same_rows_again(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal calls
        calls += 1
        return DispatchReport(scanned=10)  # full, but nothing added, refreshed or failed

    report = await DispatchLoop(queue, settings, dispatch=same_rows_again).tick_once()
    assert (calls, report.rounds, report.backlog) == (1, 1, False)


async def test_loop_budget_ends_the_rounds_and_the_next_tick_follows_at_once(
        settings, sessions, demo, queue):
    """D8: a budget too small for a second round (1 ns) ends each tick after one full
    scan with the backlog left (`backlog`), and the next tick starts at once — the
    interval is a minute, so every tick after the first here is a catch-up tick — until
    a scan comes back short; that tick waits for the interval again. Each tick ran the
    D6/D7 tail (the stale row is recovered in the first)."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10,
                                dispatch_budget_s=1e-9)
    await _insert_many(sessions, 25)
    await _stale_running_row(sessions)
    loop, events, _ = await _loop_until(queue, settings, "a tick whose scan came back short",
                                        lambda e, i: e == "tick.fault" or (
                                            e == "tick.done" and not i["report"].backlog))
    reports = [i["report"] for e, i, _ in events.seen if e == "tick.done"]
    # 25 + the recovered row = 26 rows: 10, 10 (backlog each), then 6 (short).
    assert [(r.rounds, r.scanned, r.backlog) for r in reports] == [
        (1, 10, True), (1, 10, True), (1, 6, False)]
    assert reports[0].recovered_stale == 1 and loop.faults == 0
    assert await _undispatched(sessions) == 0


@pytest.mark.parametrize("changes", [{"dispatch_budget_s": 0.0}, {"redispatch_age_s": 0.0}])
async def test_loop_budget_zero_is_one_scan_per_tick(settings, sessions, demo, queue,
                                                     changes):
    """D8: `dispatch_budget_s` 0 is the book's loop — one scan per tick, and no catch-up
    tick (no `backlog`: the next tick waits for the interval). A re-dispatch age of 0
    caps the budget at 0 too: every row a tick marked would be due again at once."""
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10, **changes)
    await _insert_many(sessions, 25)
    report = await DispatchLoop(queue, settings).tick_once()
    assert (report.rounds, report.scanned, report.backlog) == (1, 10, False)
    assert await _undispatched(sessions) == 15


async def test_loop_round_that_raises_ends_the_tick_before_the_tail(settings, sessions,
                                                                    demo, queue, caplog):
    """D8: a tick that raises ends that round — here the second scan round of a backlog:
    no further round, no recovery or purge in that tick, one `dispatch.fault` line; the
    rows of the first round stay marked (D3)."""
    caplog.set_level(logging.INFO, logger="teamdesk.dispatcher")
    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    await _insert_many(sessions, 25)
    stale = await insert_task(sessions, status=TaskStatus.RUNNING, execution_id="exec-old")
    await age(sessions, stale, 121)
    calls = 0

    async def second_round_fails(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("injected in round 2")
        return await dispatch_tasks(*args, **kwargs)

    loop = DispatchLoop(queue, settings, dispatch=second_round_fails)
    assert await loop.tick_once() is None
    assert (calls, loop.faults, str(loop.last_error)) == (2, 1, "injected in round 2")
    assert (await task_row(sessions, stale))["status"] is TaskStatus.RUNNING  # no tail ran
    assert await _undispatched(sessions) == 15
    assert [r.getMessage() for r in caplog.records if "dispatch.fault" in r.getMessage()] == [
        "dispatch.fault error=RuntimeError: injected in round 2"]


async def test_only_one_process_catches_up_at_a_time(settings, sessions, demo, queue):
    """D8, D5: while another process's dispatcher holds the catch-up lock (taken here by
    hand, as that dispatcher's round would), a tick's first scan still runs, but its
    catch-up rounds yield at once: two processes woken by the same burst would otherwise
    add every row of it twice. Once the lock is free, the next tick catches up."""
    import psycopg

    settings = settings.replace(dispatch_tick_s=60.0, dispatch_batch_size=10)
    await _insert_many(sessions, 25)
    loop = DispatchLoop(queue, settings)
    async with await psycopg.AsyncConnection.connect(settings.database_url,
                                                     autocommit=True) as other:
        await other.execute("SELECT pg_advisory_lock(hashtext('teamdesk.dispatch.catch_up'))")
        report = await loop.tick_once()
        assert (report.rounds, report.scanned, report.backlog) == (1, 10, False)
        await other.execute("SELECT pg_advisory_unlock(hashtext('teamdesk.dispatch.catch_up'))")
    report = await loop.tick_once()
    assert (report.rounds, report.scanned, report.backlog) == (2, 15, False)
    assert await _undispatched(sessions) == 0
