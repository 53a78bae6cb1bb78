"""`teamdesk demo race`: the export takeover race of ch. 26, narrated in a terminal.

For an instructor without Jupyter. It opens a throw-away lab world (a database cloned from
the migrated template, its own queue prefix, the demo data) and runs the race the
notebooks run (`labs.races.Takeover`), printing the ledger-vs-queue row after each step:

  1. an export is requested: a WAITING outbox row, no Redis call yet;
  2. the dispatcher adds its job;
  3. executor A (lock 1 s, renewal off: the stuck one) claims it and is held after reading;
  4. A's lock expires; B's stall check takes the job and B claims a new lease;
  5. A comes back late: its progress write matches 0 rows (LeaseLost) and it stops;
  6. B finishes: B's CSV is the one saved.

Pauses are probe gates, not sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from labs import tables
from labs.lab import Lab
from labs.races import Takeover
from teamdesk.config import Settings
from teamdesk.tasks.queue import task_job_id

STEP_TIMEOUT_S = 15.0
_COLUMNS = ["task_id", "run", "status", "progress", "execution", "job_id", "state",
            "job_progress"]


async def _narrate(lab: Lab, pause: bool, emit: Callable[[str], object]) -> int:
    """The six steps of ch. 26 §4, each followed by the ledger-and-queue row."""

    async def step(n: int, text: str, task_id: str) -> None:
        emit(f"\n[{n}] {text}")
        board = await tables.ledger_vs_queue(lab)
        row = board[board["task_id"] == task_id][_COLUMNS]
        emit("    " + tables.show(row).to_string(index=False).replace("\n", "\n    "))
        if pause:
            await asyncio.get_running_loop().run_in_executor(None, input, "    (Enter) ")

    task = await lab.request_export({"status": ["OPEN"]}, user="ben")
    await step(1, f"ben requests an export: task {task.id}, WAITING, run 0 (outbox row, "
                  "no Redis call yet)", task.id)
    await lab.dispatch()
    await step(2, f"the dispatcher adds job {task_job_id(task.id, 0)} and notes "
                  "dispatched_at", task.id)
    async with Takeover(lab, task.id, deliver=None, timeout=STEP_TIMEOUT_S) as race:
        a = await race.a_claims_and_freezes()
        await step(3, f"executor A claims lease E1={a['execution_id'][:8]} and is held after "
                      "reading (lock 1 s, renewal off)", task.id)
        b = await race.b_takes_over()
        await step(4, f"A's lock expired; B's stall check moved the job back (real 'stalled' "
                      f"event); B claimed E2={b['execution_id'][:8]}", task.id)
        await race.a_returns_late()
        lost = next((line for line in lab.logs
                     if "task.lease_lost" in line and task.id in line), None)
        await step(5, "A comes back late and writes progress with E1: 0 rows matched → "
                      f"LeaseLost, A stops\n    log: {(lost or '(no log line)').strip()}",
                   task.id)
        await race.b_finishes()
    row = await lab.task(task.id)
    await step(6, f"B completes: {row.result_summary}", task.id)
    # The verdict is read from what happened, not assumed: A's lease_lost line (P3) and
    # the row COMPLETED with a result (P5); anything else is said, and the exit code is 1.
    if lost is None or row.status.value != "COMPLETED" or not row.result_csv:
        emit(f"\nverdict: the race did not end as the book says: A's lease_lost line "
             f"{'found' if lost else 'missing'}, the row {row.status.value} "
             f"{'with' if row.result_csv else 'without'} a result")
        return 1
    lines = row.result_csv.count("\n") - 1
    emit(f"\nverdict: A's write matched 0 rows; B's CSV saved ({lines} rows, "
         f"execution {b['execution_id'][:8]}). Computation ran twice; the committed "
         "result exists once (P12).")
    return 0


async def run_race_demo(settings: Settings, *, pause: bool = False,
                        emit: Callable[[str], object] = print) -> int:
    """Run the narrated race once against the configured servers, in a lab world of its
    own (gone afterwards); returns an exit code. `emit` gets the narration, line by line
    (the terminal's by default; `teamdesk preflight` keeps it and shows only the time)."""
    async with Lab.open("demo", settings=settings.replace(backoff_delay_ms=100),
                        tickets=120) as lab:
        return await _narrate(lab, pause, emit)
