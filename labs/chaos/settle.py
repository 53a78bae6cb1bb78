"""After the fault window: everything restored (Redis up, links healed, every worker
running), a bounded wait until every task is terminal, then the final SIGTERM, each exit
code judged as W4 says. What runs during the window is `labs.chaos.window`'s; the faults
are the driver's (`labs.chaos.driver`)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from labs import statements
from labs.i18n import say
from teamdesk.tasks.runner import EXIT_DRAIN_TIMEOUT

if TYPE_CHECKING:
    from labs.chaos.driver import Driver


async def restore(driver: Driver) -> None:
    """After the window: Redis up, every link healed, every worker running."""
    if driver.redis_down:
        await driver.start_redis()
    for proxy in driver.proxies:
        if proxy.is_cut:
            await proxy.heal()
    for w, lock in zip(driver.procs, driver.locks, strict=True):
        async with lock:
            if not w.alive:  # every fault restarts its own: this one exited by itself
                await driver.restart_exited(w)


async def settle(driver: Driver, total: int) -> tuple[bool, float]:
    """Poll the ledger (bounded by `config.settle`) until every task is terminal:
    (settled?, seconds it took)."""
    started = time.monotonic()
    last = 0.0
    while True:
        async with driver.sessions() as s:
            counts = dict((await statements.run(s, "status_counts")).all())
        open_ = counts.get("WAITING", 0) + counts.get("RUNNING", 0)
        elapsed = time.monotonic() - started
        if open_ == 0 and sum(counts.values()) >= total:
            driver.note(say("chaos.settle.settled", "settled after {seconds:.1f} s: {counts}",
                            seconds=elapsed, counts=counts))
            return True, elapsed
        if elapsed > driver.config.settle:
            driver.note(say("chaos.settle.not-settled", "NOT settled after {seconds:.1f} s: "
                            "{counts}", seconds=elapsed, counts=counts))
            return False, elapsed
        if elapsed - last >= 2.0:
            last = elapsed
            driver.note(say("chaos.settle.settling", "settling … {counts}", counts=counts))
        await asyncio.sleep(0.1)  # poll interval of an external state


async def all_started(driver: Driver, timeout: float) -> None:
    """Before the final SIGTERM: every worker running and past its start (bounded), so
    the drain is tested on a worker that could drain."""
    for w in driver.procs:
        if not w.alive:  # it exited by itself during the settle phase: a finding
            await driver.restart_exited(w)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(w.started_up or not w.alive for w in driver.procs):
            return
        await asyncio.sleep(0.05)  # poll interval of an external state
    slow = ", ".join(w.name for w in driver.procs if w.alive and not w.started_up)
    driver.note(say("chaos.settle.slow-start", "{workers} not started after {timeout:g} s; "
                    "the final SIGTERM finds {workers} starting", workers=slow,
                    timeout=timeout))


async def final_stop(driver: Driver) -> None:
    """SIGTERM every worker; judge each exit code (W4: 0, or 3 after the drain timeout);
    what is not the product's doing is a finding, not a violation."""
    report = driver.report
    codes = [await w.stop(15) for w in driver.procs]
    driver.out(say("chaos.settle.stopped", "  workers stopped (SIGTERM): exit codes {codes}",
                   codes=codes))
    for w, code in zip(driver.procs, codes, strict=True):
        if code == 0:
            continue
        if not w.started_up:
            report.findings.append(say(
                "chaos.settle.not-started", "{worker} had not finished starting when the final "
                "SIGTERM came (exit {code}): {last}", worker=w.name, code=code,
                last=w.tail(1).strip()[:160]))
        elif code == EXIT_DRAIN_TIMEOUT and report.settled:
            report.findings.append(say(
                "chaos.settle.drain-timeout", "{worker} exited 3 (drain timeout, 'running job "
                "abandoned') on the final SIGTERM although no task was RUNNING: its bullmq "
                "worker did not close within the drain timeout (after a Redis outage the Python "
                "port sleeps runRetryDelay, 15 s by default, before it notices the close)",
                worker=w.name))
        else:
            report.violate(say("chaos.settle.final-exit", "{worker} exited {code} on the final "
                               "SIGTERM (W4 expects 0, or 3 after the drain timeout)",
                               worker=w.name, code=code))
