"""Shared fixtures: real PostgreSQL and Redis (embedded default unless URLs are set), one
database cloned from a migrated template and one BullMQ prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from teamdesk import devservices
from teamdesk.config import Settings
from teamdesk.db.engine import create_engine, session_factory
from teamdesk.db.templates import clone_database, drop_database

#: A real bug, found by the X3 parse-back tests (tests/unit/test_pure.py and
#: tests/integration/test_worker_basics.py); reported, not fixed here (product code is
#: another helper's). `to_csv` writes with `lineterminator="\n"`, and the csv module
#: quotes a cell only for the characters of its line terminator, so a CR inside a cell is
#: written bare. CSV readers (and spreadsheets) end the record there: `'\r=1+1` comes back
#: as a cell `'` and a *new record starting with the live formula `=1+1`* — X3 bypassed,
#: and any title with a CR in the middle can start a record with a formula. Strict: the
#: day `to_csv` quotes CR (e.g. `lineterminator="\r\n"`) these tests pass and the marker
#: must go.
CR_BREAKS_THE_RECORD = pytest.mark.xfail(
    strict=True, reason="to_csv leaves a CR inside a cell unquoted (lineterminator='\\n')")


@pytest.fixture(scope="session")
def service_settings() -> Settings:
    """Settings pointing at the running services; this pytest process owns them."""
    return devservices.resolve_settings(owner_pid=os.getpid())


@pytest.fixture
def database_url(service_settings: Settings) -> str:
    url = clone_database(service_settings.database_url)
    yield url
    drop_database(url)


@pytest.fixture
def settings(service_settings: Settings, database_url: str) -> Settings:
    """This test's world: its own database and its own BullMQ prefix."""
    return service_settings.replace(database_url=database_url,
                                    queue_prefix=f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def sessions(settings: Settings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(settings.database_url)
    yield session_factory(engine)
    await engine.dispose()


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A plain client; at teardown deletes every key under this test's prefix."""
    client = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
    yield client
    keys = [k async for k in client.scan_iter(match=f"{settings.queue_prefix}:*", count=500)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
async def demo(sessions: async_sessionmaker[AsyncSession]):
    """The deterministic demo team (`acme`: ada admin, ben/cai agents, dan/eve/fay customers)."""
    from teamdesk.seed import seed_demo

    async with sessions() as session:
        return await seed_demo(session, tickets=120)
