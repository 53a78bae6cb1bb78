"""Gates through a lab, and the Jepsen-style history of a real takeover race (ch. 26 §7):
worker A with renewal off and a 1000 ms lock, B checking for stalls every 100 ms, A
paused at `export.after_read`. Synchronised by gates and events only."""

from __future__ import annotations

from labs.lab import STUCK, WATCHFUL
from teamdesk.db.models import TaskStatus
from teamdesk.tasks.queue import task_job_id


async def test_gate_pauses_and_releases(lab):
    """A gate holds the executor (ledger RUNNING, progress 0) until released; the pause and
    the release are in the history."""
    task = await lab.request_export({"status": ["OPEN"]})
    gate = lab.gate("export.after_read", actor="W")
    await lab.start_worker("W")
    await lab.dispatch()
    ctx = await gate.reached()
    assert (ctx["task_id"], ctx["run"], ctx["actor"]) == (task.id, 0, "W")
    row = await lab.task(task.id)
    assert (row.status, row.progress, row.execution_id) == (TaskStatus.RUNNING, 0,
                                                            ctx["execution_id"])
    gate.release()
    await gate.passed()
    await lab.wait_for("completed", task_id=task.id)
    assert (await lab.task(task.id)).status is TaskStatus.COMPLETED
    details = [r["detail"] for r in lab.history.of(op="gate")]
    assert details == ["paused at export.after_read", "released at export.after_read"]


async def test_gate_released_raising_is_a_retryable_failure(lab):
    """Released with an error, the probe raises it in the executor: attempt 1 fails (the
    lab collects the `failed` event), the same run is retried after 30 ms and completes."""
    task = await lab.request_export({"priority": ["LOW"]})
    gate = lab.gate("export.after_read")
    await lab.start_worker("W", backoff_delay_ms=30)
    await lab.enqueue(task.id)
    await gate.reached()
    gate.release(raising=OSError("connection reset while reading"))
    failed = await lab.wait_for("failed", task_id=task.id)
    assert (failed["exhausted"], failed["attempts_made"]) == (False, 1)
    await lab.wait_for("completed", task_id=task.id)
    row = await lab.task(task.id)
    assert (row.status, row.attempts) == (TaskStatus.COMPLETED, 2)
    assert [e.source for e in lab.errors] == ["worker failed"]
    assert "connection reset" in lab.errors[0].message
    assert lab.acknowledge(contains="connection reset") == 1
    assert lab.history.of(op="gate", detail="raised at export.after_read: OSError: "
                                              "connection reset while reading")


async def test_takeover_race_history(lab, tmp_path):
    """P2, P3, P6, W2: the history shows, in order, A claims, A is paused, B sees the
    stall and claims, A's late progress write fails (lease lost) and its job completion
    is refused, B completes. The swimlane plot writes a non-empty PNG."""
    task = await lab.request_export({"status": ["OPEN"]})
    job_id = task_job_id(task.id, 0)
    g_a = lab.gate("export.after_read", actor="A")
    g_b = lab.gate("claim.after", actor="B")
    await lab.start_worker("A", **STUCK)
    await lab.dispatch()
    a_ctx = await g_a.reached()
    await lab.start_worker("B", **WATCHFUL)
    await lab.wait_for("stalled", job_id=job_id)
    b_ctx = await g_b.reached()
    g_a.release()
    await g_a.passed()
    await lab.wait_for("error", actor="A", job_id=job_id)   # its lock is B's now
    g_b.release()
    await lab.wait_for("completed", actor="B", job_id=job_id)
    assert lab.acknowledge(source="worker error", actor="A") == 1

    h = lab.history
    a_exec, b_exec = a_ctx["execution_id"][:8], b_ctx["execution_id"][:8]
    steps = [
        dict(actor="A", type="invoke", op="claim"),
        dict(actor="A", type="ok", op="claim", execution=a_exec),
        dict(actor="A", type="invoke", op="progress", execution=a_exec),
        dict(actor="A", type="info", op="gate", detail="paused at export.after_read"),
        dict(actor="B", type="info", op="stalled"),
        dict(actor="B", type="invoke", op="claim"),
        dict(actor="B", type="ok", op="claim", execution=b_exec),
        dict(actor="A", type="info", op="gate", detail="released at export.after_read"),
        dict(actor="A", type="fail", op="progress", execution=a_exec, detail="lease lost"),
        dict(actor="A", type="info", op="worker error"),
        dict(actor="B", type="ok", op="result", execution=b_exec),
        dict(actor="B", type="ok", op="job"),
    ]
    at = -1
    for step in steps:
        at = h.index(after=at, **step)
    assert all(r["task_id"] == task.id for r in h.rows if r["actor"] in ("A", "B"))
    assert not h.of(actor="A", type="ok", op="progress")
    assert not h.of(actor="A", op="result")
    assert any("task.lease_lost" in line and f"task_id={task.id}" in line for line in lab.logs)

    df = h.frame()
    assert tuple(df.columns) == ("time", "actor", "process", "type", "op", "task_id", "run",
                                 "execution", "detail")
    assert df["time"].is_monotonic_increasing
    assert set(df["process"]) >= {f"A:{job_id}", f"B:{job_id}", "dispatcher"}

    path = tmp_path / "race.png"
    fig = h.plot(path=path, title="takeover race")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000
    assert fig._repr_png_().startswith(b"\x89PNG")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][::-1][:3] == [
        "dispatcher", "A", "B"]
