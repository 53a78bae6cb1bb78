"""Presenter-grade labs: steps that run once, gates and waits that forgive a
re-run, start over, leftovers of killed kernels, a Redis of the lab's own, a bounded wait
for the team lock, one symbol for a missing value. Real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time

import pandas as pd
import psycopg
import pytest
import redis.asyncio as aioredis
from sqlalchemy import text

from devkit import services
from labs import leftovers, locks, private_redis, stage, tables
from labs.gates import GateTimeout
from labs.lab import STUCK, Lab
from teamdesk.db.locks import lock_team
from teamdesk.db.templates import clone_database
from teamdesk.services import tickets as ticket_services
from teamdesk.tasks.queue import task_job_id


def _db_exists(database_url: str) -> bool:
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as c:
        return c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() \
            is not None


# ---------------------------------------------------------------- steps (pure)


def test_step_cells_are_rewritten_once_done():
    """A `# step:` cell runs its body the first time (after `begin`) and only replays once
    the step is done; a step whose cell raised is tried again."""

    class FakeLab:
        name, closed, step_began = "fake", False, 0.0

    s = stage.attach(FakeLab())
    try:
        cell = ["# step: A claims E1\n", "x = 1\n"]
        assert stage.transform(cell) == ["__import__('labs.stage').stage.begin('A claims E1')\n",
                                         "x = 1\n"]
        assert stage.transform(["x = 1\n"]) == ["x = 1\n"]  # not a step: unchanged
        stage.begin("A claims E1")
        stage._post_run_cell(type("R", (), {"success": False})())
        assert not s.is_done("A claims E1")                  # it raised: try again
        stage.begin("A claims E1")
        stage._post_run_cell(type("R", (), {"success": True})())
        assert s.is_done("A claims E1")
        assert stage.transform(cell) == [
            "await __import__('labs.stage').stage.replay('A claims E1')\n"]
        assert s.lab.step_began > 0
    finally:
        stage.detach(s)
        stage._LAST = None


def test_a_step_is_shown_by_its_title_in_the_editions_language(monkeypatch, capsys):
    """The step's name is its identifier in both editions; what the stage prints shows its
    title: the name in English, the catalogue's Chinese in the Chinese edition (a step the
    catalogue lacks, one a learner wrote, as written). `go_to` takes either."""

    class FakeLab:
        name, closed, step_began = "fake", False, 0.0

    s = stage.attach(FakeLab())
    try:
        stage.begin("A claims E1 and freezes")
        stage._post_run_cell(type("R", (), {"success": True})())
        monkeypatch.setenv("TEAMDESK_LANG", "zh")
        asyncio.run(s.replay("A claims E1 and freezes"))
        zh = capsys.readouterr().out
        assert "A 以 E1 认领，然后停住" in zh and "claims" not in zh
        assert stage.title("my own step") == "my own step"
        names = ["A claims E1 and freezes", "B takes over with E2"]
        assert stage.identifier("B 以 E2 接手", names) == "B takes over with E2"
        assert stage.identifier(" b takes over  with E2", names) == "B takes over with E2"
        assert stage.identifier("nowhere", names) == "nowhere"  # the rewind refuses it
        monkeypatch.setenv("TEAMDESK_LANG", "en")
        asyncio.run(s.replay("A claims E1 and freezes"))
        assert "↻ already done: A claims E1 and freezes (step 1" in capsys.readouterr().out
    finally:
        stage.detach(s)
        stage._LAST = None


def test_every_step_of_the_notebooks_is_a_message_of_the_harness():
    """`stage.messages()` finds each `# step:` of the notebooks, so the catalogue test
    (tests/unit/test_harness_catalogue.py) fails on a step without its Chinese title."""
    found = stage.messages()
    names = {c.en for c in found}
    assert {"A claims E1 and freezes", "Ben requests an export", "w1 starts and beats"} <= names
    assert len(names) > 100
    assert all(c.key == stage.step_key(c.en) and c.file.suffix == ".ipynb" for c in found)


# ---------------------------------------------------------------- gates and waits


async def test_a_new_gate_replaces_an_unreleased_one(lab):
    """Presenter re-runs: a re-run cell creates its gate again. The first, unused gate must
    not swallow the crossing: the new one (same lab, point and actor) replaces it.
    (Before: the old gate caught A and the new one timed out, GateTimeout.)"""
    task = await lab.request_export({"status": ["OPEN"]})
    first = lab.gate("export.after_read", actor="A")
    second = lab.gate("export.after_read", actor="A")
    other_actor = lab.gate("export.after_read", actor="B")   # not the same actor: kept
    await lab.start_worker("A", **STUCK)
    await lab.enqueue(task.id)
    ctx = await second.reached(5)
    assert ctx["task_id"] == task.id
    assert not first.is_reached and first.is_released
    assert not other_actor.is_released
    second.release()
    await lab.wait_for("completed", task_id=task.id)


async def test_a_wait_matches_only_events_after_the_step_began(lab):
    """Presenter re-runs: a step tried again must not return the first try's event."""
    task = await lab.request_export({"status": ["OPEN"]})
    await lab.start_worker("W")
    await lab.dispatch()
    await lab.wait_for("completed", task_id=task.id)
    lab.step_began = time.monotonic()                # a new step begins
    with pytest.raises(AssertionError, match="no 'completed' event"):
        await lab.wait_for("completed", task_id=task.id, timeout=0.3)
    assert (await lab.wait_for("completed", task_id=task.id, since=0))["task_id"] == task.id


