"""Settings validation: out-of-range values are refused at construction, naming the
variable; unknown `TEAMDESK_*` variables get a one-line warning (Q2, D1, D8, X1, W4)."""

from __future__ import annotations

import logging
import uuid

import pytest

from teamdesk import config
from teamdesk.config import NON_SETTING_VARS, Settings


@pytest.mark.parametrize(("var", "raw"), [
    ("TEAMDESK_EXPORT_BATCH_SIZE", "0"),      # X1: completed with an empty CSV
    ("TEAMDESK_DISPATCH_BATCH_SIZE", "0"),    # D1: dispatched nothing
    ("TEAMDESK_DISPATCH_TICK_S", "0"),        # D8: busy loop
    ("TEAMDESK_REDIS_TIMEOUT_S", "0"),        # every Redis call timed out
    ("TEAMDESK_WORKER_CONCURRENCY", "0"),
    ("TEAMDESK_LOCK_DURATION_MS", "-1"),
    ("TEAMDESK_STALE_RUNNING_AGE_S", "-5"),   # D6
    ("TEAMDESK_EXPORT_LIMIT", "-3"),
    ("TEAMDESK_HEARTBEAT_TTL_S", "nan"),      # W4
    ("TEAMDESK_DRAIN_TIMEOUT_S", "-1"),       # W4
    ("TEAMDESK_LOCK_RENEW_MS", "-1"),
    ("TEAMDESK_QUEUE_PREFIX", " "),
])
def test_out_of_range_environment_values_are_refused_naming_the_variable(var, raw):
    """Q2, D1, D6, D8, X1, W4: a zero, negative or non-finite size/interval/timeout is
    refused when the settings are read, with the variable named, instead of running."""
    with pytest.raises(ValueError, match=var):
        Settings.from_env({var: raw})


@pytest.mark.parametrize("changes", [
    {"export_batch_size": 0}, {"dispatch_batch_size": -1}, {"dispatch_tick_s": 0.0},
    {"redis_timeout_s": 0}, {"worker_concurrency": 0}, {"export_limit": 2.5},
    {"stalled_interval_ms": True}, {"dispatch_budget_s": -0.5},
])
def test_replace_validates_too(changes):
    """Q2: tests and labs shorten timings through `replace`; it checks the same ranges."""
    (field,) = changes
    with pytest.raises(ValueError, match=config.env_name(field)):
        Settings().replace(**changes)


def test_legitimate_small_and_zero_values_are_accepted():
    """Q2: the small timings tests and labs use, and the zeros that mean something
    (`lock_renew_ms=0` never renews, `max_stalled_count=0` fails on the first stall,
    `drain_timeout_s=0` abandons at once, `dispatch_budget_s=0` is one scan per tick, D8)
    stay valid."""
    s = Settings().replace(lock_duration_ms=1000, stalled_interval_ms=100, backoff_delay_ms=30,
                           dispatch_tick_s=0.05, export_batch_size=10, export_limit=1,
                           lock_renew_ms=0, max_stalled_count=0, drain_timeout_s=0,
                           redispatch_age_s=0, redis_timeout_s=0.5, heartbeat_ttl_s=1.5,
                           dispatch_budget_s=0)
    assert (s.lock_renew_ms, s.max_stalled_count) == (0, 0)
    assert Settings.from_env({"TEAMDESK_LOCK_RENEW_MS": "0"}).lock_renew_ms == 0


def test_unknown_teamdesk_variable_is_warned_once(caplog):
    """Q2: a misspelt variable silently kept the default; now one warning line names it.
    Variables the project uses that are not settings are not reported. (A name of this test
    alone: the warning is once per process, whatever other tests read before.)"""
    typo = f"TEAMDESK_EXPORT_LIMT_{uuid.uuid4().hex[:8].upper()}"
    env = {typo: "10", **{v: "x" for v in NON_SETTING_VARS}}
    with caplog.at_level(logging.WARNING, logger="teamdesk.config"):
        Settings.from_env(env)
        Settings.from_env(env)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and typo in lines[0] and "\n" not in lines[0]


def test_to_env_round_trips_through_from_env() -> None:
    """Q2: a child process gets a lab's timings as `Settings.to_env()` and reads the same
    settings back; fields at their default stay out, so the child keeps its own defaults."""
    s = Settings(lock_duration_ms=1000, dispatch_tick_s=0.2, redis_timeout_s=1.0,
                 redis_url="redis://127.0.0.1:1/0")
    env = s.to_env()
    assert env == {"REDIS_URL": "redis://127.0.0.1:1/0", "TEAMDESK_LOCK_DURATION_MS": "1000",
                   "TEAMDESK_DISPATCH_TICK_S": "0.2", "TEAMDESK_REDIS_TIMEOUT_S": "1.0"}
    assert Settings.from_env(env) == s
    assert Settings.from_env(s.to_env(changed_only=False)) == s


async def test_delete_prefix_refuses_a_wildcard_or_empty_prefix() -> None:
    """S3 in spirit: clearing a world's keys must never reach another world's prefix."""
    from teamdesk.tasks.queue import delete_prefix

    for prefix in ("", "lab*", "bull?", "[ab]"):
        with pytest.raises(ValueError, match="refusing"):
            await delete_prefix(None, prefix)  # type: ignore[arg-type]


def test_a_prefix_given_from_outside_is_the_namespace_of_every_prefix_made_here() -> None:
    """(ours) A learner's `TEAMDESK_QUEUE_PREFIX=td:<name>` is the only key namespace their
    Redis ACL allows: every prefix this process makes lies under it, and one outside it is
    refused at once (not at the first NOPERM of a worker). Without it, prefixes stay bare."""
    learner = Settings.from_env({"TEAMDESK_QUEUE_PREFIX": "td:ann"})
    assert (learner.queue_prefix, learner.queue_namespace) == ("td:ann", "td:ann")
    assert learner.queue_prefix_for("lab0123") == "td:ann:lab0123"
    assert learner.replace(queue_prefix="td:ann:x").queue_prefix == "td:ann:x"
    for outside in ("ex27", "td:annie", "td:bob:x"):
        with pytest.raises(ValueError, match="outside the queue namespace"):
            learner.replace(queue_prefix=outside)
    assert Settings().queue_prefix_for("lab0123") == "lab0123"
    assert Settings.from_env({}).queue_namespace == ""
    child = learner.replace(queue_prefix="td:ann:lab1")
    assert Settings.from_env(child.to_env()) == child
    assert Settings.from_env(Settings().to_env(changed_only=False)).queue_namespace == ""
    for bad in ("td:*", "td:[ab]"):
        with pytest.raises(ValueError, match="TEAMDESK_QUEUE_NAMESPACE"):
            Settings.from_env({"TEAMDESK_QUEUE_PREFIX": bad})
