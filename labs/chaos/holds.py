"""Strikes on running work: a worker process holds an export between two batches until the
driver has struck, and every claim and result write is recorded with its execution id.

The workers are other processes, so both halves meet in files of a folder of the run
(`<log_dir>/inflight/`): no `asyncio.Event` crosses a process boundary, and a file that
appears is the sync point (each wait on one is bounded and only detects a sync point
that never came).

**Worker side** (`install`, called by `labs.chaos.worker` in each worker process before
the product's `teamdesk worker` starts, through the product's probe API
`teamdesk.probes.install` — nothing is patched):

- each crossing of `claim.after` (a new lease, P2) and of `export.after_result` /
  `reminder.after_completion` (a result written under it, P5, P10) is appended to
  `<name>.history.jsonl` as a `Crossing`: the history a checker reads (which execution
  claimed a task when, which one wrote its result);
- at `export.after_read` — a batch read, before its progress write, where the book's
  takeover test pauses A (ch. 26 §4) — while `<name>.arm` holds a token this worker has
  not held for yet (and, when the arm names a task, for that task only; never for a task
  the arm excludes: one struck already), it writes `<name>.reached` (the token and the
  probe context: task, run, execution id) and waits until `<name>.release` holds that
  token. Its lock is still renewed meanwhile: a held export is RUNNING, not stalled,
  until a fault strikes it.

**Driver side** (`Holds`): `arm(name, exclude=…)` → token, `await reached(names, tokens,
timeout)` → the held `Held` or None, `release(name, token)`, `disarm(name, token)` (which
also releases a hold that came too late to be used, if it has come by then).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: The probe point a strike holds an export at (a batch read, before its progress write).
HOLD_POINT = "export.after_read"
#: Probe point → what a crossing of it records in the history.
RECORDED: dict[str, Literal["claim", "result"]] = {
    "claim.after": "claim",
    "export.after_result": "result",
    "reminder.after_completion": "result",
}
#: How often either side looks at the folder (seconds).
POLL_S = 0.02


@dataclass(frozen=True)
class Crossing:
    """One recorded crossing: a claim (a new lease) or a result written under a lease."""

    #: Wall-clock time (`time.time()`, one clock for every process of the machine).
    t: float
    kind: Literal["claim", "result"]
    task_id: str
    run: int
    execution_id: str
    #: The worker process (its name) whose executor crossed.
    worker: str

    def __str__(self) -> str:
        return (f"{self.t:.3f} {self.worker} {self.kind:6s} {self.task_id} run {self.run} "
                f"execution {self.execution_id[:8]}")


@dataclass(frozen=True)
class Held:
    """An export a worker holds between two batches for a strike."""

    worker: str
    token: int
    task_id: str
    run: int
    execution_id: str


def _write(path: Path, payload: Any) -> None:
    """Write `path` whole or not at all (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


# ------------------------------------------------------------ the worker process's side


def install(folder: Path, name: str) -> Callable[[], None]:
    """In a worker process: record the crossings of `RECORDED` and hold at `HOLD_POINT`
    when armed (the module docstring). Returns the function that removes the probe."""
    from teamdesk import probes

    folder.mkdir(parents=True, exist_ok=True)
    history = folder / f"{name}.history.jsonl"
    arm, reached, release = (folder / f"{name}.{what}" for what in ("arm", "reached",
                                                                     "release"))
    held: set[int] = set()

    def record(kind: str, ctx: dict[str, Any]) -> None:
        line = json.dumps({"t": time.time(), "kind": kind, "task_id": ctx["task_id"],
                           "run": ctx["run"], "execution_id": ctx["execution_id"],
                           "worker": name}) + "\n"
        fd = os.open(history, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write of one line: whole, even on SIGKILL
        finally:
            os.close(fd)

    async def probe(point: str, ctx: dict[str, Any]) -> None:
        if point in RECORDED:
            record(RECORDED[point], ctx)
            return
        if point != HOLD_POINT:
            return
        armed = _read(arm) or {}
        token = armed.get("token")
        if (token is None or token in held
                or armed.get("task_id") not in (None, ctx["task_id"])
                or ctx["task_id"] in armed.get("exclude", ())):
            return
        before = _read(reached)
        if before is not None and before.get("token") == token:
            return  # an earlier start of this worker held for it already
        held.add(token)
        _write(reached, {"token": token, **ctx})
        # The release comes from another process: a file poll is the sync point. Tokens
        # only grow, and the file keeps the newest release: a later token released (the
        # next fault's arm and disarm, within one poll) releases this one too.
        while not isinstance(done := _read(release), int) or done < token:  # noqa: ASYNC110
            await asyncio.sleep(POLL_S)

    return probes.install(probe)


# ------------------------------------------------------------ the driver's side


class Holds:
    """The driver's half: arm a worker, wait (bounded) until it holds an export, release."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._tokens = 0

    def _path(self, name: str, what: str) -> Path:
        return self.folder / f"{name}.{what}"

    def arm(self, name: str, task_id: str | None = None,
            exclude: Collection[str] = ()) -> int:
        """Ask worker `name` to hold its next export between two batches — of `task_id`
        only, when given (an executor that took that task over), and of none of the tasks
        in `exclude` (struck already: each strike gets a task of its own); the token."""
        self._tokens += 1
        _write(self._path(name, "arm"), {"token": self._tokens, "task_id": task_id,
                                         "exclude": sorted(exclude)})
        return self._tokens

    def held(self, name: str, token: int) -> Held | None:
        """What `name` holds for `token` right now, or None."""
        ctx = _read(self._path(name, "reached"))
        if ctx is None or ctx.get("token") != token:
            return None
        return Held(name, token, ctx["task_id"], int(ctx["run"]), ctx["execution_id"])

    async def reached(self, names: Sequence[str], tokens: dict[str, int],
                      timeout: float) -> Held | None:
        """The first of `names` to hold an export for its token, waiting at most
        `timeout` seconds; None if none did (the queue had no export for them then)."""
        deadline = time.monotonic() + timeout
        while True:
            for name in names:
                found = self.held(name, tokens[name])
                if found is not None:
                    return found
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(POLL_S)  # poll interval of another process's state

    def release(self, name: str, token: int) -> None:
        """Let `name`'s held export go on (idempotent): a worker held for `token` or an
        earlier one goes on, so a newer release never undoes an older one."""
        path = self._path(name, "release")
        done = _read(path)
        if not isinstance(done, int) or done < token:
            _write(path, token)

    def disarm(self, name: str, token: int) -> None:
        """No more holding for `token`; a hold reached by now is released. A worker that
        read the arm just before it went may still hold once: `release(name, token)` as
        well lets that one through, where no earlier hold of `name` must stay."""
        with contextlib.suppress(FileNotFoundError):
            if (_read(self._path(name, "arm")) or {}).get("token") == token:
                self._path(name, "arm").unlink()
        if self.held(name, token) is not None:
            self.release(name, token)


def read_history(folder: Path) -> list[Crossing]:
    """Every worker's recorded crossings, in time order (a torn last line is skipped)."""
    out: list[Crossing] = []
    for path in sorted(folder.glob("*.history.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
                d = json.loads(line)
                out.append(Crossing(float(d["t"]), d["kind"], d["task_id"], int(d["run"]),
                                    d["execution_id"], d["worker"]))
    return sorted(out, key=lambda c: c.t)
