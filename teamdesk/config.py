"""One `Settings` object, read from the environment.

Every timing the book names lives here, with the book's production value as the default
(contract Q1, D1, D6, D7). Tests and notebooks shorten timings by building a changed copy
(`settings.replace(lock_duration_ms=1000)`), never by patching module constants (Q2).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

_ENV_PREFIX = "TEAMDESK_"


@dataclass(frozen=True)
class Settings:
    """Connection URLs plus every timing and limit of the task system.

    `database_url` / `redis_url` are None until resolved: `devservices.resolve_settings()`
    fills them from `DATABASE_URL` / `REDIS_URL`, or starts the embedded default.
    """

    database_url: str | None = None
    redis_url: str | None = None

    #: BullMQ queue name and key prefix; a lab world or test gets its own prefix.
    queue_name: str = "teamdesk-tasks"
    queue_prefix: str = "bull"

    #: Worker lock (BullMQ lockDuration) and its renewal; 0 renewal = never renew.
    lock_duration_ms: int = 30_000
    lock_renew_ms: int | None = None
    stalled_interval_ms: int = 30_000
    max_stalled_count: int = 1
    #: Exponential backoff base (Q1: ~2 s then 4 s).
    backoff_delay_ms: int = 2_000
    worker_concurrency: int = 1
    #: After a Redis error a worker retries its fetch this much later (BullMQ's
    #: runRetryDelay). Its default of 15 s made workers sit idle long after a Redis
    #: restart and notice SIGTERM late (measured in the chaos runs).
    fetch_retry_delay_ms: int = 500

    #: Dispatcher (D1, D6, D7, D8).
    dispatch_tick_s: float = 3.0
    dispatch_batch_size: int = 100
    redispatch_age_s: float = 30.0
    stale_running_age_s: float = 120.0
    #: A call to Redis from the dispatcher gives up after this long (fail fast, ch. 23).
    redis_timeout_s: float = 3.0

    #: Exports (X1, X2).
    result_ttl_s: float = 24 * 3600.0
    export_limit: int = 5_000
    export_batch_size: int = 50

    #: Worker process (W4).
    heartbeat_ttl_s: float = 15.0
    drain_timeout_s: float = 30.0

    def replace(self, **changes: object) -> Settings:
        """A copy with some fields changed; how tests shorten timings (Q2)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Read `DATABASE_URL`, `REDIS_URL` and `TEAMDESK_<FIELD>` overrides.

        A malformed value raises `ValueError` naming the variable, rather than starting a
        system with a silently wrong timing.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {
            "database_url": env.get("DATABASE_URL") or None,
            "redis_url": env.get("REDIS_URL") or None,
        }
        for f in dataclasses.fields(cls):
            if f.name in ("database_url", "redis_url"):
                continue
            raw = env.get(_ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, raw, f.type)
        return cls(**values)  # type: ignore[arg-type]


def _parse(name: str, raw: str, type_: object) -> object:
    text = str(type_)
    try:
        if "float" in text:
            return float(raw)
        if "int" in text:
            return int(raw)
    except ValueError:
        raise ValueError(f"{_ENV_PREFIX}{name.upper()}={raw!r} is not a number") from None
    return raw
