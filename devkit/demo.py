"""`teamdesk demo race`: the export takeover race of ch. 26, narrated in a terminal.

For an instructor without Jupyter. It builds a throw-away world (a database cloned from
the migrated template, its own queue prefix, the demo data), then:

  1. an export is requested and dispatched;
  2. executor A (lock 1 s, renewal off: the stuck one) claims it and pauses after reading;
  3. A's lock expires; executor B's stall check takes the job and claims a new lease;
  4. A comes back late: its progress write matches 0 rows (LeaseLost) and it stops;
  5. B finishes: B's CSV is the one saved.

The ledger-vs-queue table is printed after each step. Pauses are probe gates, not sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sqlalchemy import select

from devkit.world import World
from teamdesk import probes
from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask
from teamdesk.seed import seed_demo
from teamdesk.services import exports
from teamdesk.tasks.dispatcher import dispatch_tasks
from teamdesk.tasks.queue import create_task_queue, job_states, task_job_id
from teamdesk.tasks.worker import create_task_worker

STEP_TIMEOUT_S = 15.0


class _Signals:
    """Named asyncio events raised by probes, worker events and log lines."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self.info: dict[str, Any] = {}

    def event(self, name: str) -> asyncio.Event:
        return self._events.setdefault(name, asyncio.Event())

    def fire(self, name: str, **info: Any) -> None:
        self.info[name] = info
        self.event(name).set()

    async def wait(self, name: str) -> dict[str, Any]:
        try:
            await asyncio.wait_for(self.event(name).wait(), STEP_TIMEOUT_S)
        except TimeoutError:
            raise RuntimeError(f"demo step never happened: {name}") from None
        return self.info.get(name, {})


class _LeaseLostLog(logging.Handler):
    def __init__(self, signals: _Signals) -> None:
        super().__init__(logging.INFO)
        self.signals = signals

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("task.lease_lost"):
            self.signals.fire("lease_lost", line=msg)


async def _table(sessions: Any, queue: Any, task_id: str) -> str:
    async with sessions() as s:
        t = await s.scalar(select(BackgroundTask).where(BackgroundTask.id == task_id))
    job_id = task_job_id(t.id, t.run)
    (state,) = await job_states(queue, [job_id])  # one round trip, as the dispatcher reads
    job = await queue.getJob(job_id) if state is not None else None  # for its progress
    state = state or "-"
    rows = [("task", "run", "status", "progress", "execution", "job", "queue", "q.progress"),
            (t.id, str(t.run), t.status.value, str(t.progress), (t.execution_id or "-")[:8],
             task_job_id(t.id, t.run), state, str(job.progress if job else "-"))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                     for r in rows)


class _Race:
    """The two executors' checkpoints: A pauses after its read, B after its claim, until
    the narration releases them (probes, P2; no sleeps)."""

    def __init__(self) -> None:
        self.signals = _Signals()
        self.release_a, self.release_b = asyncio.Event(), asyncio.Event()

    async def probe(self, point: str, ctx: dict[str, Any]) -> None:
        if point == "export.after_read" and ctx.get("actor") == "A" and not self.release_a.is_set():
            self.signals.fire("a_paused", **ctx)
            await self.release_a.wait()
        if point == "claim.after" and ctx.get("actor") == "B":
            self.signals.fire("b_claimed", **ctx)
            await self.release_b.wait()

    def on_event(self, kind: str, fields: dict[str, Any]) -> None:
        if kind == "stalled":
            self.signals.fire("stalled", **fields)
        if kind == "completed" and fields.get("actor") == "B":
            self.signals.fire("b_done", **fields)

    def release(self) -> None:
        self.release_a.set()
        self.release_b.set()


async def _narrate(world: World, queue: Any, race: _Race, workers: list[Any],
                   pause: bool) -> int:
    """The six steps of ch. 26 §4, each followed by the ledger-and-queue table."""
    settings, sessions, signals = world.settings, world.sessions, race.signals

    async def step(n: int, text: str, task_id: str) -> None:
        print(f"\n[{n}] {text}")
        print(await _table(sessions, queue, task_id))
        if pause:
            await asyncio.get_running_loop().run_in_executor(None, input, "    (Enter) ")

    async with sessions() as s:
        await seed_demo(s, tickets=120)
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]},
                                            settings=settings)
    await step(1, f"ben requests an export: task {task.id}, WAITING, run 0 (outbox row, "
                  "no Redis call yet)", task.id)
    await dispatch_tasks(queue, settings)
    await step(2, f"the dispatcher adds job {task_job_id(task.id, 0)} and notes "
                  "dispatched_at", task.id)
    workers.append(await create_task_worker(
        settings.replace(lock_duration_ms=1000, stalled_interval_ms=60_000),
        actor="A", renew_lock=False, on_event=race.on_event))
    a = await signals.wait("a_paused")
    await step(3, f"executor A claims lease E1={a['execution_id'][:8]} and is paused after "
                  "reading (lock 1 s, renewal off)", task.id)
    workers.append(await create_task_worker(
        settings.replace(stalled_interval_ms=100), actor="B", on_event=race.on_event))
    await signals.wait("stalled")
    b = await signals.wait("b_claimed")
    await step(4, f"A's lock expired; B's stall check moved the job back (real 'stalled' "
                  f"event); B claimed E2={b['execution_id'][:8]}", task.id)
    race.release_a.set()
    lost = await signals.wait("lease_lost")
    await step(5, "A comes back late and writes progress with E1: 0 rows matched → "
                  f"LeaseLost, A stops\n    log: {lost['line']}", task.id)
    race.release_b.set()
    await signals.wait("b_done")
    async with sessions() as s:
        row = await s.get(BackgroundTask, task.id)
    await step(6, f"B completes: {row.result_summary}", task.id)
    lines = row.result_csv.count("\n") - 1
    print(f"\nverdict: A's write matched 0 rows; B's CSV saved ({lines} rows, "
          f"execution {b['execution_id'][:8]}). Computation ran twice; the committed "
          "result exists once (P12).")
    return 0


async def run_race_demo(settings: Settings, *, pause: bool = False) -> int:
    """Run the narrated race once against the configured servers, in a world of its own
    (`devkit.world.World`: a template clone and a fresh prefix, both gone afterwards);
    returns an exit code."""
    world = await World.open_async(settings.replace(backoff_delay_ms=100), "demo")
    queue = create_task_queue(world.settings)
    race = _Race()
    handler = _LeaseLostLog(race.signals)
    processor_log = logging.getLogger("teamdesk.processor")
    processor_log.addHandler(handler)
    processor_log.setLevel(logging.INFO)
    workers: list[Any] = []
    uninstall = probes.install(race.probe)
    try:
        return await _narrate(world, queue, race, workers, pause)
    finally:
        uninstall()
        processor_log.removeHandler(handler)
        race.release()
        for w in workers:
            await w.close(timeout=3)
        await queue.close()
        await world.close()
