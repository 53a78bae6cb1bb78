"""Fixtures for the lab harness tests: an open lab (closed, and checked, at teardown) and a
private Redis server for faults that would otherwise hit every user of the shared one."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from devkit import services
from labs.chaos import ChaosReport
from labs.lab import Lab
from labs.scenes.ch90 import notebook_runs
from teamdesk.config import Settings


@pytest.fixture
async def lab(service_settings: Settings) -> AsyncIterator[Lab]:
    """A lab with 60 demo tickets; `close()` at teardown raises on unacknowledged errors."""
    async with Lab.open("test", settings=service_settings, tickets=60, close_timeout=3) as lab:
        yield lab


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def own_redis(tmp_path, service_settings: Settings) -> AsyncIterator[tuple]:
    """(root, settings): a Redis server of our own, started by `services.start_redis`
    under a temporary data folder, so stopping or flushing it cannot disturb anyone else
    using the project's shared embedded Redis (other test runs, notebooks). Always stopped
    at teardown."""
    root = tmp_path / "services"
    port = _free_port()
    await asyncio.to_thread(services.start_redis, root, port)
    try:
        # It asks for a password like every embedded Redis (S1).
        yield root, service_settings.replace(redis_url=services.redis_url_for(root, port))
    finally:
        await asyncio.to_thread(services.stop_redis, root)


@pytest.fixture(scope="session")
async def chaos_90_runs(service_settings: Settings) -> tuple[ChaosReport, ChaosReport]:
    """Notebook 90's two real runs, made once for every test that reads them (they are
    one unit of work under pytest-xdist: tests/parallel.py): the product's and the
    lease-less export's. The same pair the registry's `90.invariant` context reads
    (`ch90.notebook_runs` keeps it per process), so the registry's case runs nothing."""
    return await notebook_runs(service_settings)
