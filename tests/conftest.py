"""Shared fixtures: real PostgreSQL and Redis (embedded default unless URLs are set), one
database cloned from a migrated template and one BullMQ prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from devkit import services
from teamdesk.config import Settings
from teamdesk.db.engine import create_engine, session_factory
from teamdesk.db.templates import clone_database, drop_database
from teamdesk.tasks.queue import delete_prefix


@pytest.fixture(scope="session")
def service_settings() -> Settings:
    """Settings pointing at the running services; this pytest process owns them."""
    return services.resolve_settings(owner_pid=os.getpid())


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
    await delete_prefix(client, settings.queue_prefix)
    await client.aclose()


@pytest.fixture
async def demo(sessions: async_sessionmaker[AsyncSession]):
    """The deterministic demo team (`acme`: ada admin, ben/cai agents, dan/eve/fay customers)."""
    from teamdesk.seed import seed_demo

    async with sessions() as session:
        return await seed_demo(session, tickets=120)
