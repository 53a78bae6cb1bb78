"""One `Settings` object, read from the environment.

Every timing the book names lives here, with the book's production value as the default
(contract Q1, D1, D6, D7). Tests and notebooks shorten timings by building a changed copy
(`settings.replace(lock_duration_ms=1000)`), never by patching module constants (Q2).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass

_ENV_PREFIX = "TEAMDESK_"
#: `TEAMDESK_*` variables the project uses that are not settings (the dev environment's:
#: `devkit.services`' data folder and Redis binary, the lab command; probe holds; the test
#: run's note of the lab's data folder): never reported as unknown.
NON_SETTING_VARS = frozenset({"TEAMDESK_DATA_DIR", "TEAMDESK_REDIS_SERVER", "TEAMDESK_LAB_PORT",
                              "TEAMDESK_PROBE_HOLD", "TEAMDESK_LAB_DATA_DIR",
                              # an instructor's (`devkit.classroom`): the class servers'
                              # administrator URLs and the file of the class secret
                              "TEAMDESK_ADMIN_DATABASE_URL", "TEAMDESK_ADMIN_REDIS_URL",
                              "TEAMDESK_CLASS_SECRET_FILE"})

log = logging.getLogger("teamdesk.config")
_warned: set[str] = set()

#: Lower bounds per field, checked at construction (also by `replace`). Sizes, intervals
#: and timeouts must be positive: a batch of 0 exports an empty CSV or dispatches nothing,
#: a tick of 0 busy-loops, a Redis timeout of 0 fails every call. Zero is meaningful for a
#: few: `lock_renew_ms` 0 = never renew, `max_stalled_count` 0 = the first stall fails the
#: job, `backoff_delay_ms` 0 = retry at once, `redispatch_age_s` 0 = re-check every waiting
#: row each tick (D5: duplicates are harmless), `drain_timeout_s` 0 = abandon at once (W4),
#: `dispatch_budget_s` 0 = one scan per tick, the book's loop (D8).
_POSITIVE = "positive"
_NON_NEGATIVE = "non-negative"
_BOUNDS: dict[str, str] = {
    "lock_duration_ms": _POSITIVE, "lock_renew_ms": _NON_NEGATIVE,
    "stalled_interval_ms": _POSITIVE, "max_stalled_count": _NON_NEGATIVE,
    "backoff_delay_ms": _NON_NEGATIVE, "worker_concurrency": _POSITIVE,
    "fetch_retry_delay_ms": _POSITIVE, "dispatch_tick_s": _POSITIVE,
    "dispatch_batch_size": _POSITIVE, "dispatch_budget_s": _NON_NEGATIVE,
    "redispatch_age_s": _NON_NEGATIVE,
    "stale_running_age_s": _POSITIVE, "redis_timeout_s": _POSITIVE,
    "result_ttl_s": _POSITIVE, "export_limit": _POSITIVE, "export_batch_size": _POSITIVE,
    "heartbeat_ttl_s": _POSITIVE, "drain_timeout_s": _NON_NEGATIVE,
}


@dataclass(frozen=True)
class Settings:
    """Connection URLs plus every timing and limit of the task system.

    `database_url` / `redis_url` are None until resolved: `services.resolve_settings()`
    fills them from `DATABASE_URL` / `REDIS_URL`, or starts the embedded default.
    """

    database_url: str | None = None
    redis_url: str | None = None

    #: BullMQ queue name and key prefix; a lab world or test gets its own prefix.
    queue_name: str = "teamdesk-tasks"
    queue_prefix: str = "bull"
    #: The namespace every queue prefix of this process lies in. On class servers it is
    #: the learner's `td:<name>`, the only keys their Redis ACL user may touch: set
    #: `TEAMDESK_QUEUE_PREFIX` alone and it becomes the namespace too. `queue_prefix` must
    #: then be the namespace or begin with it and a colon, and a world makes its fresh
    #: prefix under it (`queue_prefix_for`). Empty (a laptop, the suite): no constraint,
    #: and a world's prefix is bare (`lab<hex>`).
    queue_namespace: str = ""

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
    #: How long one tick may go on scanning while its scans come back full (D8): a full
    #: scan means a backlog, so the next scan follows at once, until one comes back short
    #: or this budget is spent — then the tick ends with the D6/D7 tail and, if the last
    #: scan was still full, the next tick starts at once. Without it a burst drained at
    #: `dispatch_batch_size` rows per tick (100 every 3 s); bounded, so the tail (stale
    #: recovery, purge) still runs at least about this often and a stop is not held up.
    #: Never longer than `redispatch_age_s` either: the rows a tick marked come due again
    #: after that age, and the tick would go on re-checking its own rows.
    #: 0 = one scan per tick and the whole interval between ticks, as the book's loop.
    dispatch_budget_s: float = 3.0
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

    def __post_init__(self) -> None:
        """Refuse out-of-range values here, so `from_env`, `Settings(...)` and `replace`
        all fail at once with the variable's name rather than run with a broken timing."""
        for f in dataclasses.fields(self):
            _check_field(f.name, getattr(self, f.name), f.type)
        ns = self.queue_namespace
        if ns and self.queue_prefix != ns and not self.queue_prefix.startswith(ns + ":"):
            raise ValueError(
                f"TEAMDESK_QUEUE_PREFIX={self.queue_prefix!r} lies outside the queue namespace "
                f"{ns!r} (TEAMDESK_QUEUE_NAMESPACE): on class servers no other keys are yours; "
                f"make prefixes with settings.queue_prefix_for(name)")

    def __repr__(self) -> str:
        """Like the dataclass repr, with the URLs' passwords masked: settings end up in
        notebook outputs, logs and tracebacks (S2)."""
        from teamdesk.redaction import redact

        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("database_url", "redis_url") and value:
                value = redact(value)
            parts.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(parts)})"

    def replace(self, **changes: object) -> Settings:
        """A copy with some fields changed; how tests shorten timings (Q2)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def queue_prefix_for(self, name: str) -> str:
        """A queue prefix named `name` in this process's namespace: `td:learner01:name` on
        class servers (the learner's Redis ACL allows those keys alone), plain `name`
        without a namespace. Worlds, labs and exercises make their prefixes here."""
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"a queue prefix name must be a non-empty word: got {name!r}")
        return f"{self.queue_namespace}:{name}" if self.queue_namespace else name

    def to_env(self, *, changed_only: bool = True) -> dict[str, str]:
        """The environment a child process reads back into these settings with `from_env`
        (Q2: a worker process gets a lab's timings as values, not as string literals kept
        beside the settings). `changed_only` leaves out the fields at their default, so the
        child's own defaults still apply to the rest; URLs are included when set."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or (changed_only and value == f.default
                                 and f.name not in ("database_url", "redis_url")):
                continue
            out[env_name(f.name)] = repr(value) if isinstance(value, float) else str(value)
        return out

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Read `DATABASE_URL`, `REDIS_URL` and `TEAMDESK_<FIELD>` overrides.

        A malformed value raises `ValueError` naming the variable, rather than starting a
        system with a silently wrong timing.
        """
        env = os.environ if environ is None else environ
        _warn_unknown(env)
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
        # A prefix given from outside is the namespace of whatever this process makes
        # (a learner's `td:<name>`; a worker process's world prefix), unless one is named:
        # an explicit empty TEAMDESK_QUEUE_NAMESPACE means none (`to_env` round trip).
        if env_name("queue_namespace") not in env and "queue_prefix" in values:
            values["queue_namespace"] = values["queue_prefix"]
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


def env_name(field: str) -> str:
    """The environment variable that sets `field` (`export_limit` → `TEAMDESK_EXPORT_LIMIT`)."""
    return {"database_url": "DATABASE_URL", "redis_url": "REDIS_URL"}.get(
        field, _ENV_PREFIX + field.upper())


def _check_field(name: str, value: object, type_: object) -> None:
    var = env_name(name)
    if name in ("database_url", "redis_url"):
        if value is not None and not (isinstance(value, str) and value):
            raise ValueError(f"{var} must be a URL string")
        return
    if name in ("queue_name", "queue_prefix"):
        if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
            raise ValueError(f"{var}={value!r} must be a non-empty name without spaces")
        return
    if name == "queue_namespace":
        # It ends up in a Redis ACL key pattern and a SCAN pattern: no wildcard, no space.
        if not isinstance(value, str) or any(c.isspace() or c in "*?[]\\" for c in value):
            raise ValueError(f"{var}={value!r} must be a name without spaces or wildcards")
        return
    bound = _BOUNDS.get(name)
    if bound is None or (name == "lock_renew_ms" and value is None):
        return
    integral = "float" not in str(type_)
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            integral and not isinstance(value, int)):
        kind = "an integer" if integral else "a number"
        raise ValueError(f"{var}={value!r} must be {kind}")
    if not math.isfinite(value):
        raise ValueError(f"{var}={value!r} must be a finite number")
    if bound == _POSITIVE and value <= 0:
        raise ValueError(f"{var}={value!r} must be greater than 0")
    if bound == _NON_NEGATIVE and value < 0:
        raise ValueError(f"{var}={value!r} must be 0 or more")


def _warn_unknown(env: object) -> None:
    """One line per unknown `TEAMDESK_*` variable (a typo silently keeps the default)."""
    known = {env_name(f.name) for f in dataclasses.fields(Settings)} | NON_SETTING_VARS
    for key in sorted(k for k in env if k.startswith(_ENV_PREFIX)):  # type: ignore[attr-defined]
        if key not in known and key not in _warned:
            _warned.add(key)
            log.warning("unknown setting %s ignored (settings: see teamdesk/config.py)", key)
