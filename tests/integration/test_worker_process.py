"""The worker process as real subprocesses (ch. 30, inferred; W4, D6, D8).

`teamdesk worker` processes run against this test's database and queue prefix. A process
is paused mid-export by a probe hold set through the environment
(`TEAMDESK_PROBE_HOLD=<point>:<folder>`): it writes `<folder>/reached` and waits for
`<folder>/release`. Waiting on another process's observable state is a bounded poll; the
bound only reports a state that never came. Short timings (lock 1 s, stalled check
100 ms, tick 0.2 s, heartbeat TTL 1.5 s) go through the environment (Q2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, Notification, TaskStatus, Ticket, TicketEvent
from teamdesk.services import exports, tickets
from teamdesk.tasks.runner import EXIT_DRAIN_TIMEOUT, heartbeat_key
from teamdesk.testing import FAST_WORKER, wait_until, worker_env


class Proc:
    """A `teamdesk worker` of this test's world with `timings` (a preset of
    `labs.timings`, Q2) and `env` (variables that are not settings, e.g. a probe hold)."""

    def __init__(self, settings, tmp_path: Path, name: str, *,
                 timings: Settings = FAST_WORKER, **env: str) -> None:
        self.name = name
        self.log = tmp_path / f"{name}.log"
        full_env = worker_env(settings, {**timings.to_env(), **env})
        self.p = subprocess.Popen(
            [sys.executable, "-m", "teamdesk.cli", "worker", "--name", name],
            env=full_env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit:\n{self.output()}") from None

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in started:
        p.kill()


async def until(cond, timeout: float, what: str, proc: Proc | None = None):
    """Poll another process's observable state (`teamdesk.testing.wait_until`); the bound
    only reports that it never came, with the process's log appended."""
    on_timeout = (lambda: f"--- {proc.name} log ---\n{proc.output()}") if proc else None
    return await wait_until(cond, timeout, what, on_timeout=on_timeout)


async def status_of(sessions, task_id: str) -> BackgroundTask:
    async with sessions() as s:
        return await s.get(BackgroundTask, task_id)


async def test_heartbeat_while_running_gone_after_clean_stop(settings, redis, tmp_path, procs):
    """W4: the heartbeat key appears while the process runs; SIGTERM with nothing running
    drains at once, exits 0 and removes the heartbeat."""
    w = Proc(settings, tmp_path, "w1")
    procs.append(w)
    key = heartbeat_key(settings, "w1")
    await until(lambda: redis.exists(key), 30, "the heartbeat", w)
    ttl = await redis.pttl(key)
    assert 0 < ttl <= 1500
    w.p.send_signal(signal.SIGTERM)
    assert w.wait() == 0
    assert "worker.stopped name=w1" in w.output()
    assert not await redis.exists(key)


async def _export(sessions) -> str:
    async with sessions() as s:
        return (await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})).id


async def test_sigterm_during_export_drains_and_completes(settings, sessions, demo, redis,
                                                          tmp_path, procs):
    """W4: SIGTERM while an export is mid-flight: the process stops fetching, lets the
    export finish, exits 0; nothing is left RUNNING."""
    task_id = await _export(sessions)
    hold = tmp_path / "hold"
    w = Proc(settings, tmp_path, "w1", TEAMDESK_PROBE_HOLD=f"export.after_read:{hold}")
    procs.append(w)
    await until(lambda: _exists(hold / "reached"), 30, "the export to reach the hold", w)
    w.p.send_signal(signal.SIGTERM)
    await until(lambda: _contains(w, "worker.draining"), 10, "the drain to start", w)
    assert w.p.poll() is None and (await status_of(sessions, task_id)).status == "RUNNING"
    (hold / "release").touch()
    assert w.wait() == 0
    row = await status_of(sessions, task_id)
    assert (row.status, row.progress) == (TaskStatus.COMPLETED, 100)
    async with sessions() as s:
        assert await s.scalar(select(func.count()).select_from(BackgroundTask).where(
            BackgroundTask.status == TaskStatus.RUNNING)) == 0


async def _exists(path: Path) -> bool:
    return path.exists()  # noqa: ASYNC240 - a tiny local stat in a poll


async def _contains(proc: Proc, text: str) -> bool:
    return text in proc.output()


