"""Scene helpers of `30-worker-process.ipynb`: starting real `teamdesk worker` processes on
the notebook's lab, holding them at a probe point and reading what they left behind
(machinery out of the cells).

The notebook keeps the story in view — which process is started with which hold, the
signals it gets, when a hold is released — and calls these in one line each. A process
cannot be paused by an in-process gate, so a hold is the product's *probe hold*
(`TEAMDESK_PROBE_HOLD=<point>:<folder>`): the process writes `<folder>/reached` at the
first crossing of `<point>` and waits until `<folder>/release` exists. The processes are
`labs.procs.WorkerProc`s — started exactly as an operator would (W4) — and every wait is
bounded (`teamdesk.testing.wait_until`).

What the notebook sees of each process is also written to `Processes.timeline`, a
`labs.history.History`: its start, its first heartbeat, the lease it claimed at its hold
(or as its log says), the signals it got, its drain, the result it committed and its exit
code — the swimlane of the processes' lifetimes (`timeline.plot()`), the book's timeline
of a takeover across processes.

Exercise A asks for w5's exit code after a SIGTERM, its hold released at once or never
(`30.exit`); `judge_exit` runs the scene (`w5_exit`) in a world of its own and compares.
Exercise B has the learner write the process's drain (`teamdesk.tasks.runner.Drain`, W4);
`judge_drain` runs it in two real processes (`labs.drain_worker`, the product's seam) and
names what broke.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import shutil
import signal
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labs import statements
from labs.exercises import Verdict, exercise, failed, passed, whole_number
from labs.history import History
from labs.i18n import say
from labs.procs import WorkerProc
from labs.worlds import world_context
from teamdesk.tasks.runner import EXIT_DRAIN_TIMEOUT, heartbeat_key
from teamdesk.testing import wait_until

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings

_SIGNALS = {signal.SIGTERM: ("info", "SIGTERM"), signal.SIGKILL: ("fail", "kill -9"),
            signal.SIGINT: ("info", "SIGINT")}


class TrackedProc(WorkerProc):
    """A `WorkerProc` whose signals and exit are written to its `Processes.timeline`."""

    def __init__(self, owner: Processes, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner = owner

    def send(self, sig: signal.Signals) -> None:
        if self.alive:
            type_, op = _SIGNALS.get(sig, ("info", sig.name))
            self.owner.timeline.add(actor=self.name, type=type_, op=op)
        super().send(sig)

    async def wait_exit(self, timeout: float) -> int | None:
        code = await super().wait_exit(timeout)
        if code is not None and self.name not in self.owner.exited:
            self.owner.exited.add(self.name)
            await self.owner.record_result(self.name)
            self.owner.timeline.add(actor=self.name, type="ok" if code == 0 else "fail",
                                    op=f"exit {code}")
        return code


class Processes:
    """The worker processes of one lab, each with its log and (optionally) a probe hold.

    `close()` of the lab kills any that are still alive and removes their scratch folder,
    so a re-opened lab (a re-run of the first cell) never inherits a running process."""

    def __init__(self, lab: Lab, timings: dict[str, str]) -> None:
        self.lab = lab
        #: The `TEAMDESK_*` settings every process gets (Q2: short timings for the class).
        self.timings = dict(timings)
        self.scratch = Path(tempfile.mkdtemp(prefix="nb30-"))
        self.procs: dict[str, WorkerProc] = {}
        #: What the notebook saw each process do (see the module docstring).
        self.timeline = History()
        #: name → (task id, run, execution id) of the lease it claimed, as far as seen.
        self.leases: dict[str, tuple[str, int, str]] = {}
        self.exited: set[str] = set()
        self._beating: set[str | tuple[str, str]] = set()
        lab.add_cleanup(self._kill_all)

    def _kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def spawn(self, name: str, *, hold: str | None = None, **env: str) -> WorkerProc:
        """Start `teamdesk worker --name <name>` on the lab's database and queue prefix,
        with the class timings plus `env` (e.g. `TEAMDESK_DRAIN_TIMEOUT_S="2"`). With
        `hold="<probe point>"` the process pauses at the first crossing of that point until
        `release(name)`."""
        if hold is not None:
            env["TEAMDESK_PROBE_HOLD"] = f"{hold}:{self._hold_dir(name)}"
        proc = TrackedProc(self, self.lab.settings, name, self.scratch, {**self.timings, **env})
        proc.start()
        self.procs[name] = proc
        self.timeline.add(actor=name, type="invoke", op="start",
                          detail=f"hold at {hold}" if hold else "")
        return proc

    def _claimed(self, name: str, task_id: str, run: int, execution_id: str) -> None:
        if name not in self.leases:
            self.leases[name] = (task_id, run, execution_id)
            self.timeline.add(actor=name, type="ok", op="claim", task_id=task_id, run=run,
                              execution=execution_id)

    async def record_result(self, name: str) -> None:
        """If process `name` committed its lease's result (the ledger is COMPLETED and its
        log says `task.completed` for that task), write the commit to the timeline once."""
        if name not in self.leases or any(
                r["actor"] == name and r["op"] == "result" for r in self.timeline.rows):
            return
        task_id, run, execution_id = self.leases[name]
        completed = f"task.completed task_id={task_id}" in await asyncio.to_thread(
            self.log, name)
        if completed and (await self.lab.task(task_id)).status == "COMPLETED":
            self.timeline.add(actor=name, type="ok", op="result", task_id=task_id, run=run,
                              execution=execution_id)

    def _hold_dir(self, name: str) -> Path:
        return self.scratch / f"hold-{name}"

    async def held(self, name: str, timeout: float = 30.0) -> None:
        """Wait until process `name` has reached its hold (it wrote `reached`)."""
        reached = self._hold_dir(name) / "reached"
        await wait_until(lambda: asyncio.to_thread(reached.exists), timeout,
                         f"{name} to reach its hold", on_timeout=self.procs[name].tail)
        ctx = json.loads(await asyncio.to_thread(reached.read_text))
        self._claimed(name, ctx["task_id"], int(ctx["run"]), ctx["execution_id"])
        self.timeline.add(actor=name, type="info", op="held", task_id=ctx["task_id"],
                          run=int(ctx["run"]), execution=ctx["execution_id"])

    def release(self, name: str) -> None:
        """Let process `name` go on past its hold."""
        (self._hold_dir(name) / "release").touch()
        self.timeline.add(actor=name, type="info", op="released")

    def log(self, name: str) -> str:
        """Everything process `name` has logged so far."""
        return self.procs[name].output()

    async def logged(self, name: str, event: str, timeout: float = 10.0) -> None:
        """Wait until process `name` has logged `event` (e.g. "worker.draining")."""
        async def seen() -> bool:
            return event in await asyncio.to_thread(self.log, name)

        await wait_until(seen, timeout, f"{name} to log {event}",
                         on_timeout=self.procs[name].tail)
        self.timeline.add(actor=name, type="info", op=event.removeprefix("worker."))

    async def heartbeat(self, name: str) -> dict[str, Any] | None:
        """Process `name`'s heartbeat as it stands in Redis (W4), None once it expired."""
        raw = await self.lab.redis.get(heartbeat_key(self.lab.settings, name))
        if raw and name not in self._beating:
            self._beating.add(name)
            self.timeline.add(actor=name, type="ok", op="heartbeat")
        return json.loads(raw) if raw else None

    async def heartbeat_gone(self, name: str) -> bool:
        """Whether process `name`'s heartbeat key has expired (or was removed on exit)."""
        gone = not await self.lab.redis.exists(heartbeat_key(self.lab.settings, name))
        if gone and (name, "gone") not in self._beating:
            self._beating.add((name, "gone"))
            self.timeline.add(actor=name, type="info", op="heartbeat gone")
        return gone

    def claimed_lease(self, name: str, task_id: str) -> str | None:
        """The `execution_id` process `name` logged when it claimed `task_id` (its first
        `task.claimed` line for that task), None if it never did: the lease a takeover
        gets is a new one (P2)."""
        for line in self.log(name).splitlines():
            if "task.claimed" in line and f"task_id={task_id}" in line:
                execution_id = line.split("execution_id=")[1].split()[0]
                run = int(line.split(" run=")[1].split()[0])
                self._claimed(name, task_id, run, execution_id)
                return execution_id
        return None

    async def finished(self, name: str, task_id: str, timeout: float = 30.0) -> Any:
        """Wait until `task_id` is COMPLETED (the ledger is the truth, I1) while process
        `name` runs; its row. If `name` claimed it (its log says so), the claim and the
        commit go on the timeline."""
        row = await wait_until(lambda: completed(self.lab, task_id), timeout,
                               f"{task_id} to be completed while {name} runs",
                               on_timeout=self.procs[name].tail)
        if self.claimed_lease(name, task_id):
            # The worker logs `task.completed` just after its commit: wait for that line (a
            # sync point; the bound only reports one that never came), or the timeline
            # would miss a result the ledger already shows (seen in a Run All under load).
            async def logged() -> bool:
                return f"task.completed task_id={task_id}" in await asyncio.to_thread(
                    self.log, name)

            await wait_until(logged, timeout, f"{name} to log the completion of {task_id}",
                             on_timeout=self.procs[name].tail)
            await self.record_result(name)
        return row

    async def stop_all(self, timeout: float = 30.0) -> dict[str, int | None]:
        """SIGTERM every process still running (SIGKILL past `timeout`), then remove the
        scratch folder; each process's exit code (None: it never started)."""
        codes = {name: await proc.stop(timeout) for name, proc in self.procs.items()}
        shutil.rmtree(self.scratch, ignore_errors=True)
        return codes


