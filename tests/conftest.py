"""Shared fixtures: real PostgreSQL and Redis (embedded default unless URLs are set), and one
world per test (`devkit.world.World`: a database cloned from a migrated template and a
BullMQ prefix of its own, both removed at teardown)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from devkit import services
from devkit.world import World
from teamdesk.config import Settings


@pytest.fixture(scope="session")
def service_settings() -> Settings:
    """Settings pointing at the running services; this pytest process owns them."""
    return services.resolve_settings(owner_pid=os.getpid())


@pytest.fixture
async def world(service_settings: Settings) -> AsyncIterator[World]:
    """This test's world; at teardown its keys are deleted and its database dropped (a
    failure there fails the test's teardown: a world left behind is a bug)."""
    w = await World.open_async(service_settings, "t")
    yield w
    await w.close()


@pytest.fixture
def database_url(world: World) -> str:
    """The URL of this test's own database (a clone of the template)."""
    return world.settings.database_url


@pytest.fixture
def settings(world: World, database_url: str) -> Settings:
    """This test's world: its own database and its own BullMQ prefix."""
    return world.settings


@pytest.fixture
def sessions(world: World, settings: Settings) -> async_sessionmaker[AsyncSession]:
    """Sessions on `settings.database_url`, this test's database (the world disposes the
    engine)."""
    return world.sessions


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A plain client on the test's Redis (the world deletes its prefix's keys)."""
    client = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
async def demo(sessions: async_sessionmaker[AsyncSession]):
    """The deterministic demo team (`acme`: ada admin, ben/cai agents, dan/eve/fay customers)."""
    from teamdesk.seed import seed_demo

    async with sessions() as session:
        return await seed_demo(session, tickets=120)
