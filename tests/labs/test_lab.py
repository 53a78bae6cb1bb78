"""The lab world: isolation of two labs, clean and idempotent close, background errors
that never vanish, idempotent worker cells. Real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
import redis.asyncio as aioredis

from labs import tables
from labs.lab import Lab, LabErrors
from teamdesk.db.models import TaskStatus
from teamdesk.tasks.queue import task_job_id


def _db_exists(admin_url: str, database_url: str) -> bool:
    name = database_url.rsplit("/", 1)[1]
    root = admin_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(root, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (name,)).fetchone() is not None


async def _keys(redis_url: str, prefix: str) -> list[str]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return [k async for k in client.scan_iter(match=f"{prefix}:*")]
    finally:
        await client.aclose()


async def test_two_labs_are_isolated(service_settings):
    """Two labs at once: different databases and prefixes; a task of one is invisible in
    the other; a worker (even one with the same name) and a gate of one never touch the
    other's job; each history and recorder only holds its own. Task ids come from each
    database's own sequence, so both labs' first tasks typically share an id (and a job
    id): isolation never relies on ids."""
    async with Lab.open("one", settings=service_settings, tickets=30, close_timeout=3) as one, \
            Lab.open("two", settings=service_settings, tickets=30, close_timeout=3) as two:
        assert one.settings.database_url != two.settings.database_url
        assert one.settings.queue_prefix != two.settings.queue_prefix
        task = await one.request_export({"status": ["OPEN"]})
        assert (await tables.ledger(one))["id"].tolist() == [task.id]
        assert (await tables.ledger(two)).empty
        with pytest.raises(KeyError):
            await two.task(task.id)
        theirs = await two.request_export({"status": ["OPEN"]})   # never dispatched

        other_gate = two.gate("export.after_read", actor="W")
        await two.start_worker("W")            # idle, blocking on lab two's queue
        report = await one.dispatch()
        assert report.added == 1
        await one.start_worker("W")
        done = await one.wait_for("completed", task_id=task.id)
        assert done["actor"] == "W"
        assert (await one.task(task.id)).status is TaskStatus.COMPLETED

        assert not other_gate.is_reached
        assert two.recorder.events == []
        assert two.history.of(task_id=task.id) == []
        assert (await two.task(theirs.id)).status is TaskStatus.WAITING
        assert (await tables.ledger(two))["id"].tolist() == [theirs.id]
        assert one.history.of(task_id=task.id, op="claim", type="ok")
        assert (await tables.queue(two)).empty
        assert await two.queue.getJob(task_job_id(task.id, 0)) is None


async def test_close_removes_everything_and_is_idempotent(service_settings):
    """`lab = await Lab.open()` (the notebook form) ... `await lab.close()`: workers closed,
    Redis keys of the prefix deleted, database dropped, loop handler restored; a second
    close does nothing."""
    loop = asyncio.get_running_loop()
    before = loop.get_exception_handler()
    lab = await Lab.open("closing", settings=service_settings, tickets=10, close_timeout=3)
    assert loop.get_exception_handler() is not before
    task = await lab.request_export()
    await lab.dispatch()
    worker = await lab.start_worker("W")
    await lab.wait_for("completed", task_id=task.id)
    prefix, url = lab.settings.queue_prefix, lab.settings.database_url
    assert await _keys(lab.settings.redis_url, prefix)

    assert await lab.close() == []
    assert lab.closed and lab.workers == {}
    assert worker.worker.closed
    assert await _keys(lab.settings.redis_url, prefix) == []
    assert not _db_exists(service_settings.database_url, url)
    assert loop.get_exception_handler() is before
    assert await lab.close() == []
    with pytest.raises(RuntimeError, match="closed"):
        await lab.start_worker("W")


async def test_restarting_a_worker_by_name_closes_the_first(lab):
    """A re-run "start worker" cell: the first worker with that name is closed."""
    first = await lab.start_worker("A")
    second = await lab.start_worker("A", stalled_interval_ms=100)
    assert first.worker.closed and not second.worker.closed
    assert lab.workers == {"A": second}
    assert await lab.stop_worker("A") is True
    assert await lab.stop_worker("A") is None


async def test_background_errors_are_collected_and_close_raises(service_settings):
    """A failing job and a loop exception show in `lab.errors`; `close()` still cleans up,
    then raises `LabErrors` naming them; acknowledged errors do not raise."""
    lab = await Lab.open("errors", settings=service_settings, tickets=10, close_timeout=3)
    try:
        task = await lab.request_export()
        await lab.start_worker("W", export_limit=1)      # the limit shrank: rejected (P8)
        await lab.enqueue(task.id)
        await lab.wait_for("failed", job_id=task_job_id(task.id, 0))
        asyncio.get_running_loop().call_exception_handler(
            {"message": "a background task died", "exception": RuntimeError("boom")})
        sources = [e.source for e in lab.errors]
        assert sources == ["worker failed", "loop"]
        assert "Rejected" in lab.errors[0].message and "boom" in lab.errors[1].message
        with pytest.raises(LabErrors):
            lab.check()
        assert lab.acknowledge(source="worker failed") == 1
    finally:
        with pytest.raises(LabErrors, match="a background task died"):
            await lab.close()
    assert lab.closed
    assert not _db_exists(service_settings.database_url, lab.settings.database_url)
    lab.acknowledge()
    assert await lab.close() == []


async def test_async_with_keeps_the_body_error_and_notes_background_errors(service_settings):
    """If the body of `async with Lab.open()` fails, that error propagates (not hidden by
    LabErrors) and carries the unacknowledged background errors as a note."""
    with pytest.raises(ValueError, match="body") as info:
        async with Lab.open("body", settings=service_settings, seed=False) as lab:
            asyncio.get_running_loop().call_exception_handler({"message": "lost in the dark"})
            raise ValueError("body")
    assert lab.closed
    assert any("lost in the dark" in note for note in info.value.__notes__)


async def test_done_with_waits_for_either_end_and_expects_the_jobs_errors(lab):
    """A step whose outcome the learner predicts waits with `done_with`: the same call
    returns a completed job's event and a rejected one's last failure (P8: no attempt
    follows), and that job's errors are expected: close() stays quiet."""
    from labs.scenes import ch25

    await lab.start_worker("W")
    ok = await lab.request_export({"text": "Login"}, user="ben")
    bad = await ch25.legacy_export(lab, {"status": ["ARCHIVED"]})
    await lab.dispatch()
    done = await lab.done_with(task_job_id(ok.id, 0))
    ended = await lab.done_with(task_job_id(bad.id, 0))
    assert done["kind"] == "completed"
    assert ended["kind"] == "failed" and ended["exhausted"]
    assert (await lab.task(bad.id)).status == TaskStatus.FAILED
    assert lab.errors_of(job_id=task_job_id(bad.id, 0))
    assert not lab.book.unacknowledged
