"""Gates through a lab, and the Jepsen-style history of a real takeover race (ch. 26 §7):
worker A with renewal off and a 1000 ms lock, B checking for stalls every 100 ms, A
paused at `export.after_read`. Synchronised by gates and events only."""

from __future__ import annotations

from datetime import UTC, datetime

from labs.history import History, execution_labels
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
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][::-1] == [
        "dispatcher", "A", "B", "lease"]
    # The ledger's side, from the same rows: E1 (A) until B's claim, E2 (B) until its
    # result committed — the winning commit the picture marks.
    assert h.execution_labels() == {a_exec: "E1", b_exec: "E2"}
    assert [(s.label, s.actor, s.ended_by) for s in h.leases()] == [
        ("E1", "A", "taken over"), ("E2", "B", "commit")]
    assert [h.rows[i] for i in h.commits()] == h.of(actor="B", type="ok", op="result")
    assert [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "winner"] == [
        "winning commit: E2 (B) → COMPLETED"]


async def test_reminder_commit_gate_history(lab, tmp_path):
    """P10, P11, P12: A is paused inside its reminder transaction, B takes the lease; A's
    completion is refused and rolls back, B's commits. The history's lease lane shows E1
    (A) taken over by E2 (B), and B's returned job is the winning commit."""
    _, task = await lab.create_ticket("Renew the contract", due_at=datetime.now(UTC),
                                      assignee_id="cai")
    job_id = task_job_id(task.id, 0)
    g_a = lab.gate("reminder.after_lease_check", actor="A")
    g_b = lab.gate("claim.after", actor="B")
    await lab.start_worker("A", **{**STUCK, "stalled_interval_ms": 3_600_000})
    await lab.dispatch()
    await g_a.reached()
    await lab.start_worker("B", **WATCHFUL)
    await lab.wait_for("stalled", job_id=job_id)
    await g_b.reached()
    g_a.release()
    await g_a.passed()
    await lab.wait_for("error", actor="A", job_id=job_id)
    assert lab.acknowledge(source="worker error", actor="A") == 1
    g_b.release()
    await lab.wait_for("completed", actor="B", job_id=job_id)
    assert (await lab.task(task.id)).status is TaskStatus.COMPLETED

    h = lab.history
    assert h.of(actor="A", type="fail", op="remind", detail="lease lost")
    assert [h.rows[i] for i in h.commits()] == h.of(actor="B", type="ok", op="job")
    assert [(s.label, s.actor, s.ended_by) for s in h.leases()] == [
        ("E1", "A", "taken over"), ("E2", "B", "commit")]
    fig = h.plot(path=tmp_path / "reminder.png")
    assert [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "winner"] == [
        "winning commit: E2 (B) → COMPLETED"]


# ---------------------------------------------------------------- the swimlane picture

def _race_history() -> tuple[History, dict[str, int]]:
    """A takeover race as a lab records it (same rows, same order, no servers): A claims
    and freezes, B takes over, A's late progress write is refused, B commits."""
    h = History(start=0.0)
    at: dict[str, int] = {}

    def step(name: str | None = None, **row) -> None:
        h.add(t=len(h) / 100, **row)
        if name:
            at[name] = len(h) - 1

    e1, e2 = "aaaa1111-0000", "bbbb2222-0000"
    step(actor="dispatcher", type="invoke", op="dispatch")
    step(actor="dispatcher", type="ok", op="dispatch")
    step(actor="A", type="invoke", op="claim", task_id="T1", run=0)
    step("a_claim", actor="A", type="ok", op="claim", task_id="T1", run=0, execution=e1)
    step(actor="A", type="invoke", op="progress", task_id="T1", run=0, execution=e1)
    step(actor="A", type="info", op="gate", task_id="T1", run=0, execution=e1,
         detail="paused at export.after_read")
    step(actor="B", type="info", op="stalled", task_id="T1", run=0)
    step(actor="B", type="invoke", op="claim", task_id="T1", run=0)
    step("b_claim", actor="B", type="ok", op="claim", task_id="T1", run=0, execution=e2)
    step(actor="A", type="info", op="gate", task_id="T1", run=0, execution=e1,
         detail="released at export.after_read")
    step("lost", actor="A", type="fail", op="progress", task_id="T1", run=0, execution=e1,
         detail="lease lost")
    step(actor="B", type="invoke", op="result", task_id="T1", run=0, execution=e2)
    step("commit", actor="B", type="ok", op="result", task_id="T1", run=0, execution=e2)
    step(actor="B", type="ok", op="job", task_id="T1", run=0, detail="exported 42 rows")
    return h, at


def _lanes(ax) -> dict[str, float]:
    return {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True)}


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_execution_labels_in_order_of_first_appearance():
    """P2: every claim writes a new execution_id; the plot names them E1, E2, … in the
    order they first appear, on their short ids (the tables' `execution` column)."""
    h, _ = _race_history()
    assert h.execution_labels() == {"aaaa1111": "E1", "bbbb2222": "E2"}
    assert execution_labels(["", "x" * 36, None, "y" * 8, "x" * 8]) == {"xxxxxxxx": "E1",
                                                                         "yyyyyyyy": "E2"}


