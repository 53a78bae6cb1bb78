"""Each fault really happens and heals: a stopped Redis server refuses connections and
accepts them again after a start; a proxy cuts one client while a direct client keeps
working; flushing loses the keys; an injected ledger write failure strikes once.

Stopping and FLUSHALL run against a Redis server of the test's own (`own_redis`), started
by the same `services.start_redis`, so they cannot disturb anyone else using the
project's shared embedded Redis (a concurrent test run, an open notebook)."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from labs import faults, tables
from labs.lab import Lab
from teamdesk.db.models import TaskStatus
from teamdesk.tasks.queue import redis_client, task_job_id


async def _ping(settings) -> bool:
    client = redis_client(settings)
    try:
        return await client.ping()
    finally:
        await client.aclose()


async def test_redis_stop_refuses_then_start_accepts(own_redis, service_settings):
    """ch. 23: a real outage. While the server is down, a fresh client is refused and a
    dispatcher scan fails in seconds, leaving the task undispatched (D3); after the start
    the same lab dispatches it and a worker completes it. The restart happens in a
    `finally` (`redis_outage`)."""
    root, settings = own_redis
    async with Lab.open("outage", settings=settings, tickets=20, close_timeout=3) as lab:
        task = await lab.request_export()
        assert await _ping(lab.settings)
        async with faults.redis_outage(lab, root=root):
            with pytest.raises(RedisConnectionError):
                await _ping(lab.settings)
            with pytest.raises((RedisConnectionError, OSError)):
                await lab.dispatch()
            row = await lab.task(task.id)
            assert (row.status, row.dispatched_at) == (TaskStatus.WAITING, None)
        assert await _ping(lab.settings)
        assert (await lab.dispatch()).added == 1
        await lab.start_worker("W")
        await lab.wait_for("completed", task_id=task.id)
        notes = [r["detail"] for r in lab.history.of(op="fault")]
        assert notes[0].startswith("redis stopped") and notes[1].startswith("redis started")
    assert await _ping(settings)
    # Start/stop are idempotent around a running server.
    await faults.start_redis(settings, root=root)
    assert await _ping(settings)


async def test_redis_we_do_not_own_is_refused(own_redis, service_settings):
    """`NotOurRedis` for another host, for a server that is not under the given data
    folder (here: the shared embedded one, which must keep running), and for a port where
    nothing of ours listens."""
    root, settings = own_redis
    with pytest.raises(faults.NotOurRedis, match="another host"):
        await faults.stop_redis(settings.replace(redis_url="redis://10.11.12.13:6379/0"))
    with pytest.raises(faults.NotOurRedis, match="not started by this project"):
        await faults.stop_redis(service_settings, root=root)
    assert await _ping(service_settings)
    with pytest.raises(faults.NotOurRedis, match="no Redis server of ours"):
        await faults.start_redis(settings.replace(redis_url="redis://127.0.0.1:9/0"), root=root)


async def test_proxy_cuts_only_its_client_then_heals(lab):
    """A client through the proxy loses its connection and is refused while cut; a direct
    client of the same server keeps working; after `heal()` the proxied client works
    again."""
    key = f"{lab.settings.queue_prefix}:proxy-check"
    async with await faults.RedisProxy.start(lab) as proxy:
        via, direct = redis_client(proxy.settings), redis_client(lab.settings)
        try:
            assert proxy.url != lab.settings.redis_url
            await via.set(key, "through the proxy")
            assert await direct.get(key) == "through the proxy"
            assert proxy.connections == 1

            assert await proxy.cut() == 1
            with pytest.raises(RedisConnectionError):
                await via.get(key)
            with pytest.raises(RedisConnectionError):
                await _ping(proxy.settings)        # a new connection is refused too
            assert await direct.get(key) == "through the proxy"

            await proxy.heal()
            assert await via.get(key) == "through the proxy"
            assert proxy.accepted == 2
        finally:
            await via.aclose()
            await direct.aclose()
    assert [r["detail"].split(" (")[0] for r in lab.history.of(op="fault")][1:] == [
        f"proxy {proxy.port} cut", f"proxy {proxy.port} healed", f"proxy {proxy.port} cut"]


async def test_proxy_cut_worker_misses_job_direct_worker_runs_it(lab):
    """A worker connected through a cut proxy cannot fetch (silently: the bullmq port
    retries its connection without an event); a worker connected directly runs the job
    meanwhile, although it started after the job was added and A was already waiting.
    Closing the lab stops the proxy it started."""
    proxy = await faults.RedisProxy.start(lab)        # closed by lab.close()
    await lab.start_worker("A", redis_url=proxy.url)
    await proxy.cut()
    task = await lab.request_export()
    await lab.dispatch()
    await lab.start_worker("B")
    done = await lab.wait_for("completed", task_id=task.id)
    assert done["actor"] == "B"
    assert not lab.history.of(actor="A", op="claim")
    await proxy.heal()
    lab.acknowledge(actor="A")  # connection errors of the cut worker, if bullmq reports any
    await lab.close()
    assert proxy.is_cut and proxy.connections == 0


async def test_flush_prefix_and_flushall(own_redis, tmp_path):
    """`flush_prefix` deletes only the lab's keys; `flushall_everything` deletes every key
    on the server (our own server here) — and refuses, deleting nothing, a server that is
    not the embedded one of the data folder it is given (a shared classroom server)."""
    root, settings = own_redis
    async with Lab.open("flush", settings=settings, tickets=10, close_timeout=3) as lab:
        await lab.request_export()
        await lab.dispatch()
        other = redis_client(settings)
        try:
            await other.set("someone-else:key", "1")
            assert await faults.flush_prefix(lab) > 0
            assert (await tables.queue(lab)).empty
            assert await other.get("someone-else:key") == "1"
            with pytest.raises(faults.NotOurRedis):
                await faults.flushall_everything(lab, root=tmp_path / "another-project")
            assert await other.get("someone-else:key") == "1"
            await faults.flushall_everything(lab, root=root)
            assert await other.dbsize() == 0
        finally:
            await other.aclose()


async def test_fail_next_write_strikes_once(lab):
    """The result write after `export.before_result` fails once (a lost connection): the
    processor reports a retryable failure (P7) and the retry completes (attempts 2)."""
    task = await lab.request_export({"status": ["PENDING"]})
    fault = faults.fail_next_write(lab, "export.before_result")
    await lab.start_worker("W", backoff_delay_ms=30)
    await lab.enqueue(task.id)
    failed = await lab.wait_for("failed", job_id=task_job_id(task.id, 0))
    assert "InjectedWriteError" in failed["error"] and failed["exhausted"] is False
    await lab.wait_for("completed", task_id=task.id)
    row = await lab.task(task.id)
    assert (row.status, row.attempts, fault.fired) == (TaskStatus.COMPLETED, 2, 1)
    assert lab.history.of(op="fault", actor="W")
    assert lab.acknowledge(contains="injected fault") == 1
    with pytest.raises(ValueError, match="not followed by a ledger write"):
        faults.fail_next_write(lab, "export.after_progress")


async def test_final_report_fails_keeps_the_committed_result(service_settings):
    """P5, P9 (the book's Fault B, the one staging 26a's contrast and 26d's case run): on a
    real worker the result UPDATE commits, then `update_progress(100)` fails; the error
    path finds no RUNNING row, logs `task.error_unreported` and hands the queue nothing, so
    the job completes with its progress short of 100 and the ledger keeps its CSV."""
    async with Lab.open("fault-b", settings=service_settings, tickets=40,
                        close_timeout=3) as lab:
        staged = await faults.final_report_fails(lab, {"status": ["OPEN"]})
        row, job = await lab.task(staged.task_id), await lab.job(staged.task_id)
        assert (staged.ended["kind"], staged.ended["result"]) == (
            "completed", "error not reported, lease no longer held: ConnectionError")
        assert (row.status, row.progress, row.execution_id) == (TaskStatus.COMPLETED, 100, None)
        assert row.result_csv and row.expires_at is not None
        assert await job.getState() == "completed" and job.progress != 100
        # P9: the error path met a row this very execution had completed: no lease was
        # taken over, so the line says the lease is no longer held, not that it was lost.
        assert [line for line in lab.logs if "task.error_unreported" in line
                and staged.task_id in line and "(lease no longer held)" in line]
