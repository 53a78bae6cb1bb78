"""A learner's Redis user, for `devkit.classroom`: an ACL user of the learner's name,
confined to the keys `td:<learner>:*` and to the commands of `REDIS_COMMANDS`, and the
keys under that namespace.

The administrator's connection (`connect`) must be a Redis user allowed `ACL`, `SCAN` and
`UNLINK` (the default user of a password-protected Redis is). Users are saved to the
server's ACL file when it has one (`save_acl`); otherwise they live until a restart, and
the next provisioning makes them again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import redis

#: Every Redis key of a learner begins `td:<learner>:` (their ACL key pattern).
KEY_NAMESPACE = "td"

#: The only commands a learner's Redis user may run, each with why the lab needs it: what
#: BullMQ (`bullmq` 3.4, mostly from inside its Lua scripts, whose commands the ACL checks
#: as well), redis-py, the product and the lab ran — `INFO commandstats` of a server that
#: only a learner used while every notebook ran — and `ping`/`select` for other clients.
#: Key commands act on `td:<learner>:*` keys only; AUTH is always allowed.
REDIS_COMMANDS: dict[str, str] = {
    # connection
    "hello": "redis-py's handshake on every new connection",
    "client|setinfo": "redis-py names its library and version on connect",
    "client|setname": "BullMQ names its connections (queue, worker, events)",
    "info": "BullMQ reads the server's version and eviction policy when it starts",
    "ping": "a client's liveness check",
    "select": "a Redis URL that names a database other than 0",
    # Lua: BullMQ does most of its work in scripts (their commands are listed below)
    "evalsha": "BullMQ runs its Lua scripts by hash",
    "script|load": "redis-py loads a script the server does not know yet",
    "script|exists": "redis-py checks that its scripts are loaded",
    # strings
    "get": "job locks, heartbeats, the stalled-check lock",
    "set": "job locks (PX), heartbeats (EX), the stalled-check lock",
    "pttl": "a lock's remaining time",
    "incr": "BullMQ's job id counter",
    "del": "remove a job and its lock; delete a world's keys (delete_prefix)",
    "exists": "does a job exist (add, move, retry)",
    # hashes: one per job, plus the queue's meta
    "hget": "a job field",
    "hmget": "job fields",
    "hgetall": "read a job",
    "hset": "job fields: progress, return value, failure",
    "hmset": "BullMQ's scripts write a new job",
    "hdel": "clear a job's finished fields when it is retried",
    "hincrby": "a job's attempt and stall counters",
    # lists: wait, active, paused
    "lpush": "a job becomes waiting",
    "rpush": "a job goes back to waiting in order",
    "rpoplpush": "a worker takes the next job (wait → active)",
    "lrem": "a job leaves wait or active",
    "lpos": "where a job is (its state)",
    "lindex": "the head of a list",
    "llen": "job counts",
    "lrange": "list jobs (and the stalled check reads active)",
    # sets: the stalled-check set, dependencies
    "sadd": "mark active jobs for the stalled check",
    "srem": "a job is no longer a stall suspect",
    "smembers": "the stall suspects",
    "scard": "how many suspects",
    # the event stream
    "xadd": "queue events (added, active, progress, completed, failed, stalled)",
    "xtrim": "bound the event stream",
    # sorted sets: delayed, prioritized, completed, failed, the marker
    "zadd": "a job becomes delayed, completed or failed; the marker",
    "zrem": "a job leaves a sorted set",
    "zscore": "is a job in this set (its state)",
    "zcard": "job counts",
    "zrange": "list jobs; the next delayed job",
    "zrangebyscore": "delayed jobs that are due",
    "zrevrange": "list finished jobs, newest first",
    "zrevrangebyscore": "finished jobs older than their retention",
    "zremrangebyrank": "trim completed and failed (removeOnComplete, removeOnFail)",
    "zpopmin": "take the marker",
    "bzpopmin": "an idle worker waits for the marker (blocking)",
    # keys
    "scan": "delete a world's keys, list heartbeats (not key-confined: see above)",
}


def connect(admin_redis_url: str) -> redis.Redis:
    """The administrator's client (`with connect(url) as client:` closes it)."""
    return redis.Redis.from_url(admin_redis_url, decode_responses=True, socket_timeout=10)


def key_pattern(name: str) -> str:
    """The glob of every key of learner `name`."""
    return f"{KEY_NAMESPACE}:{name}:*"


def is_learners(client: redis.Redis, name: str) -> bool | None:
    """True: the user `name` is a learner's (its keys are theirs alone); False: a user of
    that name that is not; None: no such user."""
    info = client.acl_getuser(name)
    if info is None:
        return None
    keys = info.get("keys") or []
    keys = keys.split() if isinstance(keys, str) else list(keys)
    return keys == [f"~{key_pattern(name)}"]


def _acl_rules(name: str, password: str, commands: Iterable[str]) -> list[str]:
    return ["reset", "on", f">{password}", f"~{key_pattern(name)}", "resetchannels", "-@all",
            *(f"+{command}" for command in commands)]


_UNKNOWN = re.compile(r"modifier '\+([^']+)': Unknown command")


def set_user(client: redis.Redis, name: str, password: str) -> None:
    """`ACL SETUSER` in one command, applied whole (a running learner keeps their
    connections), leaving out a command this server does not have: CLIENT SETINFO came
    with Redis 7.2, and redis-py goes on without it."""
    commands = list(REDIS_COMMANDS)
    while True:
        try:
            client.execute_command("ACL", "SETUSER", name, *_acl_rules(name, password, commands))
            return
        except redis.ResponseError as err:
            unknown = _UNKNOWN.search(str(err))
            if unknown is None or unknown.group(1) not in commands:
                raise
            commands.remove(unknown.group(1))


def delete_user(client: redis.Redis, name: str) -> bool:
    """Remove learner `name`'s user (which also ends their clients); False when there is
    no learner's user of that name."""
    if not is_learners(client, name):
        return False
    client.execute_command("ACL", "DELUSER", name)
    return True


def save_acl(client: redis.Redis) -> None:
    """Keep the users across a restart when the server has an ACL file; without one they
    live until the restart (the next provisioning makes them again)."""
    try:
        client.execute_command("ACL", "SAVE")
    except redis.ResponseError as err:
        if "ACL file" not in str(err) and "aclfile" not in str(err):
            raise


def keys_of(client: redis.Redis, name: str) -> list[str]:
    """Every key under `td:<name>:`."""
    return list(client.scan_iter(match=key_pattern(name), count=1000))


def delete_keys(client: redis.Redis, name: str) -> int:
    """Every key under `td:<name>:` (synchronous, for a hub's hooks and the command line;
    a world's own clean-up is `teamdesk.tasks.queue.delete_prefix`)."""
    keys = keys_of(client, name)
    for i in range(0, len(keys), 500):
        client.unlink(*keys[i:i + 500])
    return len(keys)


def learner_users(client: redis.Redis) -> list[str]:
    """Redis users whose keys are a learner's (`td:<user>:*`)."""
    return [u for u in client.execute_command("ACL", "USERS") if is_learners(client, u)]