@pytest.mark.parametrize("how", ["drain-timeout", "kill-9"])
async def test_abandoned_export_is_finished_by_another_process(
        settings, sessions, demo, redis, tmp_path, procs, how):
    """W4, D6: the first process leaves the export RUNNING — SIGTERM past a 0.5 s drain
    timeout (exit 3), or kill -9. A second process's stall check takes the job once the
    1 s lock expires and completes it: exactly one saved result. The heartbeat of a
    killed process expires on its own."""
    task_id = await _export(sessions)
    hold = tmp_path / "hold"
    w1 = Proc(settings, tmp_path, "w1", TEAMDESK_PROBE_HOLD=f"export.after_read:{hold}",
              timings=FAST_WORKER.replace(drain_timeout_s=0.5))
    procs.append(w1)
    await until(lambda: _exists(hold / "reached"), 30, "the export to reach the hold", w1)
    first = await status_of(sessions, task_id)
    assert first.status == TaskStatus.RUNNING
    t0 = time.monotonic()
    if how == "kill-9":
        w1.p.send_signal(signal.SIGKILL)
        assert w1.wait() == -signal.SIGKILL
        await until(lambda: _gone(redis, heartbeat_key(settings, "w1")), 10,
                    "the killed process's heartbeat to expire")
    else:
        w1.p.send_signal(signal.SIGTERM)
        assert w1.wait() == EXIT_DRAIN_TIMEOUT
        assert "worker.drain_timeout name=w1" in w1.output()
    assert (await status_of(sessions, task_id)).status == TaskStatus.RUNNING

    w2 = Proc(settings, tmp_path, "w2")
    procs.append(w2)
    done = await until(lambda: _completed(sessions, task_id), 30, "w2 to complete it", w2)
    recovery_s = time.monotonic() - t0
    print(f"\nrecovery after {how}: {recovery_s:.2f} s (lock 1 s, stalled check 100 ms)")
    assert done.execution_id is None and done.result_csv
    assert done.run == first.run == 0
    assert done.attempts >= 1
    w2.p.send_signal(signal.SIGTERM)
    assert w2.wait() == 0


async def _gone(redis, key: str) -> bool:
    return not await redis.exists(key)


async def _completed(sessions, task_id: str) -> BackgroundTask | None:
    row = await status_of(sessions, task_id)
    return row if row.status == TaskStatus.COMPLETED else None


async def test_two_processes_complete_500_mixed_tasks_exactly_once(
        settings, sessions, demo, redis, tmp_path, procs):
    """D5, P10, P12, W4: two worker processes, each with its own dispatch tick (duplicate
    dispatch is normal), 250 exports and 250 reminders (half of them superseded). Every
    task COMPLETED; each current reminder produced exactly one notification, one event and
    one version bump; superseded ones none."""
    due = datetime.now(UTC) - timedelta(minutes=1)
    ticket_ids = []
    async with sessions() as s, s.begin():
        for i in range(125):
            ticket, _ = await tickets.create_ticket(s, "acme", "dan", f"Load ticket {i}",
                                                    due_at=due, assignee_id="ben")
            await tickets.set_due_date(s, "acme", "ben", ticket.id, due)  # supersedes rev 1
            ticket_ids.append(ticket.id)
        for i in range(250):
            await exports.request_export(s, "acme", "ben", {"text": f"#{i % 50 + 1})"})
    async with sessions() as s:
        total = await s.scalar(select(func.count()).select_from(BackgroundTask))
    assert total == 500
    # Big batches, and the lock and stall check back at production values (left out of
    # the environment, so the child's defaults apply).
    load = FAST_WORKER.replace(export_batch_size=100, lock_duration_ms=30_000,
                               stalled_interval_ms=30_000)
    procs.extend([Proc(settings, tmp_path, "w1", timings=load),
                  Proc(settings, tmp_path, "w2", timings=load)])

    async def all_done() -> bool:
        async with sessions() as s:
            left = await s.scalar(select(func.count()).select_from(BackgroundTask).where(
                BackgroundTask.status != TaskStatus.COMPLETED))
        return left == 0

    t0 = time.monotonic()
    await until(all_done, 120, "all 500 tasks to complete", procs[0])
    print(f"\n500 tasks by 2 processes in {time.monotonic() - t0:.1f} s")
    async with sessions() as s:
        notes = await s.scalar(select(func.count()).select_from(Notification))
        events = await s.scalar(select(func.count()).select_from(TicketEvent).where(
            TicketEvent.kind == "reminder_sent"))
        versions = (await s.scalars(select(Ticket.version).where(
            Ticket.id.in_(ticket_ids)))).all()
        per_ticket = (await s.execute(select(Notification.ticket_id, func.count()).group_by(
            Notification.ticket_id))).all()
    assert notes == events == 125
    assert all(n == 1 for _, n in per_ticket) and len(per_ticket) == 125
    assert set(versions) == {3}  # created, due changed, reminded once
    for p in procs:
        p.p.send_signal(signal.SIGTERM)
    assert [p.wait() for p in procs] == [0, 0]


def test_worker_without_redis_says_so_in_one_line(settings, tmp_path):
    """W4, bad input: started while Redis is unreachable, the process prints one readable
    line (no traceback) and exits 2, so a supervisor can restart it."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           **Settings(redis_url=f"redis://127.0.0.1:{port}/0", redis_timeout_s=1).to_env()}
    out = subprocess.run([sys.executable, "-m", "teamdesk.cli", "worker", "--name", "w"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "cannot start the worker, Redis at" in out.stderr
    assert "Traceback" not in out.stderr