def test_leases_follow_claims_and_the_commit():
    """P2, P3, P5: E1 holds the lease from A's claim until B's claim takes it over; E2
    holds it until B's result commits; A's refused write ends nothing."""
    h, at = _race_history()
    assert h.commits() == [at["commit"]]
    assert [(s.label, s.actor, s.start, s.end, s.ended_by) for s in h.leases()] == [
        ("E1", "A", at["a_claim"], at["b_claim"], "taken over"),
        ("E2", "B", at["b_claim"], at["commit"], "commit"),
    ]


def test_plot_has_legend_lanes_labels_and_the_winner(tmp_path):
    """P2, P3, P5, P6: the picture a class reads — actor lanes and a lease lane, a legend
    naming every marker, E1/E2 on the steps, the lease bars, the winning commit."""
    h, at = _race_history()
    fig = h.plot(path=tmp_path / "race.png", title="race")
    ax = fig.axes[0]
    lanes = _lanes(ax)
    assert sorted(lanes, key=lanes.get, reverse=True) == ["dispatcher", "A", "B", "lease"]

    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    for word in ("invoke", "ok", "fail", "info", "claim", "lease lost", "commit", "gate",
                 "lease lane"):
        assert any(text.startswith(word) for text in legend), word

    texts = _texts(ax)
    assert {"claim ok E1", "claim ok E2", "progress: lease lost E1", "result ok E2",
            "paused E1"} <= set(texts)

    bars = [p for p in ax.patches if p.get_gid() == "lease"]
    assert [(b.get_x(), b.get_x() + b.get_width()) for b in bars] == [
        (at["a_claim"], at["b_claim"]), (at["b_claim"], at["commit"])]
    assert all(b.get_y() < lanes["lease"] < b.get_y() + b.get_height() for b in bars)
    assert bars[0].get_facecolor() != bars[1].get_facecolor()
    assert {"E1 (A)", "E2 (B)"} <= set(texts)

    winner = [t for t in ax.texts if t.get_gid() == "winner"]
    assert [w.get_text() for w in winner] == ["winning commit: E2 (B) → COMPLETED"]
    assert tuple(winner[0].xy) == (at["commit"], lanes["lease"])
    stars = [c for c in ax.collections if c.get_gid() == "commit"]
    assert [tuple(c.get_offsets()[0]) for c in stars] == [(at["commit"], lanes["B"])]
    lost = [c for c in ax.collections if c.get_gid() == "lease lost"]
    assert [tuple(c.get_offsets()[0]) for c in lost] == [(at["lost"], lanes["A"])]
    assert (tmp_path / "race.png").read_bytes().startswith(b"\x89PNG")


def test_plot_one_lease_lane_per_task_and_none_on_request():
    """With two tasks each gets its own lease lane; `lease=False` draws the actors only."""
    h, _ = _race_history()
    h.add(actor="C", type="ok", op="claim", task_id="T2", run=0, execution="cccc3333")
    lanes = _lanes(h.plot().axes[0])
    assert {"lease T1", "lease T2"} <= set(lanes) and "lease" not in lanes
    assert not any(n.startswith("lease") for n in _lanes(h.plot(lease=False).axes[0]))


def test_reminder_commit_is_the_job_that_returned_after_its_check():
    """P10, P7: a reminder has no probe after its commit; the commit is the `ok job` of
    the process that entered its transaction (`invoke remind`) and lost nothing. A's
    rolled-back completion and an executor's error report are not commits; the error
    report releases its lease."""
    h = History(start=0.0)
    for actor, e in (("A", "aaaa"), ("B", "bbbb")):
        h.add(actor=actor, type="ok", op="claim", task_id="R1", run=0, execution=e)
        h.add(actor=actor, type="invoke", op="remind", task_id="R1", run=0, execution=e)
    h.add(actor="A", type="fail", op="remind", task_id="R1", run=0, execution="aaaa",
          detail="lease lost")
    h.add(actor="A", type="ok", op="job", task_id="R1", run=0,
          detail="lease lost during reminder completion")
    h.add(actor="B", type="ok", op="job", task_id="R1", run=0, detail="Reminder sent to cai")
    h.add(actor="C", type="ok", op="claim", task_id="X1", run=0, execution="cccc")
    h.add(actor="C", type="invoke", op="error report", task_id="X1", run=0, execution="cccc")
    h.add(actor="C", type="ok", op="error report", task_id="X1", run=0, execution="cccc")
    h.add(actor="C", type="fail", op="job", task_id="X1", run=0)
    assert h.commits() == [6]
    assert [(s.label, s.task_id, s.end, s.ended_by) for s in h.leases()] == [
        ("E1", "R1", 2, "taken over"), ("E2", "R1", 6, "commit"),
        ("E3", "X1", 9, "error report")]
    texts = _texts(h.plot().axes[0])
    assert "winning commit: E2 (B) → COMPLETED" in texts
    assert "released (error reported)" in texts
