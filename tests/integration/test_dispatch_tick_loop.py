"""The worker process's dispatch tick, `DispatchLoop`: one tick at a time, faults logged,
woken by the outbox (D8; D3, O1).

Proves that ticks never overlap in one process — a tick held at `dispatch.before_add` (a
kit `Gate`, never released) makes every due trigger a skipped one — and that `stop()` is
bounded, cancelling the held tick before its add so nothing is enqueued or marked (D3);
that a raising tick becomes one structured `dispatch.fault` line, `last_error` and a count,
and the next tick dispatches; and that a listening loop ticks at once on the notification
a committed outbox INSERT sends (O1), the minute-long interval ruling out any other cause.
Every wait is for a loop event (`LoopEvents`), never a sleep.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from teamdesk.services import exports
from teamdesk.tasks.dispatch_loop import DispatchLoop
from teamdesk.tasks.dispatcher import DispatchReport, dispatch_tasks
from teamdesk.testing import task_row
from tests.integration.dispatch_helpers import LoopEvents, insert_task, job_state


async def test_loop_never_overlaps_ticks_and_stop_is_bounded(settings, sessions, demo, queue,
                                                             gates):
    """D8: a tick held at `dispatch.before_add` while the 50 ms interval elapses again and
    again: the due triggers are skipped, never a second concurrent tick. `stop()` is
    bounded: the held tick is cancelled after the timeout, before its add, so nothing was
    enqueued or marked (D3) — the next tick will redo it."""
    settings = settings.replace(dispatch_tick_s=0.05)
    task_id = await insert_task(sessions)
    held = gates.gate("dispatch.before_add")  # never released: stop() cancels the tick there
    running = peak = 0
    tick_tasks: list[asyncio.Task[Any]] = []

    async def counting(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal running, peak
        tick_tasks.append(asyncio.current_task())
        running += 1
        peak = max(peak, running)
        try:
            return await dispatch_tasks(*args, **kwargs)
        finally:
            running -= 1

    def three_more_triggers(event: str, info: dict[str, Any]) -> bool:
        # Skipped triggers, or (only if the guard were broken) a second started tick.
        return ((event == "tick.skipped" and info["skipped"] >= 3)
                or (event == "tick.start" and info["tick"] >= 2))

    events = LoopEvents()
    loop = DispatchLoop(queue, settings, dispatch=counting, listener=events)
    loop.start()
    try:
        await held.reached()  # the first tick reached the add
        await events.until("three triggers due while the tick is held",
                           three_more_triggers)
        seen = (peak, loop.ticks)
    finally:
        started = time.monotonic()
        await loop.stop(timeout=0.3)
        stop_took = time.monotonic() - started
        stray = [t for t in tick_tasks if not t.done()]  # only if ticks overlapped
        for task in stray:
            task.cancel()
        await asyncio.gather(*stray, return_exceptions=True)
    assert seen == (1, 1), "(peak concurrent ticks, ticks started) while one tick was held"
    assert stop_took < 2.0 and not loop.running and peak == 1
    assert await job_state(queue, task_id) is None
    assert (await task_row(sessions, task_id))["dispatched_at"] is None


async def test_loop_logs_a_fault_and_the_next_tick_runs(settings, sessions, demo, queue,
                                                        caplog):
    """D8: a raising tick is logged as one structured `dispatch.fault` line (no traceback),
    kept in `last_error`, counted; the next tick runs and dispatches."""
    settings = settings.replace(dispatch_tick_s=0.05)
    caplog.set_level(logging.INFO, logger="teamdesk.dispatcher")
    task_id = await insert_task(sessions)
    boom = RuntimeError("injected tick fault\nsecond line")
    calls = 0

    async def first_fails(*args: Any, **kwargs: Any) -> DispatchReport:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise boom
        return await dispatch_tasks(*args, **kwargs)

    events = LoopEvents()
    loop = DispatchLoop(queue, settings, dispatch=first_fails, listener=events)
    loop.start()
    try:
        await events.until("a successful tick", lambda e, i: e == "tick.done")
    finally:
        await loop.stop()
    assert [e for e, _, _ in events.seen if e in ("tick.fault", "tick.done")][:2] == [
        "tick.fault", "tick.done"]
    assert (loop.faults, loop.last_error) == (1, boom)
    faults = [r for r in caplog.records if r.getMessage().startswith("dispatch.fault")]
    assert [r.getMessage() for r in faults] == [
        "dispatch.fault error=RuntimeError: injected tick fault"]
    assert faults[0].exc_info is None and faults[0].levelno == logging.ERROR
    ticks = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dispatch.tick")]
    assert ticks[0].startswith("dispatch.tick scanned=1 added=1 refreshed=0 re_added=0 "
                               "failed_from_queue=0 recovered_stale=0 purged=0 "
                               "failed_stalled=0 ms=")
    assert await job_state(queue, task_id) == "waiting"
    assert (await task_row(sessions, task_id))["dispatched_at"] is not None


async def test_listening_loop_ticks_at_once_on_a_committed_outbox_insert(settings, sessions,
                                                                        demo, queue):
    """D8, O1: the worker process's loop listens for the outbox's notification (sent by
    the ledger's INSERT trigger when the request's transaction commits): a task created
    through the service is dispatched by a tick that starts at once — the interval is a
    minute, so only the notification can have started it."""
    settings = settings.replace(dispatch_tick_s=60.0)
    events = LoopEvents()
    loop = DispatchLoop(queue, settings, listener=events, listen=True)
    loop.start()
    try:
        await events.until("the first tick", lambda e, i: e == "tick.done")
        await events.until("LISTEN is on", lambda e, i: e == "listen.ready")
        async with sessions() as s:
            task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
        _, info, _ = await events.until("a tick woken by the insert", lambda e, i: (
            e == "tick.done" and i["report"].added == 1))
    finally:
        await loop.stop()
    assert info["tick"] == 2 and loop.faults == 0
    assert await job_state(queue, task.id) == "waiting"
