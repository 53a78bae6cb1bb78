"""Counterexamples switched on for one lab only (`lab.counterexample`): the old fences
really break P3/P5/P10 for the switching lab's executors, leave every other lab and actor on
the product's fence, and are gone after `off()`. They reach the executors through the
worker's fence seam (`create_task_worker(fence=...)`, `TaskContext.fence`); no product
name is rebound. Real PostgreSQL and Redis."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from labs import counterexamples, tables
from labs.lab import STUCK, WATCHFUL, Lab
from teamdesk.db.models import TaskStatus, Ticket
from teamdesk.tasks import lease
from teamdesk.tasks.queue import task_job_id

T = 8


async def _recovered_under_a(lab: Lab) -> tuple[str, tuple, tuple, TaskStatus]:
    """ch. 26 §5: A pauses inside its reminder transaction after the three effects, a
    recovery scan (D6) clears its lease, A is released. Returns (A's result, effects
    before, effects after, ledger status after)."""
    ticket, task = await lab.create_ticket("Check the invoice", due_at=datetime.now(UTC),
                                           assignee_id="cai")
    before = await tables.reminder_effects(lab, ticket.id)
    gate = lab.gate("reminder.after_event", actor="A", when=lambda c: c["task_id"] == task.id)
    if "A" not in lab.workers:
        await lab.start_worker("A")
    await lab.dispatch()
    await gate.reached(T)
    await lab.age(task.id, lab.settings.stale_running_age_s + 1)
    await lab.dispatch()  # D6: WAITING, lease cleared, while A is inside its transaction
    gate.release()
    done = await lab.wait_for("completed", actor="A", job_id=task_job_id(task.id, 0), timeout=T)
    after = await tables.reminder_effects(lab, ticket.id)
    return done["result"], before, after, (await lab.task(task.id)).status


async def test_forgot_row_count_commits_a_lost_lease_in_its_own_lab_only(service_settings):
    """P10 broken on purpose: with `forgot-row-count` on in lab `bug`, A's completion
    matches 0 rows (D6 cleared the lease) and the effects commit anyway; in lab `clean`,
    open at the same time, the same scene rolls back. The switch reaches A's worker, which
    was started before it, through the fence A's context holds; `off()` puts A back on the
    product's fence."""
    async with Lab.open("bug", settings=service_settings, tickets=10, close_timeout=3) as bug, \
            Lab.open("clean", settings=service_settings, tickets=10, close_timeout=3) as clean:
        await bug.start_worker("A")  # running before the switch: it still gets the old fence
        switch = bug.counterexample("forgot-row-count", actor="A")
        fence = bug.workers["A"].ctx.fence
        assert isinstance(fence, counterexamples.LabFence) and fence.actor == "A"
        assert bug._fences.active("A") is switch and bug._fences.active("B") is None

        result, before, after, status = await _recovered_under_a(clean)
        assert result.startswith("lease lost") and after == before  # P10 holds there
        assert status is TaskStatus.WAITING and switch.effects == []

        result, before, after, status = await _recovered_under_a(bug)
        assert result.startswith("Reminder sent")                  # A believes it sent it
        assert after == (before[0] + 1, before[1] + 1, before[2] + 1)  # and it committed
        assert status is TaskStatus.WAITING                         # while the ledger says not
        assert switch.effects == ["reminder completion: 0 rows matched, carried on"]

        switch.off()
        assert bug._fences.active("A") is None and repr(switch).endswith(
            "off, 1 write(s) changed>")
        switch.off()  # idempotent
        await bug.stop_worker("A")  # the redelivery would meet the unique notification


async def test_status_only_guard_lets_the_old_executor_save_its_stale_csv(lab):
    """P3/P5 broken on purpose: with `status-only-guard` on for A, A frozen after its read
    comes back after B's takeover and its writes pass (B is RUNNING), so A's CSV of old
    titles is saved and B's first write then finds the row COMPLETED. B, not switched, keeps
    the lease fence."""
    switch = lab.counterexample("status-only-guard", actor="A")
    task = await lab.request_export({"status": ["OPEN"]})
    jid = task_job_id(task.id, 0)
    gate_a = lab.gate("export.after_read", actor="A")
    gate_b = lab.gate("claim.after", actor="B")
    await lab.start_worker("A", **{**STUCK, "export_batch_size": 1000})
    await lab.dispatch()
    await gate_a.reached(T)
    async with lab.sessions() as s, s.begin():
        await s.execute(update(Ticket).where(Ticket.team_id == lab.team, Ticket.status == "OPEN")
                        .values(title="B-era: " + Ticket.title))
    await lab.start_worker("B", **WATCHFUL)
    await lab.wait_for("stalled", job_id=jid, timeout=T)
    await gate_b.reached(T)
    with lab.expect_errors(source="worker error", actor="A", job_id=jid):  # lock mismatch
        gate_a.release()
        await lab.wait_for("error", actor="A", job_id=jid, timeout=T)
    gate_b.release()
    b = await lab.wait_for("completed", actor="B", job_id=jid, timeout=T)
    switch.off()

    saved = await lab.task(task.id)
    titles = [r["title"] for r in csv.DictReader(io.StringIO(saved.result_csv))]
    assert saved.status is TaskStatus.COMPLETED and titles
    assert not any(t.startswith("B-era: ") for t in titles)  # A's stale rows won
    assert b["result"] == "lease lost during progress"       # B stepped aside
    assert [e.split(":")[0] for e in switch.effects] == ["progress", "result"]


async def test_unknown_counterexample_is_refused(lab):
    with pytest.raises(ValueError, match="unknown counterexample 'no-fence'"):
        lab.counterexample("no-fence")
    assert lab._fences.switches == []


async def test_a_worker_outside_any_lab_keeps_the_products_fence(settings):
    """P3: the context's fence defaults to `lease.leased_update`; only a caller that passes
    another one (a lab) changes it."""
    from teamdesk.tasks.context import TaskContext

    assert TaskContext(settings=settings).fence is lease.leased_update