async def completed(lab: Lab, task_id: str) -> Any:
    """The task's ledger row once it is COMPLETED, None before: a condition for
    `wait_until` (the ledger is the truth, I1)."""
    row = await lab.task(task_id)
    return row if row.status == "COMPLETED" else None


# ------------------------------------------------------------ Exercise A: the drain's deadline

#: w5's drain timeout in Exercise A, seconds (`TEAMDESK_DRAIN_TIMEOUT_S`), by whether its
#: hold is released: never released, it runs out (W4); released, the export has time to
#: spare however busy the machine is — the exit code says which branch ran, not how fast.
W5_DRAIN_TIMEOUT = {False: "2", True: "10"}


async def w5_exit(procs: Processes, released: bool) -> tuple[Any, int | None]:
    """Exercise A's scene on `procs`' lab: w5 takes Ben's export of the PENDING tickets and
    holds mid-flight; SIGTERM; the hold is released as soon as w5 drains (`released`) or
    never. Returns the export and w5's exit code (None: still running after 30 s). The
    notebook plays it after stopping w4, so that only w5 may take the export; a judge's
    world has no other worker."""
    lab = procs.lab
    w5 = procs.spawn("w5", hold="export.after_read",
                     TEAMDESK_DRAIN_TIMEOUT_S=W5_DRAIN_TIMEOUT[released])
    task = await lab.request_export({"status": ["PENDING"]}, user="ben")
    await procs.held("w5")
    w5.send(signal.SIGTERM)
    if released:
        await procs.logged("w5", "worker.draining")
        procs.release("w5")
    return task, await w5.wait_exit(30)


