"""The worker process (ch. 30, inferred; W4, D6, D8): `teamdesk worker`.

One process runs the task worker built by `create_task_worker` (W1) and, beside it, the
dispatch tick loop (D8). It writes a heartbeat, logs structured lines, and on SIGTERM or
SIGINT drains: the dispatch loop stops, the worker stops fetching, the running job gets
`drain_timeout_s` to finish, connections close, exit 0. Past the timeout the job is
abandoned (force close) and the process exits 3; whatever it left RUNNING is picked up
by another worker's stall check or by the dispatcher's stale recovery (D6). That order is
`drain_in_order`, over the steps of `Stopping`; `run_worker_process(seams=Seams(drain=...))`
takes another one, for a lab exercise that has a learner write it (`labs.drain_worker`).

Heartbeat: a Redis key `<prefix>:teamdesk:heartbeat:<name>` holding JSON (pid, host,
started_at, beat_at, ticks, faults), refreshed every `heartbeat_ttl_s / 3` with a TTL of
`heartbeat_ttl_s`. It is deleted on a clean exit and expires on its own after a kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis.asyncio as aioredis

from teamdesk import probes
from teamdesk.config import Settings
from teamdesk.tasks.dispatch_loop import DispatchLoop
from teamdesk.tasks.lease import Fence, leased_update
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.queue import create_task_queue, redis_client
from teamdesk.tasks.reminder_effects import ReminderEffects, write_reminder_effects
from teamdesk.tasks.worker import TaskWorker, create_task_worker

log = logging.getLogger("teamdesk.runner")

#: Exit code when the drain timeout passed with a job still running.
EXIT_DRAIN_TIMEOUT = 3

#: `on_worker(worker)`: called with the process's task worker once it is built, before it
#: takes its first job — to attach a listener of one's own to `worker.worker` (bullmq's
#: `on`), e.g. the retired `failed` listener a lab shows (`labs.counterexample_worker`).
WorkerHook = Callable[[TaskWorker], None]


@dataclass
class Stopping:
    """What a worker process holds once it was told to stop, as the steps of its drain
    (W4). `drain(stopping)` (see `Drain`) calls them in its order and returns the exit
    code; `drain_in_order` is the product's. Each step can be called once; the process
    records what happened (`abandoned`) so its last log line says the truth whatever the
    drain returned."""

    name: str
    settings: Settings
    _ticks: DispatchLoop = field(repr=False)
    _worker: TaskWorker = field(repr=False)
    _beating: asyncio.Task = field(repr=False)
    _beat_client: aioredis.Redis = field(repr=False)
    _queue: object = field(repr=False)
    _ledger: Ledger = field(repr=False)
    #: True once `close_worker` had to abandon a running job (its timeout passed).
    abandoned: bool = False

    async def stop_ticks(self) -> None:
        """The dispatch tick stops: this process enqueues nothing more (D8)."""
        await self._ticks.stop()

    async def close_worker(self, timeout: float) -> bool:
        """The task worker stops fetching jobs and lets the running one finish within
        `timeout` seconds, then forces; True if it finished in time (the job is done or
        returned), False if it was abandoned (left RUNNING for D6)."""
        graceful = await self._worker.close(timeout=timeout)
        self.abandoned = self.abandoned or not graceful
        return graceful

    async def stop_heartbeat(self) -> None:
        """The heartbeat loop ends and its key is deleted: the process says it is gone."""
        await self._beating
        with contextlib.suppress(Exception):
            await self._beat_client.delete(heartbeat_key(self.settings, self.name))

    async def close_connections(self) -> None:
        """The heartbeat's Redis client, the queue and the ledger's pool close."""
        with contextlib.suppress(Exception):
            await self._beat_client.aclose()
        with contextlib.suppress(Exception):
            await self._queue.close()  # type: ignore[attr-defined]
        await self._ledger.close()


#: `drain(stopping)`: the worker process's shutdown once SIGTERM/SIGINT came (W4): the
#: steps of `Stopping` in an order, and the exit code. A lab exercise passes its own
#: (`labs.drain_worker`); the product and the command line use `drain_in_order`.
Drain = Callable[[Stopping], Awaitable[int]]


async def drain_in_order(stopping: Stopping) -> int:
    """W4's order: stop enqueuing, stop fetching and let the running job finish within
    `drain_timeout_s`, end the heartbeat, close the connections; exit 0, or
    `EXIT_DRAIN_TIMEOUT` when the running job had to be abandoned."""
    await stopping.stop_ticks()
    graceful = await stopping.close_worker(stopping.settings.drain_timeout_s)
    await stopping.stop_heartbeat()
    await stopping.close_connections()
    return 0 if graceful else EXIT_DRAIN_TIMEOUT


def heartbeat_key(settings: Settings, name: str) -> str:
    return f"{settings.queue_prefix}:teamdesk:heartbeat:{name}"


async def read_heartbeats(client: aioredis.Redis, settings: Settings) -> dict[str, dict]:
    """Live worker processes of this prefix, by name (for `teamdesk tasks`, labs, tests)."""
    out = {}
    async for key in client.scan_iter(match=heartbeat_key(settings, "*")):
        raw = await client.get(key)
        if raw:
            out[key.rsplit(":", 1)[1]] = json.loads(raw)
    return out


@dataclass(frozen=True)
class Seams:
    """What a worker process may be given instead of the product's own parts: one value, so
    an entry point passes all of it in one place. `teamdesk worker` runs `PRODUCT` (the
    command line sets none of it); a lab's entry point passes an old fence, effects step or
    listener for one run of its own (`labs.counterexample_worker`) or a learner's drain
    (`labs.drain_worker`)."""

    #: Sees the task worker once it is built, before its first job (`WorkerHook`).
    on_worker: WorkerHook | None = None
    #: The function every fenced write of the task worker goes through (P3,
    #: `create_task_worker(fence=...)`).
    fence: Fence = leased_update
    #: The reminder's effect-writing step (P10, `create_task_worker(reminder_effects=...)`).
    reminder_effects: ReminderEffects = write_reminder_effects
    #: The shutdown once the stop came (W4, `Drain`); None is `drain_in_order`.
    drain: Drain | None = None


#: The product's own parts: what `teamdesk worker` runs.
PRODUCT = Seams()


async def run_worker_process(settings: Settings, *, name: str | None = None,
                             stop: asyncio.Event | None = None,
                             seams: Seams = PRODUCT) -> int:
    """Run until SIGTERM/SIGINT (or `stop` is set); returns the process exit code, with
    the product's parts or a lab's `seams`.

    The loop's SIGTERM/SIGINT handlers are installed here and nowhere else (W4): they set
    `stop`. A caller that saw a signal before this loop ran (`teamdesk worker` while it
    starts) passes `stop` already set; the worker then exits 0 without starting."""
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if stop.is_set():  # W4: stopped while still starting; nothing to drain, exit 0
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        log.info("worker.stopped name=%s before_start=true", name)
        return 0
    uninstall_hold = probes.install_hold_from_env()

    queue = create_task_queue(settings)
    beat_client = redis_client(settings)
    # One pool for the process: a connection per concurrent job, one for the tick (D8).
    ledger = await Ledger.pooled(settings.database_url, size=settings.worker_concurrency + 1)
    worker = await create_task_worker(settings, actor=name, ledger=ledger, start=False,
                                      fence=seams.fence,
                                      reminder_effects=seams.reminder_effects)
    if seams.on_worker is not None:
        seams.on_worker(worker)
    worker.start()
    # The tick runs on the ledger (D8); the loop's `sessions` argument is not used by it.
    # D8: a committed outbox INSERT wakes the tick at once (LISTEN, migration 0003).
    ticks = DispatchLoop(queue, settings, ledger=ledger, listen=True)
    ticks.start()
    started = datetime.now(UTC).isoformat()
    log.info("worker.started name=%s pid=%s queue=%s prefix=%s concurrency=%s", name,
             os.getpid(), settings.queue_name, settings.queue_prefix,
             settings.worker_concurrency)

    async def beat() -> None:
        key = heartbeat_key(settings, name)
        while True:
            payload = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": started,
                       "beat_at": datetime.now(UTC).isoformat(), "ticks": ticks.ticks,
                       "faults": ticks.faults}
            try:
                await beat_client.set(key, json.dumps(payload),
                                      px=int(settings.heartbeat_ttl_s * 1000))
            except Exception as err:  # Redis down: the dispatch loop reports it too
                log.warning("worker.heartbeat_failed error=%s: %s", type(err).__name__, err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.heartbeat_ttl_s / 3)
            if stop.is_set():
                return

    beating = asyncio.create_task(beat())
    await stop.wait()
    t0 = time.monotonic()
    log.info("worker.draining name=%s timeout_s=%s", name, settings.drain_timeout_s)
    stopping = Stopping(name, settings, ticks, worker, beating, beat_client, queue, ledger)
    code = await (seams.drain or drain_in_order)(stopping)
    if uninstall_hold:
        uninstall_hold()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    if not stopping.abandoned:
        log.info("worker.stopped name=%s drained_in_s=%.2f exit=%s", name,
                 time.monotonic() - t0, code)
        return code
    log.error("worker.drain_timeout name=%s timeout_s=%s exit=%s: running job abandoned; "
              "stall detection or stale recovery (D6) will pick it up", name,
              settings.drain_timeout_s, code)
    return code


def worker_main(resolve: Callable[[], Settings], *, name: str | None = None,
                seams: Seams = PRODUCT) -> int:
    """A worker process from its start to its exit code: `resolve()` gives the settings
    (servers may be started there), then `run_worker_process` until SIGTERM/SIGINT.
    `teamdesk worker` calls it with the product's parts, a lab's entry point with its
    `seams`. Redis or a socket failing at start is one line on stderr and exit 2 (a
    supervisor restarts us; S2: the URL and the driver's text are redacted)."""
    from redis.exceptions import RedisError

    from teamdesk.redaction import redact, redact_text

    # W4: a SIGTERM/SIGINT while we are still starting (services, imports, connections)
    # is a request to stop, not a reason to die by the default action: remember it, and
    # the worker drains (nothing to drain yet) and exits 0. The loop's handlers are
    # `run_worker_process`'s; until they are in, this one also sets the loop's `stop`, so
    # no signal falls between the two.
    early: list[int] = []
    stop: asyncio.Event | None = None

    def on_early_signal(signum: int, frame: object) -> None:
        early.append(signum)
        if stop is not None:
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_early_signal)

    async def run(settings: Settings) -> int:
        nonlocal stop
        stop = asyncio.Event()
        if early:
            stop.set()
        return await run_worker_process(settings, name=name, stop=stop, seams=seams)

    settings = None
    try:
        settings = resolve()
        if early:
            print("teamdesk: stop requested while starting; the worker did not start",
                  file=sys.stderr)
            return 0
        return asyncio.run(run(settings))
    except (RedisError, OSError) as err:
        where = redact(settings.redis_url) if settings else "(not resolved)"
        print(f"teamdesk: cannot start the worker, Redis at {where} is not "
              f"reachable ({type(err).__name__}: {redact_text(str(err))})", file=sys.stderr)
        return 2
