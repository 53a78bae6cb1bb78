"""`run_chaos`: one seeded chaos run from start to summary — choose what may be broken,
create the workload, start the workers, strike the schedule while new tasks arrive,
settle, stop the workers, check the invariants, summarise."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from devkit.services import ServiceError
from labs.chaos import settle, window, worker_logs
from labs.chaos.checker import check_invariants, ledger_rows
from labs.chaos.config import ChaosConfig
from labs.chaos.driver import Driver
from labs.chaos.guards import ChaosRefused, RedisRestart, private_restarter, working_proxy
from labs.chaos.holds import read_history
from labs.chaos.kinds import BREAKS_REDIS
from labs.chaos.plan import DEMOTED, Spec, make_plan
from labs.chaos.report import ChaosReport, print_header, print_summary
from labs.chaos.schedule import FaultEvent, make_schedule
from labs.chaos.workload import Expected, prepare
from labs.history import short
from labs.i18n import listing, say
from labs.private_redis import PrivateRedis, PrivateRedisError
from labs.procs import stop_all, wait_heartbeats
from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, TaskStatus
from teamdesk.tasks.queue import create_task_queue, job_states, task_job_id


async def run_chaos(settings: Settings, config: ChaosConfig, *,
                    out: Callable[[str], None] = print,
                    log_dir: Path | None = None,
                    redis: RedisRestart | None = None,
                    keep_logs: bool | None = None) -> ChaosReport:
    """One chaos run in the world of `settings` (a fresh database and queue prefix, which
    the caller owns). Raises `ChaosRefused` before doing anything it must not do.
    `redis` says which server the "redis" faults restart (`private_restarter` for a lab's
    own); by default the run starts a private Redis of its own for its workers and
    removes it afterwards, so a restart never touches a server anyone else uses (an open
    lab's, the test suite's). The workers' logs go to `log_dir` (kept), else to a
    temporary folder that is removed after the run unless there is something to read in
    it (a violation or a finding); `keep_logs` True/False keeps/removes that folder
    whatever happened (a notebook passes False)."""
    from teamdesk.db.engine import create_engine, session_factory

    config.check()
    async with contextlib.AsyncExitStack() as stack:
        means = await _means(stack, settings, config, redis)
        schedule = make_schedule(config.seed, config.workers, config.duration, means.kinds)
        report = ChaosReport(config=config, schedule=schedule, notes=means.notes,
                             kinds=means.kinds)
        own_logs = log_dir is None  # ours to remove after a clean run; a caller's is kept
        report.log_dir = log_dir = log_dir or Path(tempfile.mkdtemp(prefix="teamdesk-chaos-"))
        stack.callback(_remove_logs, report, log_dir, own_logs, keep_logs)
        engine = create_engine(means.settings.database_url)
        stack.push_async_callback(engine.dispose)
        driver = Driver(means.settings, config, report, out, session_factory(engine),
                        means.redis)
        stack.push_async_callback(_tear_down, driver)

        print_header(config, means.kinds, schedule, out, means.notes)
        plan = make_plan(config.seed, config.tasks)
        upfront = max(1, int(len(plan) * config.upfront))
        report.expected = expected = Expected()
        await prepare(driver.sessions, plan, upfront, expected, config.export_tickets)
        out(say("chaos.run.upfront", "  created {count} task(s) up front (incl. every export "
                "of the demoted agent {agent!r}); {agent!r} demoted to customer",
                count=len(expected.tasks), agent=DEMOTED))
        await driver.add_workers(log_dir, means.proxy_cls)
        for w in driver.procs:
            w.start()
        await wait_heartbeats(means.settings, driver.procs)
        driver.schedule = schedule
        driver.open_window()
        out(say("chaos.run.window-opens", "  {workers} worker process(es) up; fault window "
                "of {duration:g} s opens", workers=config.workers, duration=config.duration))
        await _window_and_settle(driver, schedule, plan, upfront, expected)
        if not report.settled:
            report.notes.extend(await _stuck(driver))
        await settle.all_started(driver, 30.0)
        await settle.final_stop(driver)

        report.history = read_history(log_dir / "inflight")
        report.rows = await ledger_rows(driver.sessions)
        violations, report.by_status, report.failed_texts = await check_invariants(
            driver.sessions, expected, report.completed_seen, report.history)
        report.violations.extend(violations)
        if not report.settled:
            report.violate(say("chaos.run.not-settled", "the system did not settle within "
                               "{settle:g} s", settle=config.settle))
        report.notes.extend(_log_notes(driver))
        report.notes.extend(await _outage_notes(driver))
        # The workers' logs are kept when there is something to read in them.
        if own_logs and (keep_logs is False or (
                keep_logs is None and not (report.violations or report.findings))):
            report.log_dir = None
        print_summary(report, out)
        return report


@dataclass
class _Means:
    """What this run may break, and with what (after dropping what is not available)."""

    settings: Settings
    kinds: tuple[str, ...]
    proxy_cls: Any = None
    redis: RedisRestart | None = None
    notes: list[str] = field(default_factory=list)


async def _means(stack: contextlib.AsyncExitStack, settings: Settings, config: ChaosConfig,
                 redis: RedisRestart | None) -> _Means:
    """Cuts need a working proxy (else dropped, with a note); Redis restarts a server of
    the run's own — the caller's, or one started here and removed on `stack`'s exit (else
    refused, or dropped with a note when `redis_optional`)."""
    means = _Means(settings, tuple(config.kinds), redis=redis)
    if "cut" in means.kinds:
        means.proxy_cls, why = await working_proxy(settings)
        if why:
            means.kinds = tuple(k for k in means.kinds if k != "cut")
            means.notes.append(say("chaos.run.no-cuts", "no proxy cuts: {why}; Redis "
                                   "restarts and process faults only", why=why))
    if "redis" in means.kinds and redis is None:
        try:
            own = await asyncio.to_thread(PrivateRedis().start)
        except (PrivateRedisError, ServiceError) as err:
            if not config.redis_optional:
                raise ChaosRefused(f"Redis restarts need a Redis of the run's own, which "
                                   f"could not start: {err}") from None
            means.kinds = tuple(k for k in means.kinds if k != "redis")
            means.notes.append(say("chaos.run.no-restarts", "no Redis restarts: {err}",
                                   err=err))
        else:
            stack.push_async_callback(asyncio.to_thread, own.remove)
            means.settings = settings.replace(redis_url=own.url)
            means.redis = private_restarter(own)
    if config.counterexample:
        means.notes.append(say("chaos.run.counterexample", "COUNTEREXAMPLE switched on in "
                               "these workers: {cx}", cx=config.counterexample))
    return means


async def _window_and_settle(driver: Driver, schedule: list[FaultEvent], plan: list[Spec],
                             upfront: int, expected: Expected) -> None:
    """Strike the schedule while the waves of new tasks arrive, then restore and settle —
    with a supervisor and the snapshots of COMPLETED rows running throughout."""
    report, stop = driver.report, asyncio.Event()
    background = [asyncio.create_task(window.snapshots(driver, stop)),
                  asyncio.create_task(window.supervise(driver, stop))]
    try:
        results = await asyncio.gather(*(driver.fault(ev) for ev in schedule),
                                       window.waves(driver, plan, upfront, expected),
                                       return_exceptions=True)
        for ev, res in zip([*schedule, None], results, strict=True):
            if isinstance(res, BaseException):
                report.violate(say("chaos.run.failed", "the run itself failed at {ev}: "
                                   "{error!r}", ev=ev, error=res))
        await window.snapshot(driver)
        driver.out(say("chaos.run.window-over", "  fault window over at +{at:.2f} s; "
                       "settling (at most {settle:g} s)", at=driver.now(),
                       settle=driver.config.settle))
        await settle.restore(driver)
        report.settled, report.settle_s = await settle.settle(driver, len(expected.tasks))
        stop.set()
        await asyncio.gather(*background)
        await window.snapshot(driver)
    finally:
        stop.set()
        for task in background:
            if not task.done():
                task.cancel()


async def _tear_down(driver: Driver) -> None:
    """Whatever happened: Redis up again, every worker killed, every proxy closed."""
    if driver.redis_down:
        with contextlib.suppress(Exception):
            await driver.start_redis()
    stop_all(driver.procs)
    for proxy in driver.proxies:
        with contextlib.suppress(Exception):
            await proxy.close()


def _remove_logs(report: ChaosReport, log_dir: Path, own_logs: bool,
                 keep_logs: bool | None) -> None:
    """Remove the run's own log folder when told to, or when the run kept nothing in it."""
    if own_logs and (keep_logs is False or report.log_dir is None):
        shutil.rmtree(log_dir, ignore_errors=True)


