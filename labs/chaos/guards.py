"""What a run may break, and with what: a Redis server of the run's own to restart
(`RedisRestart`, never one other users share) and a working `labs.faults.RedisProxy` for
link cuts; `ChaosRefused` when the run would do something it must not."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from teamdesk.config import Settings


class ChaosRefused(RuntimeError):
    """The run would do something it must not (e.g. restart a Redis that is not ours)."""


@dataclass(frozen=True)
class RedisRestart:
    """How a chaos run stops and starts "its" Redis: always a server of its own
    (`private_restarter`), never one that other users share."""

    stop: Callable[[], Awaitable[Any]]
    start: Callable[[], Awaitable[Any]]
    describe: str


def private_restarter(server: Any) -> RedisRestart:
    """Restart a lab's own Redis (`labs.private_redis.PrivateRedis`, `Lab.open(...,
    private_redis=True)`): the restart is real and hurts no other notebook or test."""
    return RedisRestart(stop=lambda: asyncio.to_thread(server.stop),
                        start=lambda: asyncio.to_thread(server.start),
                        describe=f"the lab's own Redis (port {server.port})")


async def proxy_class() -> tuple[Any, str]:
    """`labs.faults.RedisProxy` if it imports, else (None, why)."""
    try:
        from labs.faults import RedisProxy
    except Exception as err:  # a broken fault module drops the cuts, not the run
        return None, f"labs.faults.RedisProxy unavailable ({type(err).__name__}: {err})"
    return RedisProxy, ""


async def check_proxy(cls: Any, settings: Settings) -> str:
    """Why `cls` cannot proxy to this Redis (one PING through it), or "" when it can."""
    from teamdesk.tasks.queue import redis_client

    try:
        proxy = await cls.start(settings)
        try:
            client = redis_client(settings.replace(redis_url=proxy.url))
            try:
                if not await client.ping():
                    return "the proxy did not answer PING"
            finally:
                await client.aclose()
        finally:
            await proxy.close()
    except Exception as err:
        return f"labs.faults.RedisProxy does not work here ({type(err).__name__}: {err})"
    return ""


async def working_proxy(settings: Settings) -> tuple[Any, str]:
    """The proxy class if it imports and really proxies here, else (None, why)."""
    cls, why = await proxy_class()
    why = why or await check_proxy(cls, settings)
    return (None, why) if why else (cls, "")