async def test_expect_errors_acknowledges_only_what_it_expects(lab):
    """Errors shown where they happen: an action cell that causes background errors says
    so around itself; the check cell asserts on `errors_of`, which does not grow on a re-run."""
    task = await lab.request_export({"priority": ["LOW"]})
    lab.fault("export.after_read", OSError("reset"), times=3,
              when=lambda ctx: ctx["task_id"] == task.id)
    job_id = task_job_id(task.id, 0)
    with lab.expect_errors(source="worker failed", job_id=job_id):
        await lab.start_worker("W")
        await lab.dispatch()
        await lab.wait_for("failed", job_id=job_id, where=lambda e: e["exhausted"])
    assert len(lab.errors_of(source="worker failed", job_id=job_id)) == 3
    assert not lab.unacknowledged
    lab.check()


# ---------------------------------------------------------------- reset


async def test_reopening_a_name_closes_the_earlier_lab(service_settings):
    """Presenter re-runs: a notebook's first cell run again closes its earlier lab."""
    first = await Lab.open("nb", settings=service_settings, tickets=5, replace=True)
    second = await Lab.open("nb", settings=service_settings, tickets=5, replace=True)
    try:
        assert first.closed and not second.closed
        assert not _db_exists(first.settings.database_url)
    finally:
        await second.close()


async def test_start_over_opens_a_fresh_world(service_settings):
    """Presenter re-runs: "start the race over" — before any step it does nothing; after one
    it closes the lab (errors dropped) and opens a new one with the same options."""
    lab = await Lab.open("race", settings=service_settings, tickets=5, backoff_delay_ms=30)
    try:
        assert await lab.start_over() is lab
        lab.stage.begin("A claims E1")
        lab.stage.finish(True)
        fresh = await lab.start_over()
        assert lab.closed and fresh is not lab and not fresh.stage.steps
        assert fresh.settings.backoff_delay_ms == 30
        assert fresh.settings.database_url != lab.settings.database_url
    finally:
        await fresh.close()


