"""Real faults for a lab: a Redis outage, a cut network path, lost Redis data, a failing
ledger write. Nothing here is simulated: the server really stops, the socket really
closes, the keys are really gone.

    async with redis_outage(lab):            # the embedded Redis server stops ...
        await lab.dispatch()                 # ... a dispatcher tick fails in seconds
                                             # and it is started again, even on error
    proxy = await RedisProxy.start(lab)      # a TCP proxy in front of Redis
    await lab.start_worker("A", redis_url=proxy.url)
    await proxy.cut()                        # A's connections drop; B's do not
    await proxy.heal()
    await flush_prefix(lab)                  # every key of this lab's queue is gone
    fail_next_write(lab, "export.before_result")   # the result write fails once
    staged = await final_report_fails(lab, {"status": ["OPEN"]})   # Fault B, on a worker

Every function takes a target: a `Lab` (its settings, and its history records the fault),
or plain `Settings`.

**Stopping Redis stops it for everyone using that server**, and the embedded server keeps
no data across a restart: every queue of every prefix is empty afterwards. The lab only
stops a server it owns: one started by `devkit.services` for this project's data
folder (or the `root` you pass). A `REDIS_URL` pointing at any other server is refused
with `NotOurRedis`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psutil

from devkit import services
from labs.gates import Fault
from teamdesk.config import Settings
from teamdesk.redaction import redact
from teamdesk.tasks.queue import delete_prefix, redis_client, task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: (data folder, port) of servers this process stopped, so it may start them again.
_STOPPED: set[tuple[Path, int]] = set()


class NotOurRedis(RuntimeError):
    """The Redis at the target's URL was not started by this project's dev environment
    (`devkit.services`), so the lab refuses to stop or start it."""


class InjectedWriteError(ConnectionError):
    """The injected failure of `fail_next_write`: looks like a lost database connection,
    which the processor treats as a retryable error (P7)."""


def _settings(target: Any) -> Settings:
    settings = getattr(target, "settings", target)
    if not isinstance(settings, Settings) or not settings.redis_url:
        raise TypeError("target must be a Lab or resolved Settings (with redis_url)")
    return settings


def _note(target: Any, detail: str, type_: str = "info") -> None:
    history = getattr(target, "history", None)
    if history is not None:
        history.add(actor="lab", type=type_, op="fault", detail=detail)


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 6379


# ---------------------------------------------------------------- the Redis server


def _listener(port: int) -> psutil.Process | None:
    """The Redis-compatible server process listening on `port` of this machine, if any."""
    for proc in psutil.process_iter(["name"]):
        if not (proc.info.get("name") or "").startswith(services.REDIS_SERVER_NAMES):
            continue
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
               for c in conns):
            return proc
    return None


def _embedded_port(folder: Path) -> int | None:
    """The port `devkit.services` recorded for the project's embedded Redis (default data
    folder only), e.g. to start it again after another process stopped it."""
    if folder != services.data_dir().resolve():
        return None
    url = services.status().get("redis_url")
    return _host_port(url)[1] if url else None


def _owned(settings: Settings, root: str | Path | None) -> tuple[Path, int, bool]:
    """(data folder, port, running) of the embedded Redis at `settings.redis_url`, or
    `NotOurRedis` explaining why it is not ours."""
    host, port = _host_port(settings.redis_url or "")
    url = redact(settings.redis_url)  # only ever shown (S2)
    folder = Path(root or services.data_dir()).resolve()
    hint = ("labs.faults only stops the Redis that `devkit.services` started for this "
            f"project ({folder}); stop yours yourself (e.g. `docker compose stop redis`), or "
            "unset REDIS_URL to use the embedded one.")
    if host not in _LOOPBACK:
        raise NotOurRedis(f"REDIS_URL {url} is on another host ({host}). {hint}")
    proc = _listener(port)
    if proc is None:
        if (folder, port) in _STOPPED or _embedded_port(folder) == port:
            return folder, port, False
        raise NotOurRedis(f"no Redis server of ours listens at {url}, and labs.faults did not "
                          f"stop one there. {hint}")
    try:
        cwd = Path(proc.cwd()).resolve()
    except (psutil.AccessDenied, psutil.NoSuchProcess) as err:
        raise NotOurRedis(f"cannot inspect the Redis server at {url} ({err}). {hint}") from None
    # S3's one check (the dev environment's): the embedded server of `folder` runs in
    # `folder/redis`, the folder `start_redis` gives it.
    if not services.is_server(proc.pid, services.REDIS_SERVER_NAMES, folder / "redis"):
        raise NotOurRedis(f"the Redis server at {url} (pid {proc.pid}, working folder {cwd}) "
                          f"was not started by this project. {hint}")
    return folder, port, True


async def stop_redis(target: Any, *, root: str | Path | None = None) -> None:
    """Really stop the embedded Redis server behind `target` (SIGTERM, wait for exit), so
    every client gets "connection refused". Its data is lost (no persistence).

    Affects every client of that server, not just this lab. Refuses (`NotOurRedis`) if the
    URL does not point at the embedded server of this project's data folder (or `root`).
    Pair it with `start_redis` in a `finally`, or use `redis_outage`."""
    settings = _settings(target)
    folder, port, running = _owned(settings, root)
    if not running:
        return
    await asyncio.to_thread(services.stop_redis, folder)
    _STOPPED.add((folder, port))
    _note(target, f"redis stopped (port {port})")


async def start_redis(target: Any, *, root: str | Path | None = None) -> None:
    """Start the embedded Redis server again on the same port (idempotent); it comes back
    empty. Only a server `stop_redis` stopped, or one that is ours and running."""
    settings = _settings(target)
    folder, port, running = _owned(settings, root)
    if running:
        _STOPPED.discard((folder, port))
        return
    await asyncio.to_thread(services.start_redis, folder, port)
    _STOPPED.discard((folder, port))
    _note(target, f"redis started (port {port}, empty)")


@contextlib.asynccontextmanager
async def redis_outage(target: Any, *, root: str | Path | None = None) -> AsyncIterator[None]:
    """`async with redis_outage(lab): ...` — Redis is stopped inside the block and started
    again when it ends, even if the block raises."""
    await stop_redis(target, root=root)
    try:
        yield
    finally:
        await start_redis(target, root=root)


# ---------------------------------------------------------------- the TCP proxy


class RedisProxy:
    """A TCP proxy on 127.0.0.1 (random port) in front of the target's Redis.

    Give its address to ONE client (`proxy.url`, or `proxy.settings` whose `redis_url`
    goes through it); every other client keeps connecting directly. Then `await
    proxy.cut()` closes that client's live connections (they see a reset) and refuses
    new ones (connection refused), until `await proxy.heal()`. `await proxy.close()` (or
    `async with`) stops it for good. Create it with `await RedisProxy.start(target)`."""

    def __init__(self, settings: Settings, note: Any = None) -> None:
        self.upstream = _host_port(settings.redis_url or "")
        self._base = settings
        self._note_target = note
        self.port: int = 0
        self._server: asyncio.AbstractServer | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._pumps: set[asyncio.Task] = set()
        self.is_cut = False
        self._closed = False
        #: Connections accepted so far (a client reconnecting shows up here).
        self.accepted = 0

    @classmethod
    async def start(cls, target: Any) -> RedisProxy:
        """Start listening on 127.0.0.1 on a random free port; returns the proxy."""
        proxy = cls(_settings(target), note=target)
        await proxy._listen()
        if hasattr(target, "add_cleanup"):
            target.add_cleanup(proxy.close)  # a lab stops its proxies when it closes
        _note(target, f"proxy started on port {proxy.port}")
        return proxy

    @property
    def url(self) -> str:
        """The Redis URL through the proxy (same database number and credentials)."""
        parts = urlsplit(self._base.redis_url or "")
        netloc = parts.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        return urlunsplit((parts.scheme, f"{auth}127.0.0.1:{self.port}", parts.path,
                           parts.query, parts.fragment))

    @property
    def settings(self) -> Settings:
        """The target's settings with `redis_url` through the proxy."""
        return self._base.replace(redis_url=self.url)

    @property
    def connections(self) -> int:
        """Live client connections through the proxy right now."""
        return len(self._links)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        link = (writer, up_writer)
        self._links.add(link)
        pumps = [asyncio.ensure_future(self._pump(reader, up_writer)),
                 asyncio.ensure_future(self._pump(up_reader, writer))]
        self._pumps.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pumps:
                p.cancel()
            self._pumps.difference_update(pumps)
            self._links.discard(link)
            for w in link:
                w.transport.abort()

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()

    async def cut(self) -> int:
        """Reset every live connection through the proxy and refuse new ones (the port
        stops listening: "connection refused"). Returns how many were cut."""
        self.is_cut = True
        if self._server is not None:
            self._server.close()
            self._server = None
        links = list(self._links)
        for link in links:
            for w in link:
                w.transport.abort()
        _note(self._note_target, f"proxy {self.port} cut ({len(links)} connection(s))")
        return len(links)

    async def heal(self) -> None:
        """Listen again on the same port; clients reconnect on their next command."""
        if self._closed:
            raise RuntimeError("this proxy is closed; start a new one")
        if not self.is_cut:
            return
        await self._listen()
        self.is_cut = False
        _note(self._note_target, f"proxy {self.port} healed")

    async def close(self) -> None:
        """Stop the proxy for good (live connections are reset); idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.cut()
        for p in list(self._pumps):
            p.cancel()

    async def __aenter__(self) -> RedisProxy:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "cut" if self.is_cut else "open"
        return (f"<RedisProxy 127.0.0.1:{self.port} -> {self.upstream[0]}:{self.upstream[1]} "
                f"{state} connections={self.connections}>")


# ---------------------------------------------------------------- lost Redis data


async def flush_prefix(target: Any) -> int:
    """Delete every Redis key under the target's BullMQ prefix (its queue, jobs, locks,
    events): a whole-queue loss for this lab only. Returns how many keys were deleted."""
    settings = _settings(target)
    client = redis_client(settings)
    try:
        deleted = await delete_prefix(client, settings.queue_prefix)
    finally:
        await client.aclose()
    _note(target, f"flushed {deleted} keys under prefix {settings.queue_prefix}")
    return deleted


async def flushall_everything(target: Any, *, root: str | Path | None = None) -> None:
    """FLUSHALL on the target's Redis server: EVERY key of EVERY database is deleted — all
    labs, all tests, all prefixes, anything else using that server. Use `flush_prefix`
    to lose only this lab's queue.

    Only on a server of ours: the lab's own (`Lab.open(..., private_redis=True)`) or the
    embedded Redis of this project's data folder (or `root`). A shared server — a
    classroom's REDIS_URL, docker-compose — is refused with `NotOurRedis`: there FLUSHALL
    would wipe every other learner's queues."""
    settings = _settings(target)
    server = getattr(target, "private_redis", None)
    if server is None or settings.redis_url != server.url:
        _owned(settings, root)  # NotOurRedis unless it is the embedded server we run
    client = redis_client(settings)
    try:
        await client.flushall()
    finally:
        await client.aclose()
    _note(target, "FLUSHALL: every key on the server deleted")


