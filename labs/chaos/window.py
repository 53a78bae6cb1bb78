"""What runs beside the faults while the window is open: a supervisor that restarts a
worker which exited by itself, the waves of new tasks (created through the services, so
PostgreSQL only, O4), and a snapshot of the COMPLETED rows every second (P1, D3, P12:
none of them may change afterwards). The faults themselves are the driver's
(`labs.chaos.driver`); after the window comes `labs.chaos.settle`."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from labs.chaos.checker import completed_rows
from labs.chaos.plan import Spec
from labs.chaos.workload import Expected, create, later_specs
from labs.i18n import say

if TYPE_CHECKING:
    from labs.chaos.driver import Driver


async def supervise(driver: Driver, stop: asyncio.Event) -> None:
    """Like a process supervisor: a worker that exits by itself (not by a fault of ours)
    is restarted after 0.5 s; each such exit is a finding."""
    while not stop.is_set():
        for w, lock in zip(driver.procs, driver.locks, strict=True):
            if lock.locked() or w.alive or w.p is None:
                continue
            async with lock:
                await driver.restart_exited(w)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def waves(driver: Driver, plan: list[Spec], upfront: int, expected: Expected) -> None:
    """The rest of the plan in waves across the fault window (PostgreSQL only, O4)."""
    later = later_specs(plan, upfront)
    count = max(1, driver.config.waves)
    per = -(-len(later) // count) if later else 0
    for i in range(count):
        chunk = later[i * per:(i + 1) * per]
        if not chunk:
            break
        await driver.sleep_until(driver.config.duration * (i + 0.5) / count)
        n = 0
        for spec in chunk:
            n += await create(driver.sessions, spec, expected)
        driver.note(say("chaos.window.wave", "wave {number}: {count} task(s) created through "
                        "the services", number=i + 1, count=n))


async def snapshots(driver: Driver, stop: asyncio.Event) -> None:
    """A snapshot of the COMPLETED rows every second until `stop`."""
    while not stop.is_set():
        await snapshot(driver)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def snapshot(driver: Driver) -> None:
    """Remember each COMPLETED row as first seen (P1, D3, P12: it must not change)."""
    report = driver.report
    rows = await completed_rows(driver.sessions, skip=set(report.completed_seen))
    for task_id, row in rows.items():
        report.completed_seen.setdefault(task_id, row)
    report.snapshots += 1
    if driver.t0:
        report.completions.append((driver.now(), len(report.completed_seen)))
