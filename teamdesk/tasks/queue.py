"""The BullMQ queue: job ids, default job options, fail-fast Redis clients (I2, Q1, Q2).

The Python `bullmq` port retries a dead Redis silently for ~350 s with its default
client. The dispatcher must instead fail a tick within seconds (ch. 23, D8), so every
client here is built with a short retry policy and socket timeouts.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from bullmq import Queue
from bullmq.utils import isRedisVersionLowerThan
from redis.asyncio.retry import Retry
from redis.backoff import ConstantBackoff

from teamdesk.config import Settings

#: Attempts per run, the first included (Q1): a transient error is retried twice.
MAX_TASK_ATTEMPTS = 3

#: The book's production defaults (Q1). Retention is the queue record's lifetime, not the
#: CSV's 24 h.
DEFAULT_JOB_OPTIONS: dict[str, Any] = {
    "attempts": MAX_TASK_ATTEMPTS,
    "backoff": {"type": "exponential", "delay": 2000},
    "removeOnComplete": {"age": 86400, "count": 1000},
    "removeOnFail": {"age": 604800, "count": 1000},
}

#: The job name every task is enqueued under (D2).
JOB_NAME = "execute"


def task_job_id(task_id: str, run: int) -> str:
    """The queue job id of one run of a task, e.g. `T7KQ2M-0` (I2).

    Automatic retries inside a run reuse it; a manual retry opens `<id>-<run+1>` (R3).
    """
    if not task_id or run < 0:
        raise ValueError(f"bad task identity: id={task_id!r} run={run!r}")
    return f"{task_id}-{run}"


def job_options(settings: Settings) -> dict[str, Any]:
    """DEFAULT_JOB_OPTIONS with the backoff base from settings (tests shorten it, Q2)."""
    opts = dict(DEFAULT_JOB_OPTIONS)
    opts["backoff"] = {"type": "exponential", "delay": settings.backoff_delay_ms}
    return opts


def redis_client(settings: Settings, *, blocking: bool = False) -> aioredis.Redis:
    """A Redis client that gives up quickly when Redis is gone.

    `blocking=True` is for a worker's blocking fetch: no read timeout (BZPOPMIN waits
    server-side), but the same short connect timeout and retry budget.
    """
    if not settings.redis_url:
        raise ValueError("settings.redis_url is not set; resolve settings first")
    timeout = settings.redis_timeout_s
    return aioredis.Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_connect_timeout=timeout,
        socket_timeout=None if blocking else timeout,
        retry=Retry(ConstantBackoff(0.1), 1),
        retry_on_error=[],
        health_check_interval=0,
    )


def create_task_queue(settings: Settings, connection: aioredis.Redis | None = None) -> Queue:
    """The task queue with the contract's default job options (Q1)."""
    conn = connection or redis_client(settings)
    return Queue(
        settings.queue_name,
        {
            "connection": conn,
            "prefix": settings.queue_prefix,
            "defaultJobOptions": job_options(settings),
        },
    )


async def delete_prefix(client: aioredis.Redis, prefix: str) -> int:
    """Delete every key under `prefix:` (a world's queue, jobs, locks, events, heartbeats),
    in batches of 500; returns how many went. The one place a prefix is cleared: worlds,
    labs, faults and tests call it (a `prefix` with a wildcard is refused, so a slip cannot
    clear someone else's keys)."""
    if not prefix or any(c in prefix for c in "*?[]"):
        raise ValueError(f"refusing to delete keys under prefix {prefix!r}")
    keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=500)]
    for i in range(0, len(keys), 500):
        await client.delete(*keys[i:i + 500])
    return len(keys)


def can_look_up_in_bulk(queue: Any) -> bool:
    """Whether `queue` is a bullmq `Queue` on Redis, whose job states `job_states` can read
    in one round trip (fakes and other backends take the per-job path)."""
    return (getattr(queue, "scripts", None) is not None
            and getattr(queue, "client", None) is not None
            and getattr(queue, "redisConnection", None) is not None)


async def job_states(queue: Queue, job_ids: list[str]) -> list[str | None]:
    """The queue state of each job id, in one Redis round trip (not one `getJob` + `getState`
    pair per job): None when no job
    record exists (what `getJob` returning None means), else what `job.getState()` says —
    `unknown` for a record that is in no list.

    Per id: `EXISTS` on the job's hash, then bullmq's own getState script (the same keys
    and arguments as `Scripts.getState`), all in one non-transactional pipeline. The
    dispatcher used to ask `getJob` (HGETALL, parsed into a Job) and `getState` one job
    at a time: 2 round trips per scanned row, each a loopback send that costs more CPU
    than the command."""
    scripts = queue.scripts
    version = await queue.redisConnection.getRedisVersion()
    script = scripts.commands["getState" if isRedisVersionLowerThan(version, "6.0.6")
                              else "getStateV2"]
    keys = scripts.getKeys(["completed", "failed", "delayed", "active", "wait", "paused",
                            "waiting-children", "prioritized"])
    async with queue.client.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            job_key = scripts.toKey(job_id)
            pipe.exists(job_key)
            await script(keys=keys, args=[job_id, job_key], client=pipe)
        replies = await pipe.execute()
    return [state if exists else None
            for exists, state in zip(replies[0::2], replies[1::2], strict=True)]