# ---------------------------------------------------------------- a failing ledger write

#: Probe points that come right before a ledger write, and the write that will fail.
WRITE_POINTS: dict[str, str] = {
    "claim.before": "the claim UPDATE (P2)",
    "export.after_read": "the batch's progress write (P4)",
    "export.before_result": "the export result write (P5)",
    "reminder.after_event": "the reminder's completion UPDATE: its whole transaction rolls "
                            "back (P10)",
    "error.before_write": "the error report (P7)",
}


def fail_next_write(target: Any, point: str, *, actor: str | None = None,
                    error: BaseException | None = None, times: int = 1) -> Fault:
    """Make the ledger write that follows `point` fail once (or `times` times): a
    `labs.gates.Fault` raising `InjectedWriteError` there, before the write runs, as a
    lost database connection would. `point` is one of `WRITE_POINTS`.

    With a `Lab` as target the fault only strikes that lab's executors (and `actor`, if
    given) and is removed when the lab closes; with `None` it is process-wide and you
    must `close()` it yourself. Returns the fault (`fault.fired` counts strikes)."""
    if point not in WRITE_POINTS:
        raise ValueError(f"{point!r} is not followed by a ledger write; use one of "
                         f"{', '.join(WRITE_POINTS)}")
    error = error or InjectedWriteError(
        f"injected fault: {WRITE_POINTS[point]} failed after {point}")
    if target is None:
        return Fault(point, error, actor=actor, times=times)
    if not hasattr(target, "fault"):
        raise TypeError("target must be a Lab (or None for a process-wide fault)")
    return target.fault(point, error, actor=actor, times=times)