@exercise("30.exit", answer=("release_during_drain", "my_w5_exit"),
          solution=("solution_release", "solution_w5_exit"),
          wrong={"never released, yet exit 0": (False, 0),
                 "released, yet exit 3": (True, EXIT_DRAIN_TIMEOUT),
                 "the signal's own code": (False, -signal.SIGTERM)})
async def judge_exit(answer: Any, *, settings: Settings | None = None) -> Verdict:
    """Exercise A: the learner's choice (release w5's hold as soon as it drains, or never)
    and their prediction of w5's exit code, compared with the real process: the scene of
    `w5_exit`, in a lab world of its own (W4: 0 when the running job finished within the
    drain timeout, `EXIT_DRAIN_TIMEOUT` when it was abandoned). An unset choice is the
    notebook's default, never released."""
    from labs.timings import FAST_WORKER
    from labs.worlds import fresh_world

    choice, predicted = answer
    if choice not in (None, True, False):
        return failed(say("ch30.exit.choice", "release_during_drain is True (release at once) "
                          "or False (never)"))
    predicted = whole_number(predicted)
    if predicted is None:
        return failed(say("ch30.exit.number", "my_w5_exit is w5's exit code: a number"))
    released = bool(choice)
    notes: list[str] = []
    async with fresh_world("30-exit-judge", notes, settings=settings, tickets=60) as lab:
        procs = Processes(lab, FAST_WORKER.to_env())
        _task, code = await w5_exit(procs, released)
        tail = procs.log("w5").splitlines()[-3:]
    if notes:
        return failed(say("ch30.exit.stopped", "w5's run did not finish:"), *notes)
    facts = {"released": released, "code": code, "predicted": predicted}
    if code not in (0, EXIT_DRAIN_TIMEOUT):  # neither way of W4: the run itself broke
        return failed(say("ch30.exit.broken", "w5's run did not end as staged (exit code "
                          "{code}), so it cannot judge your answer; its last log lines:",
                          code=code), *tail, **facts)
    why = (say("ch30.exit.finished", "the job finished within the drain timeout (W4)")
           if code == 0 else
           say("ch30.exit.abandoned", "past the drain timeout it abandoned the running job "
               "and said so (W4)") if code == EXIT_DRAIN_TIMEOUT else "")
    if predicted != code:
        return failed(say("ch30.exit.wrong", "with release_during_drain={released} w5 did not "
                          "exit {predicted}", released=released, predicted=predicted),
                      **facts)
    return passed(say("ch30.exit.holds", "w5 exited {code} (released: {released}): {why}",
                      code=code, released=released, why=why), **facts)


