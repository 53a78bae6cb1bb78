"""The task path's way to PostgreSQL: named SQL statements on psycopg 3.

Measured: the same three lease-fenced UPDATEs per task cost 0.66 ms of CPU
through psycopg 3 async with prepared statements, 4.4 ms through SQLAlchemy Core async and
5.6 ms through per-step ORM sessions with pre-ping. So the claim, every fenced write, the
executors' reads, the reminder transaction and the dispatcher's scan / mark / recovery /
purge run the statements of `queries.sql` directly; SQLAlchemy stays for the models, the
migrations, the business services and the labs.

- `QUERIES` is the name → text registry, loaded once from `queries.sql` (procrastinate's
  shape: a reader goes from a name in Python to its SQL in one hop).
- `Ledger` hands out connections: from an `AsyncConnectionPool` for a worker process, or
  one fresh connection per checkout for code that runs a task now and then (tests, labs,
  a one-off dispatcher tick). Connections are in autocommit; a multi-statement step opens
  `conn.transaction()` itself. One connection is checked out per executor run or tick.
- No pre-ping per checkout (it costs a round trip each time). A connection that broke
  (PostgreSQL restarted) makes that step fail into the normal retry path (P7, D8); the pool
  discards it on return, and the first such error triggers a check of the idle ones so the
  next steps get working connections.
- What ran can be recorded: `Ledger(url, recorder=StatementLog())` hands out connections
  that tell the recorder the name and parameters of each statement of `QUERIES` they send
  (procrastinate's in-memory connector does the same for its tests). Tests assert on what
  ran, by name, never on source text. A ledger without a recorder hands out plain psycopg
  connections: nothing is looked up or kept on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool

log = logging.getLogger("teamdesk.ledger")

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(\w+)\}\}")


def load_queries(path: Path | None = None) -> dict[str, str]:
    """Parse `-- name --` sections into {name: statement text}. Comment lines are kept
    out of the text; a duplicate name is an error (it would silently shadow the first).
    A section named `_…` is a fragment: written into the statements that say `{{_…}}`
    and not a statement itself; an unknown fragment is an error."""
    source = (path or Path(__file__).with_name("queries.sql")).read_text(encoding="utf-8")
    parts = _HEADER.split(source)
    sections: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in sections:
            raise ValueError(f"queries.sql: statement {name!r} is defined twice")
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        sections[name] = "\n".join(lines).strip().rstrip(";")

    def fragment(match: re.Match[str]) -> str:
        name = match.group(1)
        if not name.startswith("_") or name not in sections:
            raise ValueError(f"queries.sql: no fragment named {name!r}")
        return sections[name]

    return {name: _INCLUDE.sub(fragment, text) for name, text in sections.items()
            if not name.startswith("_")}


#: name → SQL text of every statement the task path runs.
QUERIES: dict[str, str] = load_queries()


def sql(name: str) -> str:
    """The text of statement `name`; KeyError names the missing statement."""
    try:
        return QUERIES[name]
    except KeyError:
        raise KeyError(f"no statement named {name!r} in teamdesk/tasks/queries.sql") from None


async def execute(conn: psycopg.AsyncConnection, name: str,
                  params: dict[str, Any] | None = None) -> psycopg.AsyncCursor:
    """Run statement `name`; the cursor gives rows and `rowcount`."""
    return await conn.execute(QUERIES[name], params)  # type: ignore[arg-type]


async def fetch_one(conn: psycopg.AsyncConnection, name: str,
                    params: dict[str, Any] | None = None) -> Any:
    """The first row of statement `name` (a named tuple), or None."""
    return await (await execute(conn, name, params)).fetchone()


async def fetch_all(conn: psycopg.AsyncConnection, name: str,
                    params: dict[str, Any] | None = None) -> list[Any]:
    return await (await execute(conn, name, params)).fetchall()


_CONNECT_KWARGS: dict[str, Any] = {"autocommit": True, "row_factory": namedtuple_row}

#: `recorder(name, params)` hears of each statement of `QUERIES` a recording ledger's
#: connection sends, before it is sent.
StatementRecorder = Callable[[str, Mapping[str, Any]], None]

#: statement text → name, for the recording connections.
_NAMES: dict[str, str] = {text: name for name, text in QUERIES.items()}


class StatementLog:
    """A `StatementRecorder` that keeps what ran, in order:

        log = StatementLog()
        ledger = Ledger(url, recorder=log)
        ...
        assert log.queries[-1] == ("export_result", {...})
        assert log.names == ["claim", "export_start", "progress", ...]
    """

    def __init__(self) -> None:
        #: (statement name, a copy of its parameters), oldest first.
        self.queries: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, params: Mapping[str, Any]) -> None:
        self.queries.append((name, dict(params)))

    @property
    def names(self) -> list[str]:
        """The statement names, in the order they ran."""
        return [name for name, _ in self.queries]

    def clear(self) -> None:
        self.queries.clear()


class _RecordingConnection(psycopg.AsyncConnection):
    """A connection that tells `recorder` the name of each named statement it sends. Only a
    ledger with a recorder makes these; text that is not in `QUERIES` is not recorded."""

    recorder: StatementRecorder | None = None

    async def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                      binary: bool = False) -> Any:
        if self.recorder is not None and isinstance(query, str):
            name = _NAMES.get(query)
            if name is not None:
                self.recorder(name, params or {})
        return await super().execute(query, params, prepare=prepare, binary=binary)


class Ledger:
    """Connections to the ledger database for the task path.

    `Ledger(url)` connects once per checkout (nothing to close); `await
    Ledger.pooled(url, size)` owns an open `AsyncConnectionPool` that `close()` ends.
    With `recorder` (see `StatementRecorder`, `StatementLog`) every connection it hands out
    reports the named statements it runs; a pool passed in records only if `pooled` made it.
    """

    def __init__(self, database_url: str, pool: AsyncConnectionPool | None = None, *,
                 recorder: StatementRecorder | None = None) -> None:
        if not database_url:
            raise ValueError("the ledger needs a database URL (settings.database_url)")
        self.database_url = database_url
        self.pool = pool
        self.recorder = recorder
        self._checking: asyncio.Task[None] | None = None

    @classmethod
    async def pooled(cls, database_url: str, size: int = 2, *, timeout: float = 10.0,
                     recorder: StatementRecorder | None = None) -> Ledger:
        """A ledger on an open pool of `size` connections (created with `open=False` and
        opened here, inside the running loop). `timeout` bounds a checkout while the
        server is unreachable; the step then fails into the retry path."""
        extra: dict[str, Any] = {}
        if recorder is not None:
            async def configure(conn: _RecordingConnection) -> None:
                conn.recorder = recorder

            extra = {"connection_class": _RecordingConnection, "configure": configure}
        pool = AsyncConnectionPool(database_url, min_size=size, max_size=size,
                                   kwargs=dict(_CONNECT_KWARGS), timeout=timeout,
                                   open=False, name="teamdesk-ledger", **extra)
        await pool.open(wait=True, timeout=timeout)
        return cls(database_url, pool, recorder=recorder)

    async def _connect(self) -> psycopg.AsyncConnection:
        if self.recorder is None:
            return await psycopg.AsyncConnection.connect(self.database_url, **_CONNECT_KWARGS)
        conn = await _RecordingConnection.connect(self.database_url, **_CONNECT_KWARGS)
        conn.recorder = self.recorder
        return conn

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """One connection for one executor run or one dispatcher tick."""
        try:
            if self.pool is None:
                conn = await self._connect()
                async with conn:
                    yield conn
            else:
                async with self.pool.connection() as conn:
                    yield conn
        except psycopg.OperationalError:
            self._check_idle()
            raise

    @contextlib.asynccontextmanager
    async def fresh_connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """A connection outside the pool, for the error report of a run whose pooled
        connection broke (P7): the broken one is still checked out, so a pool of one
        would make the report wait for itself."""
        conn = await self._connect()
        async with conn:
            yield conn

    def _check_idle(self) -> None:
        """After a connection error, test the idle pooled connections in the background so
        later checkouts do not each meet a dead one (at most one check at a time)."""
        if self.pool is None or (self._checking is not None and not self._checking.done()):
            return
        pool = self.pool

        async def check() -> None:
            try:
                await pool.check()
            except Exception as err:  # still down: the next failure checks again
                log.warning("ledger.check_failed error=%s", type(err).__name__)

        self._checking = asyncio.ensure_future(check())

    async def close(self) -> None:
        """Close the pool (if any). Safe to call twice."""
        if self._checking is not None and not self._checking.done():
            self._checking.cancel()
            with contextlib.suppress(BaseException):
                await self._checking
        if self.pool is not None and not self.pool.closed:
            await self.pool.close(timeout=5.0)