# ---------------------------------------------------------------- Fault B, staged whole

#: The error of `final_report_fails`: the queue connection lost right after the commit.
FINAL_REPORT_ERROR = "queue report of 100 failed"


@dataclass(frozen=True)
class FinalReportFailed:
    """What `final_report_fails` staged: the export and the queue's last word on its job."""

    task_id: str
    job_id: str
    #: The queue's `completed` event of the job, or its exhausted `failed` one — whichever
    #: came (`Lab.done_with`): the staging names no outcome, the caller asserts it.
    ended: dict[str, Any]


async def final_report_fails(lab: Lab, filters: dict[str, Any], *, user: str = "ben",
                             actor: str = "W", timeout: float = 8.0) -> FinalReportFailed:
    """The book's Fault B (ch. 26 §7) on a real worker, the one staging that 26a's contrast
    and 26d's diagnosis case both run: a new export (`filters`, requested by `user`) is
    dispatched to worker `actor` (started anew, 25 tickets a batch); its result UPDATE
    commits, and the report that follows it, `update_progress(100)`, fails (a
    `ConnectionError` at the probe `export.after_result`, this task only). What happens
    then is P9's to say; the staging waits (bounded) until the queue is done with the job
    and returns its last event. Needs a `Lab`: its workers, dispatcher and faults."""
    task = await lab.request_export(filters, user=user)
    lab.fault("export.after_result", ConnectionError(FINAL_REPORT_ERROR),
              when=lambda ctx: ctx["task_id"] == task.id)
    await lab.start_worker(actor, export_batch_size=25)
    await lab.dispatch()
    job_id = task_job_id(task.id, task.run)
    return FinalReportFailed(task.id, job_id, await lab.done_with(job_id, timeout))
