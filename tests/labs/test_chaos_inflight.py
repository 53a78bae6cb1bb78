"""Chaos faults strike running work (`labs.chaos.holds`, the driver's holds), and the
checker names a result written over a newer lease (P3, P5, W2). The protocol and the
invariant are checked on their own first (no services; the verdict's rule is in
`test_chaos_pure.py`), then on the notebook's two real runs: the product's (every fault
struck a RUNNING task of its own, stalls, leases lost, 0 violations) and the lease-less
export's (the clobber named)."""

from __future__ import annotations

import asyncio

from labs.chaos import Invariant
from labs.chaos.checker import clobbered
from labs.chaos.holds import HOLD_POINT, Crossing, Holds, install, read_history
from labs.scenes import ch90
from teamdesk import probes


def _c(t: float, kind: str, execution: str, task: str = "T1") -> Crossing:
    return Crossing(t, kind, task, 0, execution, "w1")  # type: ignore[arg-type]


def test_a_takeover_is_not_a_clobber_but_an_old_write_over_a_newer_lease_is():
    """P3, P5: E2 claims after E1 (a takeover) and writes: fine. E1 writing after E2's
    claim — over E2's running lease or over its stored result — is named; a task that
    completed before anyone claimed it again is not."""
    takeover = [_c(1, "claim", "e1"), _c(2, "claim", "e2"), _c(3, "result", "e2")]
    over_result = [*takeover, _c(4, "result", "e1")]
    over_lease = [_c(1, "claim", "e1"), _c(2, "claim", "e2"), _c(3, "result", "e1")]
    assert clobbered(takeover) == {}
    assert set(clobbered(over_result)) == {"T1"} == set(clobbered(over_lease))
    assert "newer lease e2" in clobbered(over_result)["T1"]
    assert clobbered([_c(1, "claim", "e1"), _c(2, "result", "e1")]) == {}
    assert clobbered(list(reversed(over_lease))) == clobbered(over_lease)  # time order


async def test_a_worker_holds_an_armed_export_until_released_and_records_its_crossings(
        tmp_path):
    """The file protocol both sides speak: unarmed, the hold point passes at once; armed,
    the next crossing holds (`reached` names the task and lease) until released, and a
    token is held once only; claims and results go to the history in time order."""
    uninstall = install(tmp_path, "w1")
    holds = Holds(tmp_path)
    ctx = {"task_id": "T1", "run": 0, "execution_id": "e1", "actor": "w1"}
    try:
        await probes.announce("claim.after", **ctx)
        await asyncio.wait_for(probes.announce(HOLD_POINT, **ctx), 1)  # not armed
        token = holds.arm("w1")
        crossing = asyncio.ensure_future(probes.announce(HOLD_POINT, **ctx))
        held = await holds.reached(["w1"], {"w1": token}, 5)
        assert held is not None and (held.task_id, held.execution_id) == ("T1", "e1")
        assert not crossing.done()
        holds.release("w1", token)
        await asyncio.wait_for(crossing, 5)
        await asyncio.wait_for(probes.announce(HOLD_POINT, **ctx), 1)  # held once only
        holds.disarm("w1", token)
        await probes.announce("export.after_result", **ctx)
    finally:
        uninstall()
    assert [(c.kind, c.execution_id) for c in read_history(tmp_path)] == [
        ("claim", "e1"), ("result", "e1")]


async def test_an_arm_for_one_task_holds_that_task_only_and_a_newer_release_frees_it(
        tmp_path):
    """P3, P5 (the takeover race's gates): E2's worker, armed for the task E1 held, lets
    another task's export pass and holds the taken-over one; a later fault's arm and
    release of the same worker (token 2, written before the held one could see token 1's
    release) frees it too — no executor is left holding forever."""
    uninstall = install(tmp_path, "w2")
    holds = Holds(tmp_path)
    other = {"task_id": "T9", "run": 0, "execution_id": "e9", "actor": "w2"}
    mine = {"task_id": "T1", "run": 0, "execution_id": "e2", "actor": "w2"}
    try:
        token = holds.arm("w2", "T1")
        await asyncio.wait_for(probes.announce(HOLD_POINT, **other), 1)  # not its task
        crossing = asyncio.ensure_future(probes.announce(HOLD_POINT, **mine))
        held = await holds.reached(["w2"], {"w2": token}, 5)
        assert held is not None and held.execution_id == "e2" and not crossing.done()
        later = holds.arm("w2")
        holds.release("w2", token)
        holds.release("w2", later)  # within one poll: token 1's release is overwritten
        await asyncio.wait_for(crossing, 5)
    finally:
        uninstall()


