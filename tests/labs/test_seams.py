"""The harness drives the product through seams, never patches (ARCHITECTURE: "Seams, not
patches"). What a lab varies — an executor's fence (P3), a worker's run hook, a worker
process's extra listener (W2's retired one) — is passed in; no attribute of any
`teamdesk.*` module is rebound, not even for a moment. Real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import signal
import sys
import types
from datetime import UTC, datetime
from typing import Any

import teamdesk
from labs import counterexample_worker
from labs.chaos import ChaosConfig, run_chaos
from labs.lab import Lab
from labs.procs import clear_prefix
from teamdesk.db.models import TaskStatus
from teamdesk.tasks.queue import task_job_id
from teamdesk.tasks.runner import Seams, run_worker_process
from teamdesk.tasks.worker import TaskWorker

T = 8


def _import_the_product() -> None:
    """Every `teamdesk` module a run could import later (its package attribute would look
    new otherwise). Migrations are Alembic scripts, not modules to import."""
    for info in pkgutil.walk_packages(teamdesk.__path__, "teamdesk."):
        if ".migrations" not in info.name:
            importlib.import_module(info.name)


def _snapshot() -> dict[tuple[str, str], Any]:
    """(module, attribute) → the object itself (kept alive, so `is` is a fair test)."""
    return {(name, attr): value
            for name, module in list(sys.modules.items())
            if name == "teamdesk" or name.startswith("teamdesk.")
            for attr, value in vars(module).items()}


def _rebound(before: dict[tuple[str, str], Any]) -> list[str]:
    after = _snapshot()
    changed = [f"{m}.{a}" for (m, a), v in before.items()
               if (m, a) not in after or after[(m, a)] is not v]
    added = [f"{m}.{a}" for (m, a), v in after.items()
             if (m, a) not in before and not isinstance(v, types.ModuleType)]
    return changed + added


async def _lab_scene_with_both_counterexamples(service_settings: Any) -> None:
    """A lab where A runs the two old fences (switched on while A is running, then off)
    and a worker's run loop crashes (a second start of a running worker)."""
    async with Lab.open("seams", settings=service_settings, tickets=10, close_timeout=3) as lab:
        await lab.start_worker("A")
        bug = lab.counterexample("forgot-row-count", actor="A")
        guard = lab.counterexample("status-only-guard", actor="A")
        _, task = await lab.create_ticket("Seams", due_at=datetime.now(UTC))
        await lab.dispatch()
        await lab.wait_for("completed", actor="A", job_id=task_job_id(task.id, 0), timeout=T)
        bug.off()
        guard.off()
        export = await lab.request_export({"status": ["OPEN"]})
        await lab.dispatch()
        await lab.wait_for("completed", actor="A", job_id=task_job_id(export.id, 0),
                           timeout=T)
        assert (await lab.task(export.id)).status is TaskStatus.COMPLETED

        # The run hook: A's fetch loop is running (it completed jobs); a second run of it
        # is refused by bullmq, and the lab hears of it at once (on_run_error).
        lab.workers["A"].start()
        await asyncio.wait_for(lab.workers["A"]._run_task, T)
        [crash] = lab.errors_of(source="worker run", actor="A")
        assert "already running" in crash.message and not crash.acknowledged
        lab.acknowledge(source="worker run", actor="A")


async def _worker_process_with_the_legacy_listener(settings: Any) -> None:
    """`run_worker_process` as `labs.counterexample_worker` runs it (its hook), in this
    process, stopped as soon as the hook has seen the worker."""
    stop = asyncio.Event()
    seen: list[TaskWorker] = []

    def hook(worker: TaskWorker) -> None:
        legacy = counterexample_worker.seams_for("legacy-failed-listener").on_worker
        assert legacy is not None
        legacy(worker)
        seen.append(worker)
        stop.set()

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = await asyncio.wait_for(run_worker_process(
            settings, name="seams-w", stop=stop, seams=Seams(on_worker=hook)), 30)
    finally:
        for sig, handler in handlers.items():  # the worker process installs its own
            signal.signal(sig, handler)
    assert code == 0 and len(seen) == 1


async def test_labs_switch_counterexamples_and_hooks_without_rebinding_the_product(
        service_settings, settings, tmp_path):
    """Every attribute of every `teamdesk` module is the same object after: a lab with both
    old fences switched on and off around running workers, a crashed run loop, a worker
    process with W2's retired listener (the `labs.counterexample_worker` hook), and a short
    chaos run of real worker processes with that counterexample."""
    _import_the_product()
    before = _snapshot()

    await _lab_scene_with_both_counterexamples(service_settings)
    assert _rebound(before) == []

    await _worker_process_with_the_legacy_listener(settings)
    assert _rebound(before) == []

    try:
        report = await run_chaos(settings, ChaosConfig(
            seed=5, workers=1, tasks=6, duration=2.0, kinds=("sigterm",), settle=30.0,
            counterexample="legacy-failed-listener"), out=lambda line: None,
            log_dir=tmp_path)
    finally:
        await clear_prefix(settings)
    assert report.settled and sum(report.by_status.values()) == 6 + report.strike_exports
    assert _rebound(before) == []


def test_the_snapshot_sees_a_rebound_product_name(monkeypatch):
    """The check above can fail: rebinding `leased_update` in the processor's module (what
    the counterexamples did before the fence seam) is seen, and so is a name added."""
    from teamdesk.tasks import lease, processor

    before = _snapshot()
    monkeypatch.setattr(processor, "leased_update", lease.leased_update, raising=False)
    monkeypatch.setattr(lease, "leased_update", lambda *a, **k: None)
    assert _rebound(before) == ["teamdesk.tasks.lease.leased_update",
                                "teamdesk.tasks.processor.leased_update"]