async def _stuck(driver: Driver) -> list[str]:
    """For a run that did not settle: the open tasks and their queue jobs' states."""
    queue = create_task_queue(driver.settings)
    lines = []
    try:
        async with driver.sessions() as s:
            rows = (await s.execute(select(
                BackgroundTask.id, BackgroundTask.run, BackgroundTask.status,
                BackgroundTask.execution_id, BackgroundTask.dispatched_at,
                BackgroundTask.updated_at).where(BackgroundTask.status.in_(
                    [TaskStatus.WAITING, TaskStatus.RUNNING])).limit(10))).all()
        states = await job_states(queue, [task_job_id(r[0], r[1]) for r in rows])
        for r, state in zip(rows, states, strict=True):
            lines.append(say("chaos.run.open-task", "open task {task}: {status} lease={lease} "
                             "dispatched_at={dispatched} updated_at={updated} queue={state}",
                             task=r[0], status=r[2].value, lease=short(r[3]) or "-",
                             dispatched=r[4], updated=r[5], state=state or "-"))
    except Exception as err:
        lines.append(say("chaos.run.no-queue", "could not inspect the queue: {error!r}",
                         error=err))
    finally:
        with contextlib.suppress(Exception):
            await queue.close()
    return lines


def _log_notes(driver: Driver) -> list[str]:
    """What the workers' logs say (`labs.chaos.worker_logs`): event counts, dispatch
    faults split into injected and our own (our own are findings, D8), D4/D6 sums."""
    report, logs = driver.report, driver.logs()
    lines = [line for text in logs.values() for line in worker_logs.parse(text)]
    counted = worker_logs.counts(lines)
    notes = [f"{worker_logs.shown(label)}: {n}" for label, n in counted.items()]
    report.leases_lost = counted[worker_logs.LEASES_LOST]
    report.stalls = counted[worker_logs.STALLS]
    windows = [(driver.wall0 + start, driver.wall0 + end, lane)
               for start, end, lane, kind in report.timeline if kind in BREAKS_REDIS]
    injected, own = worker_logs.classify_dispatch_faults(logs, windows, driver.wall0)
    report.dispatch_faults_injected = len(injected)
    report.dispatch_faults_own = own
    notes.append(say("chaos.run.dispatch-faults", "dispatch faults: {injected} fault "
                     "injected (the worker's Redis stopped, cut or frozen), {own} dispatcher "
                     "fault(s) of our own", injected=len(injected), own=len(own)))
    report.findings.extend(say("chaos.run.own-fault", "dispatcher fault of our own (D8): "
                               "{line}", line=line[:200]) for line in own[:10])
    sums = worker_logs.tick_sums(lines)
    report.d6_recoveries = sums["recovered_stale"]
    notes.append(say("chaos.run.tick-sums", "RUNNING rows recovered by D6: {recovered}; jobs "
                     "re-added after a lost or completed record (D4): {re_added}; set FAILED "
                     "from the queue's word (D4): {failed}", recovered=sums["recovered_stale"],
                     re_added=sums["re_added"], failed=sums["failed_from_queue"]))
    notes.append(say("chaos.run.starts", "worker starts: {starts}",
                     starts=listing(f"{w.name}={w.starts}" for w in driver.procs)))
    return notes


async def _outage_notes(driver: Driver) -> list[str]:
    """For each Redis outage: how long until the next task completed after Redis was back."""
    if not driver.outages:
        return []
    async with driver.sessions() as s:
        done = sorted(r[0] for r in (await s.execute(select(BackgroundTask.updated_at).where(
            BackgroundTask.status == TaskStatus.COMPLETED))).all())
    wall0 = datetime.now(UTC) - timedelta(seconds=driver.now())
    notes = []
    for i, (start, end) in enumerate(driver.outages, 1):
        back = wall0 + timedelta(seconds=end)
        nxt = next((d for d in done if d > back), None)
        if nxt is None:
            notes.append(say("chaos.run.outage-never", "Redis outage {number} (+{start:.2f} .. "
                             "+{end:.2f} s): no completion after Redis was back", number=i,
                             start=start, end=end))
        else:
            notes.append(say("chaos.run.outage", "Redis outage {number} (+{start:.2f} .. "
                             "+{end:.2f} s): next completion {seconds:.2f} s after Redis was "
                             "back", number=i, start=start, end=end,
                             seconds=(nxt - back).total_seconds()))
    return notes