# ------------------------------------------------------------------ Exercise B: the drain

#: The judge's two runs of a learner's drain, each a real worker process in a world of its
#: own, SIGTERM arriving while an export is held mid-flight: "released" lets the export go
#: on as soon as the process drains (drain timeout 5 s, a second export already waiting in
#: the queue); "never released" keeps it held past a 0.5 s drain timeout.
DRAIN_RUNS: dict[str, tuple[bool, float]] = {"released": (True, 5.0),
                                             "never released": (False, 0.5)}


@dataclass
class DrainRun:
    """What one judged process did after its SIGTERM, read from outside: its exit code
    (None: it did not exit in time and was killed), the held export's row, the waiting
    export's row, whether its heartbeat key was still there, its log."""

    released: bool
    drain_timeout_s: float
    code: int | None
    held: tuple[str, str | None]
    waiting: tuple[str, int]
    heartbeat_left: bool
    log: str


def _drain_verdict(runs: dict[str, DrainRun], problems: list[str]) -> Verdict:
    """The verdict of the two runs: the problems found (none: the drain keeps W4)."""
    codes = ", ".join(f"{name}: exit {run.code}" for name, run in runs.items())
    if not problems:
        return passed(say("ch30.drain.holds", "your drain keeps W4 ({codes}): no new job "
                          "after SIGTERM, the running export finished and its lease went, and "
                          "past the deadline the process said so with exit 3", codes=codes),
                      runs=runs, problems=problems)
    return failed(say("ch30.drain.breaks", "your drain breaks W4 ({codes}):", codes=codes),
                  *problems, runs=runs, problems=problems)