def _a_dead_process() -> tuple[int, float]:
    """(pid, start time) of a process that has exited: the killed kernel."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    created = leftovers._created(proc.pid)  # readable until it is reaped
    proc.wait()
    return proc.pid, created


async def test_leftovers_of_a_killed_kernel_are_cleaned(service_settings):
    """Leftovers: a lab whose process died (a killed kernel) leaves its database and
    queue keys; the next `Lab.open` removes them."""
    url = clone_database(service_settings.database_url, "teamdesk_lab")
    prefix = "labdeadbeef01"
    client = aioredis.Redis.from_url(service_settings.redis_url)
    await client.set(f"{prefix}:x", "1")
    pid, created = _a_dead_process()
    path = leftovers._dir() / f"{pid}-{prefix}.json"
    path.write_text(json.dumps({"name": "killed", "pid": pid, "created": created,
                                "database_url": url, "redis_url": service_settings.redis_url,
                                "prefix": prefix, "private_redis": None}))
    async with Lab.open("next", settings=service_settings, tickets=5):
        assert not path.exists()
        assert not _db_exists(url)
        assert not await client.exists(f"{prefix}:x")
    await client.aclose()


async def test_an_open_labs_record_is_readable_by_its_owner_alone(service_settings):
    """S1: the record an open lab leaves for the clean-up holds URLs with passwords, so it
    is 0600 in a 0700 folder (0711 as root, where the embedded PostgreSQL's own account
    must pass through the data folder), never readable by other local accounts."""
    async with Lab.open("secret", settings=service_settings, tickets=1) as lab:
        records = [p for p in leftovers._dir().glob("*.json")
                   if json.loads(p.read_text())["prefix"] == lab.settings.queue_prefix]
        assert len(records) == 1
        assert stat.S_IMODE(records[0].stat().st_mode) == 0o600
        assert stat.S_IMODE(leftovers._dir().stat().st_mode) == 0o700
        root_mode = stat.S_IMODE(services.data_dir().stat().st_mode)
        assert root_mode == (0o711 if os.geteuid() == 0 else 0o700), oct(root_mode)


# ---------------------------------------------------------------- a Redis of its own


def test_a_leftover_private_redis_is_stopped_only_when_it_is_that_server(tmp_path):
    """S3: the clean-up of a killed kernel's private Redis signals the recorded pid only
    when it is still a Redis server of the recorded folder, started at the recorded time
    (`devkit.services.is_server`, the dev environment's one check)."""
    import psutil

    server = private_redis.PrivateRedis().start()
    try:
        created = psutil.Process(server.pid).create_time()
        private_redis.kill_leftover(server.pid, created, None)  # an older record: no folder
        private_redis.kill_leftover(server.pid, created, tmp_path)  # another folder's
        private_redis.kill_leftover(server.pid, created + 5, server.dir)  # a reused pid
        assert server.running
        private_redis.kill_leftover(server.pid, created, server.dir)
        server.proc.wait(10)
        assert not server.running
    finally:
        server.remove()


async def test_private_redis_outage_hurts_nobody_else(service_settings):
    """23 §7, D8: a lab on its own Redis stops it for real; the shared server (and
    so every other notebook) keeps answering; the lab's tick fails fast, then recovers."""
    shared = aioredis.Redis.from_url(service_settings.redis_url)
    async with Lab.open("own", settings=service_settings, tickets=5,
                        private_redis=True) as lab:
        assert lab.settings.redis_url != service_settings.redis_url
        await lab.request_export({"status": ["OPEN"]})
        async with private_redis.outage(lab):
            assert await shared.ping()
            with pytest.raises(Exception):  # noqa: B017 - connection refused or timed out
                await asyncio.wait_for(lab.dispatch(), 8)
        assert (await lab.dispatch()).added == 1
        server = lab.private_redis
    assert not server.running
    await shared.aclose()


async def test_outage_without_a_private_redis_is_refused(lab):
    with pytest.raises(private_redis.PrivateRedisError, match="private_redis=True"):
        async with private_redis.outage(lab):
            pass


# ---------------------------------------------------------------- the team lock


async def test_a_wait_for_the_team_lock_is_bounded_and_names_the_holder(lab):
    """ch. 26 §5: while someone holds the team lock, a service that needs it gives up
    within its bound with `TeamLockBusy` naming the holding backend; nothing is written."""
    async with lab.sessions() as holder, holder.begin():
        await lock_team(holder, lab.team)
        pid = await holder.scalar(text("SELECT pg_backend_pid()"))
        started = time.monotonic()
        with pytest.raises(locks.TeamLockBusy, match=f"backend pid {pid} "):
            await locks.bounded(lab, lambda s: ticket_services.create_ticket(
                s, lab.team, "ben", "Waits for the lock"), seconds=0.5)
        assert time.monotonic() - started < 3
    assert await locks.describe_holder(lab) == "nobody holds it now"
    assert (await tables.ledger(lab)).empty


# ---------------------------------------------------------------- tables


def test_show_uses_one_symbol_for_every_missing_value():
    df = pd.DataFrame({"a": pd.array([None, 1], dtype="Int64"), "b": [None, "x"],
                       "c": [float("nan"), 1.0], "d": pd.to_datetime([None, "2026-01-01"])})
    shown = tables.show(df)
    assert shown.iloc[0].tolist() == [tables.MISSING] * 4
    assert shown.loc[1, "b"] == "x" and df.loc[0, "a"] is pd.NA  # the original is untouched


async def test_gate_timeout_still_reports_a_gate_never_reached(lab):
    gate = lab.gate("export.after_read", actor="nobody")
    with pytest.raises(GateTimeout):
        await gate.reached(0.2)
