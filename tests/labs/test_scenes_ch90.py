"""`labs.scenes.ch90` (notebook 90): `worker_children` sees a live worker process of ours
and forgets it once it exited. Real PostgreSQL, Redis and a real `teamdesk worker`
process. The exercise and the case are tested in `test_exercises_ch90.py`, the in-flight
strikes and the lease clobber in `test_chaos_inflight.py`."""

from __future__ import annotations

from labs.procs import WorkerProc
from labs.scenes import ch90


async def test_worker_children_sees_a_live_worker_only(lab, tmp_path):
    """A chaos run must leave no worker process behind: a running `teamdesk worker` of this
    process is listed, and no longer once it has stopped."""
    w = WorkerProc(lab.settings, "wx", tmp_path, {})
    w.start()
    try:
        assert w.pid in {p.pid for p in ch90.worker_children()}
    finally:
        await w.stop(30)
    assert w.pid not in {p.pid for p in ch90.worker_children()}