async def test_an_arm_skips_the_tasks_already_struck(tmp_path):
    """Each strike gets a task of its own: a worker armed with `exclude` lets an export of
    a struck task pass (it goes on at once) and holds the next export of another task."""
    uninstall = install(tmp_path, "w1")
    holds = Holds(tmp_path)
    struck = {"task_id": "T1", "run": 0, "execution_id": "e2", "actor": "w1"}
    fresh = {"task_id": "T2", "run": 0, "execution_id": "e3", "actor": "w1"}
    try:
        token = holds.arm("w1", exclude={"T1"})
        await asyncio.wait_for(probes.announce(HOLD_POINT, **struck), 1)  # passes
        assert holds.held("w1", token) is None
        crossing = asyncio.ensure_future(probes.announce(HOLD_POINT, **fresh))
        held = await holds.reached(["w1"], {"w1": token}, 5)
        assert held is not None and held.task_id == "T2" and not crossing.done()
        holds.release("w1", token)
        await asyncio.wait_for(crossing, 5)
    finally:
        uninstall()


async def test_the_notebooks_run_strikes_running_work_and_keeps_every_invariant(chaos_90_runs):
    """P3, P6, D6: every scheduled fault struck an export its worker held RUNNING, each
    on a task of its own, none missed; the queue saw stalls, executors met LeaseLost, and
    still no invariant broke (no clobber either)."""
    r = chaos_90_runs[0]
    assert r.conclusive and r.stalls > 0, (r.verdict(), r.fault_rows(), r.notes)
    assert r.settled and r.violations == [], r.violations
    assert not r.missed and len(r.strikes) == len(r.schedule), r.fault_rows()
    assert all(s.on_running and s.task_id for s in r.strikes)
    assert len(r.struck_tasks) == len(r.schedule), r.fault_rows()
    assert all(s.at >= s.due for s in r.strikes), r.fault_rows()  # never before its offset
    assert any(s.lease_after in ("taken over", "cleared") for s in r.strikes), r.strikes
    assert {c.kind for c in r.history} == {"claim", "result"}


async def test_the_lease_less_export_writes_over_a_newer_lease_and_is_named(chaos_90_runs):
    """P3, P5, W2: with the export's writes by `task_id + run`, the frozen E1, woken after
    E2 took its export over, writes its CSV over E2's — and the checker names it."""
    r = chaos_90_runs[1]
    named = ch90.clobbered_ids(r)
    assert named, r.violations
    assert all(v.invariant is not Invariant.CSV for v in r.violations)  # same lines
    assert all(r.rows[t]["status"] == "COMPLETED" for t in named)


async def test_the_worker_process_takes_a_fence_and_defaults_to_the_products(settings):
    """P3: `run_worker_process(seams=Seams(fence=...))` is the fence its task worker's
    fenced writes go through (the seam `labs.counterexample_worker` uses); without one it is
    the product's `leased_update`. The product's command line offers no seam at all."""
    import inspect
    import signal

    from labs.fences import LeaselessExport
    from teamdesk import cli
    from teamdesk.tasks.lease import leased_update
    from teamdesk.tasks.runner import Seams, run_worker_process

    async def fence_of(**kwargs) -> object:
        stop, seen = asyncio.Event(), []

        def hook(worker) -> None:
            seen.append(worker.ctx.fence)
            stop.set()

        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            code = await asyncio.wait_for(run_worker_process(
                settings, name="fence-w", stop=stop, seams=Seams(on_worker=hook, **kwargs)), 30)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        assert code == 0
        return seen[0]

    assert await fence_of() is leased_update
    leaseless_export = LeaselessExport()
    assert await fence_of(fence=leaseless_export) is leaseless_export
    assert set(inspect.signature(cli.main).parameters) == {
        "argv", "commands", "description", "resolve_settings"}