def _drain_file(drain: Any, folder: Path) -> Path:
    """Write the drain's source (a function, or the text of a cell) to a file the child
    process loads (`labs.drain_worker`), with `DRAIN = <its name>`."""
    if callable(drain):
        source, name = textwrap.dedent(inspect.getsource(drain)), drain.__name__
    else:
        source = str(drain)
        name = next(n.name for n in ast.parse(source).body
                    if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef))
    path = folder / "drain.py"
    path.write_text(f"{source}\n\nDRAIN = {name}\n", encoding="utf-8")
    return path


async def _row(world: Any, task_id: str) -> tuple[str, str | None, int, Any]:
    async with world.sessions() as session:
        row = (await statements.run(session, "task_clock", {"id": task_id})).one()
    return row[0], row[1], row[2], row[3]


async def _one_drain_run(base: Settings, timings: dict[str, str], drain_file: Path,
                         folder: Path, released: bool, drain_timeout: float) -> DrainRun:
    """One real process with the learner's drain: an export held at `export.after_read`,
    a second export dispatched and waiting behind it, SIGTERM, the hold released once the
    process logs `worker.draining` (or never), then what is left."""
    from labs.procs import World
    from teamdesk.seed import seed_demo
    from teamdesk.services.exports import request_export

    world = await World.open_async(base, "ex30")
    hold = folder / "hold"
    env = {**timings, "TEAMDESK_WORKER_CONCURRENCY": "1",
           "TEAMDESK_DRAIN_TIMEOUT_S": str(drain_timeout),
           "TEAMDESK_PROBE_HOLD": f"export.after_read:{hold}"}
    proc = WorkerProc(world.settings, "judged", folder, env,
                      entry=["-m", "labs.drain_worker", str(drain_file)])
    try:
        async with world.sessions() as session:
            await seed_demo(session, tickets=30)
            first = await request_export(session, "acme", "ben", {"status": ["OPEN"]})
            second = await request_export(session, "acme", "ben", {"status": ["CLOSED"]})
        proc.start()

        async def reached() -> bool:
            if not proc.alive:  # e.g. the drain's file does not load
                raise RuntimeError(say("ch30.drain.exited-early", "the process exited before "
                                       "its first job:\n{tail}", tail=proc.tail(8)))
            return await asyncio.to_thread((hold / "reached").exists)

        await wait_until(reached, 30, "the judged process to reach its hold",
                         on_timeout=proc.tail)

        async def second_dispatched() -> bool:
            return (await _row(world, second.id))[3] is not None

        await wait_until(second_dispatched, 10, "the second export to be dispatched",
                         on_timeout=proc.tail)
        proc.send(signal.SIGTERM)
        if released:
            await wait_until(lambda: asyncio.to_thread(
                lambda: "worker.draining" in proc.output()), 10,
                "the judged process to drain", on_timeout=proc.tail)
            (hold / "release").touch()
        code = await proc.wait_exit(drain_timeout + 15)
        if code is None:
            proc.kill()
        beat = await world_redis_exists(world, heartbeat_key(world.settings, "judged"))
        status, lease, _, _ = await _row(world, first.id)
        status2, _, attempts2, _ = await _row(world, second.id)
        return DrainRun(released, drain_timeout, code, (status, lease), (status2, attempts2),
                        beat, proc.output())
    finally:
        proc.kill()
        await world.close()


async def world_redis_exists(world: Any, key: str) -> bool:
    """Whether `key` exists in the world's Redis (a client of its own, closed again)."""
    from teamdesk.tasks.queue import redis_client

    client = redis_client(world.settings)
    try:
        return bool(await client.exists(key))
    finally:
        await client.aclose()


