"""`labs.scenes.ch30` (notebook 30): a real `teamdesk worker` process held at a probe point,
its heartbeat, its log, the lease it claimed, and a clean stop of every process. Real
PostgreSQL, Redis and operating-system processes."""

from __future__ import annotations

import signal

from labs.scenes import ch30
from labs.timings import SCENE_WORKER
from teamdesk.testing import wait_until

FAST = SCENE_WORKER.to_env()


async def test_held_process_drains_after_release_and_reports_its_lease(lab):
    """W4: a process held mid-export keeps its heartbeat, drains on SIGTERM and exits 0 once
    released; `claimed_lease` is the execution_id the ledger holds meanwhile (P2)."""
    procs = ch30.Processes(lab, FAST)
    w = procs.spawn("w", hold="export.after_read")
    task = await lab.request_export({"status": ["OPEN"]}, user="ben")
    await procs.held("w")
    beat = await wait_until(lambda: procs.heartbeat("w"), 10, "w's heartbeat")
    assert beat["pid"] == w.pid
    running = await lab.task(task.id)
    assert running.status == "RUNNING"
    assert procs.claimed_lease("w", task.id) == running.execution_id
    assert procs.claimed_lease("w", "no-such-task") is None

    w.send(signal.SIGTERM)
    await procs.logged("w", "worker.draining")
    assert w.alive  # the hold keeps the running job, so the drain waits for it
    procs.release("w")
    done = await wait_until(lambda: ch30.completed(lab, task.id), 30, "the export")
    assert done.run == 0
    assert await w.wait_exit(30) == 0
    assert await procs.stop_all() == {"w": 0}  # already exited: its code, no new signal
    assert await procs.heartbeat_gone("w")
    assert not procs.scratch.exists()
