"""The takeover race of ch. 26 §4, staged once, in named steps, on a lab's real workers.

    async with Takeover(lab, task.id, a_opts=A_OPTS) as race:
        a = await race.a_claims_and_freezes()   # A claims E1 and is held at `a_point`
        ...                                     # e.g. the tickets change: A's copy is stale
        b = await race.b_takes_over()           # A's lock lapses; B's stall check moves the
                                                # job back (a real `stalled`), B claims E2
        await race.a_returns_late()             # A let go: its fenced write matches no row,
                                                # the queue refuses A's job (its lock is B's)
        done = await race.b_finishes()          # B completes: its result is the one saved

Every pause is a gate at a probe point (`export.after_read` or `export.before_result` for
A, `claim.after` for B), never a sleep; each wait is bounded only to report a sync point
that never came. Leaving the `async with` releases both gates whatever happened, as the
book's test does in `finally`. 26b's scenes and judge, 26d's Fault A and the terminal demo
(`labs.demo`) all run this one race (P2, P3, P5, P6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from labs.gates import DEFAULT_TIMEOUT_S, Gate
from teamdesk.tasks.queue import task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab

#: A: the stuck executor — a 1 s lock it does not renew, its own stall check an hour away,
#: the whole export in one batch (one progress write after the read).
A_STUCK: dict[str, Any] = {"renew_lock": False, "lock_duration_ms": 1000,
                           "stalled_interval_ms": 3_600_000, "export_batch_size": 1000}
#: B: the watchful executor — checks for stalled jobs every 100 ms.
B_WATCHFUL: dict[str, Any] = {"stalled_interval_ms": 100}


@dataclass
class Takeover:
    """One takeover race of task `task_id` (run 0) between executors A and B of `lab`.
    `a_point` is where A freezes; `deliver` puts the job in the queue once A runs (the
    lab's `enqueue`, `dispatch` for the dispatcher's own add, or None when the caller has
    already dispatched it)."""

    lab: Lab
    task_id: str
    a_point: str = "export.after_read"
    a_opts: dict[str, Any] = field(default_factory=lambda: dict(A_STUCK))
    b_opts: dict[str, Any] = field(default_factory=lambda: dict(B_WATCHFUL))
    deliver: str | None = "enqueue"
    timeout: float = DEFAULT_TIMEOUT_S
    #: The probe contexts where A and B were held (their `execution_id`s: E1 and E2).
    a: dict[str, Any] = field(default_factory=dict)
    b: dict[str, Any] = field(default_factory=dict)
    _gates: tuple[Gate, Gate] | None = None

    @property
    def job_id(self) -> str:
        return task_job_id(self.task_id, 0)

    def _mine(self, ctx: dict[str, Any]) -> bool:
        return ctx.get("task_id") == self.task_id

    async def __aenter__(self) -> Takeover:
        self._gates = (self.lab.gate(self.a_point, actor="A", when=self._mine),
                       self.lab.gate("claim.after", actor="B", when=self._mine))
        return self

    async def __aexit__(self, kind: type[BaseException] | None, err: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.release()

    def release(self) -> None:
        """Let both executors go (the book's `finally`); harmless when already released."""
        for gate in self._gates or ():
            gate.release()

    @property
    def gates(self) -> tuple[Gate, Gate]:
        if self._gates is None:
            raise RuntimeError("use the race in `async with Takeover(...) as race:`")
        return self._gates

    async def a_claims_and_freezes(self) -> dict[str, Any]:
        """Only A runs; the job is delivered; A claims E1 (P2) and is held at `a_point`.
        Returns A's probe context."""
        await self.lab.stop_worker("B")  # only A may take the first delivery
        await self.lab.start_worker("A", **self.a_opts)
        if self.deliver == "dispatch":
            await self.lab.dispatch()
        elif self.deliver == "enqueue":
            await self.lab.enqueue(self.task_id)
        self.a = await self.gates[0].reached(self.timeout)
        return self.a

    async def b_takes_over(self) -> dict[str, Any]:
        """B starts; A's lock lapses unrenewed and B's stall check moves the job back (the
        real `stalled` event); B claims E2 (P2) and is held right after its claim. Returns
        B's probe context."""
        await self.lab.start_worker("B", **self.b_opts)
        await self.lab.wait_for("stalled", job_id=self.job_id, timeout=self.timeout)
        self.b = await self.gates[1].reached(self.timeout)
        return self.b

    async def a_returns_late(self) -> dict[str, Any]:
        """A is let go: its next fenced write carries E1 and matches no row (P3, LeaseLost),
        it returns without reporting more (P6), and the queue refuses its job — the lock
        is B's now (the worker `error` event, expected). Returns that event."""
        gate_a = self.gates[0]
        with self.lab.expect_errors(source="worker error", actor="A", job_id=self.job_id):
            gate_a.release()
            await gate_a.passed(self.timeout)
            return await self.lab.wait_for("error", actor="A", job_id=self.job_id,
                                           timeout=self.timeout)

    async def b_finishes(self) -> dict[str, Any]:
        """B is let go and completes under E2 (P5). Returns its `completed` event."""
        self.gates[1].release()
        return await self.lab.wait_for("completed", actor="B", job_id=self.job_id,
                                       timeout=self.timeout)