def _problems(name: str, run: DrainRun) -> list[str]:
    """What `run` shows against W4, in the learner's terms."""
    if run.code is None:
        return [say("ch30.drain.no-exit", "{name}: the process did not exit within {bound:g} s "
                    "of SIGTERM (killed): a drain must end within its bound",
                    name=name, bound=run.drain_timeout_s + 15)]
    out = []
    if run.heartbeat_left:
        out.append(say("ch30.drain.heartbeat-left", "{name}: the heartbeat key was still in "
                       "Redis after the process exited: it still looked alive to a supervisor",
                       name=name))
    if run.released:
        status, lease = run.held
        if run.waiting != ("WAITING", 0):
            out.append(say("ch30.drain.new-job", "{name}: a new job was taken after SIGTERM (the "
                           "waiting export is {status}, attempts {attempts})",
                           name=name, status=run.waiting[0], attempts=run.waiting[1]))
        if status != "COMPLETED":
            out.append(say("ch30.drain.left-leased", "{name}: the running export was left "
                           "{status} under the process’s lease: it was not allowed to finish",
                           name=name, status=status) if lease
                       else say("ch30.drain.left", "{name}: the running export was left "
                                "{status}: it was not allowed to finish", name=name,
                                status=status))
        if run.code != 0:
            out.append(say("ch30.drain.clean-exit-code", "{name}: exit {code} after a clean drain "
                           "(expected 0)", name=name, code=run.code))
    elif run.code != EXIT_DRAIN_TIMEOUT:
        out.append(say("ch30.drain.timeout-exit-code", "{name}: exit {code} after abandoning the "
                       "running job past the drain timeout — the supervisor must be told "
                       "(EXIT_DRAIN_TIMEOUT = {expected})",
                       name=name, code=run.code, expected=EXIT_DRAIN_TIMEOUT))
    return out


#: A plausible wrong drain: every step in the right order, and exit 0 whatever happened —
#: a supervisor never learns that the drain timeout abandoned a running job (W4).
ALWAYS_0 = """async def my_drain(stopping):
    await stopping.stop_ticks()
    await stopping.close_worker(stopping.settings.drain_timeout_s)
    await stopping.stop_heartbeat()
    await stopping.close_connections()
    return 0
"""


async def _class_timings(lab: Lab) -> dict[str, Any]:
    """What the check cell passes, outside a notebook: the settings of a lab of its own
    as `base` (the judge opens a world of its own per run) and the class timings
    (`procs.timings` in the notebook)."""
    from labs.timings import FAST_WORKER

    return {"base": lab.settings, "timings": FAST_WORKER.to_env()}


@exercise("30.drain", answer="my_drain", solution="solution_drain",
          wrong={"the right order, exit 0 always": ALWAYS_0},
          context=world_context("30-drain-judge", _class_timings))
async def judge_drain(drain: Any, *, base: Settings, timings: dict[str, str]) -> Verdict:
    """Run a learner's drain (a function, or its source text) in the two real processes of
    `DRAIN_RUNS`, side by side, each in a world of its own, and name what broke W4: a
    process that did not exit, a job taken after SIGTERM, the running export not finished
    (left RUNNING under its lease), a wrong exit code, a heartbeat left behind."""
    scratch = Path(tempfile.mkdtemp(prefix="nb30-judge-"))
    try:
        path = _drain_file(drain, scratch)
        folders = {name: scratch / f"run{i}" for i, name in enumerate(DRAIN_RUNS)}
        for folder in folders.values():
            folder.mkdir()
        runs = await asyncio.gather(*(
            _one_drain_run(base, timings, path, folders[name], released, timeout)
            for name, (released, timeout) in DRAIN_RUNS.items()), return_exceptions=True)
    except SyntaxError as err:
        return failed(say("ch30.drain.not-python", "your drain is not Python yet: {err}", err=err))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for run in runs:
        if isinstance(run, BaseException):
            return failed(say("ch30.drain.could-not-run", "the judge could not run your drain: "
                              "{error_type}: {error}", error_type=type(run).__name__, error=run))
    by_name: dict[str, DrainRun] = dict(zip(DRAIN_RUNS, runs, strict=True))  # type: ignore[arg-type]
    problems = [p for name, run in by_name.items() for p in _problems(name, run)]
    return _drain_verdict(by_name, problems)
