"""One `World`: an isolated place to run the task system in, and its clean-up.

A world is three things, and nothing else:

- **a database** cloned from the migrated template (`CREATE DATABASE … TEMPLATE`,
  milliseconds; `teamdesk.db.templates`), named `teamdesk_<label>_<10 hex>`;
- **a fresh BullMQ prefix** `<label><10 hex>`, so its queue, jobs, locks, events and
  heartbeats live under keys no other world touches — made in the settings' queue
  namespace when there is one (`td:learner01:<label><10 hex>` on class servers, where
  the learner's Redis ACL allows no other keys; `Settings.queue_prefix_for`);
- **its clean-up** (`close()`): delete every key under the prefix
  (`teamdesk.tasks.queue.delete_prefix`), dispose the engine, drop the database.

The test fixtures (`tests/conftest.py`), a lab (`labs.lab.Lab`), the benchmarks and chaos
runs (`labs.procs`) and the terminal demo each need exactly this; they build it here
rather than each cloning and cleaning in its own way. What a user of a world adds on top
(seed data, workers, a queue object, a private Redis server) stays theirs to close.

    world = await World.open_async(settings, "demo")   # in async code
    world = World.open(settings, "bench")              # in a script (blocks for the clone)
    try:
        async with world.sessions() as session: ...    # world.settings: URL + prefix
    finally:
        await world.close()

    async with await World.open_async(settings, "t") as world: ...

Only `teamdesk.*` is imported: the dev environment drives the product, never the lab
harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from teamdesk.config import Settings
from teamdesk.db.engine import create_engine, session_factory
from teamdesk.db.templates import clone_database, drop_database
from teamdesk.tasks.queue import delete_prefix, redis_client

#: A label becomes part of a database name and of a Redis key prefix: lowercase letters
#: and digits only (no wildcard can reach `delete_prefix`, no quoting in SQL names).
_LABEL = re.compile(r"[a-z][a-z0-9]{0,19}")

#: What `close()` calls for a step that failed: (what it was doing, the error).
Problem = Callable[[str, BaseException], None]


def _names(base: Settings, label: str) -> tuple[str, str]:
    """(database name prefix, queue prefix) for a new world labelled `label`."""
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise ValueError(f"a world's label must be 1-20 lowercase letters or digits, "
                         f"starting with a letter (it names a database and a Redis "
                         f"prefix): got {label!r}")
    return f"teamdesk_{label}", base.queue_prefix_for(f"{label}{uuid.uuid4().hex[:10]}")


@dataclass
class World:
    """A cloned database and a fresh queue prefix; `close()` deletes and drops both.

    Open it with `World.open(base, label)` (synchronous) or `await World.open_async(...)`;
    `base` says where the servers are (resolved URLs) and which timings to use."""

    #: `base` with this world's `database_url` and `queue_prefix`.
    settings: Settings
    #: An async engine on the world's database (disposed by `close()`).
    engine: AsyncEngine
    #: Sessions on that engine: what services and the dispatcher take.
    sessions: async_sessionmaker[AsyncSession]
    #: The label it was opened with (`teamdesk_<label>_…`, `[<namespace>:]<label>…`).
    label: str = "world"
    _closed: bool = field(default=False, repr=False)

    @classmethod
    def open(cls, base: Settings, label: str = "world") -> World:
        """Clone the template into a new database and choose a fresh prefix (blocks for
        the clone, a few milliseconds; from async code prefer `open_async`)."""
        db_prefix, queue_prefix = _names(base, label)
        if not base.database_url or not base.redis_url:
            raise ValueError("a world needs resolved database_url and redis_url "
                             "(devkit.services.resolve_settings)")
        url = clone_database(base.database_url, prefix=db_prefix)
        settings = base.replace(database_url=url, queue_prefix=queue_prefix)
        engine = create_engine(url)
        return cls(settings, engine, session_factory(engine), label)

    @classmethod
    async def open_async(cls, base: Settings, label: str = "world") -> World:
        """`open` with the clone in a thread, so the event loop keeps running."""
        return await asyncio.to_thread(cls.open, base, label)

    @property
    def closed(self) -> bool:
        """True once `close()` has run."""
        return self._closed

    async def delete_keys(self, timeout: float | None = None) -> int:
        """Delete every Redis key under this world's prefix, bounded by `timeout`
        seconds (default: a few Redis timeouts); returns how many went."""
        bound = self._redis_bound() if timeout is None else timeout
        client = redis_client(self.settings)
        try:
            return await asyncio.wait_for(
                delete_prefix(client, self.settings.queue_prefix), bound)
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()

    def _redis_bound(self) -> float:
        return max(self.settings.redis_timeout_s, 1.0) * 6

    async def close(self, *, on_problem: Problem | None = None,
                    timeout: float | None = None) -> None:
        """Delete the prefix's keys, dispose the engine, drop the database; idempotent.

        Every step runs even when an earlier one failed, so a Redis that is down never
        leaves the database behind. A failed step is handed to `on_problem(what, err)`
        (a lab records it in its error list); without one, the first failure is raised
        once all steps have run. Close your own queue, workers and clients first: the
        database is dropped with `FORCE`, under whatever is still connected."""
        if self._closed:
            return
        self._closed = True
        problems: list[tuple[str, BaseException]] = []
        report = on_problem or (lambda what, err: problems.append((what, err)))
        try:
            await self.delete_keys(timeout)
        except Exception as err:
            report(f"deleting the Redis keys under prefix {self.settings.queue_prefix!r} "
                   "(is Redis running?)", err)
        with contextlib.suppress(Exception):
            await self.engine.dispose()
        try:
            await asyncio.to_thread(drop_database, self.settings.database_url)
        except Exception as err:
            report(f"dropping the database of world {self.label!r}", err)
        if problems:
            what, err = problems[0]
            err.add_note(f"(while {what})")
            for other, later in problems[1:]:
                err.add_note(f"also {other} failed: {type(later).__name__}: {later}")
            raise err

    async def __aenter__(self) -> World:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        db = (self.settings.database_url or "").partition("?")[0].rsplit("/", 1)[-1]
        state = "closed" if self._closed else "open"
        return f"<World {self.label!r} {state} db={db} prefix={self.settings.queue_prefix}>"
