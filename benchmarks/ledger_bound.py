"""The ledger bound: how fast PostgreSQL takes the writes a task's run makes, with nothing
else around them.

K child processes, one PostgreSQL connection each (raw psycopg, autocommit, psycopg's
automatic preparation as on the hot path), run per task the product's own named
statements — `teamdesk.tasks.ledger.QUERIES`, the text the processor sends — with the
parameters the processor gives them:

- `claim` (P2): run 0 with a fresh execution id, attempts 1; its RETURNING row (the one
  the executor gets) gives the task's type;
- `progress` (P3, P4), fenced by the lease the claim took (`Lease.params()`);
- the type's fenced completion (P3): `export_result` for an EXPORT (P5: the CSV and
  summary of a one-ticket export, the result's lifetime `result_ttl_s`),
  `reminder_completion` for a REMINDER (P10: its summary).

One claim, one fenced progress write and one fenced completion per task; no reads (the
task ids are listed before the clock starts), no Redis, no executor logic. Because these
are the statements the processor runs, the floor moves with them: a fenced write made
dearer in `queries.sql` makes this bound lower too.

The child is `python -m benchmarks.pipeline --role ledger-worker --part I --parts K`
(`ledger_worker_main`): it lists the tasks, says "ready", waits for "go" on stdin, and
says "done N" with the tasks it completed.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row

from benchmarks._world import (
    SQL,
    all_ready,
    insert_tasks,
    ledger_counts,
    prepare_world,
    read_line,
    start_child,
)
from labs.procs import World
from teamdesk.config import Settings
from teamdesk.tasks.lease import FENCED, Lease
from teamdesk.tasks.ledger import QUERIES

#: A one-ticket export's CSV, as `exports.to_csv` writes it: each export of this world
#: matches one ticket, so the completion carries a payload of the product's size.
_CSV = ("id,title,status,priority,creator_id,assignee_id,due_at,created_at\r\n"
        "17,Login fails with error 500 (#17),OPEN,NORMAL,dan,ben,,2026-01-07T10:28:00+00:00\r\n")


def _completion(task: Any, ttl_s: float) -> tuple[str, dict[str, Any]]:
    """The fenced completion the processor runs for the claimed row's type, and the values
    it writes for these tasks (besides the lease)."""
    if task.type == "EXPORT":
        return "export_result", {"result_csv": _CSV, "ttl_s": ttl_s,
                                 "result_summary": "1 tickets exported (filters: text=#17))"}
    return "reminder_completion", {"result_summary": "Reminder sent to ben (revision 1)."}


def _fenced(conn: psycopg.Connection, name: str, lease: Lease, values: dict[str, Any]) -> None:
    """Fenced statement `name` with the lease filled in, as `leased_update` sends it; one
    row must change (each task is claimed by one child only)."""
    if name not in FENCED:
        raise RuntimeError(f"{name!r} is not a lease-fenced statement of the product")
    if conn.execute(QUERIES[name], {**values, **lease.params()}).rowcount != 1:
        raise RuntimeError(f"{name} lost the lease of {lease.task_id}")


def ledger_worker_main(part: int, parts: int) -> int:
    """Child: claim + progress + completion per task over one connection, as fast as it
    goes. Its share: the tasks whose position modulo `parts` is `part`."""
    settings = Settings.from_env()
    ttl_s = float(settings.result_ttl_s)
    with psycopg.connect(settings.database_url or "", autocommit=True,
                         row_factory=namedtuple_row) as conn:
        mine = [r.id for r in conn.execute(SQL["task_ids"]).fetchall()][part::parts]
        print("ready", flush=True)
        sys.stdin.readline()  # "go"
        done = 0
        for task_id in mine:
            lease = Lease(task_id, 0, str(uuid.uuid4()))
            task = conn.execute(QUERIES["claim"], {**lease.params(), "attempts": 1}).fetchone()
            if task is None:
                continue
            _fenced(conn, "progress", lease, {"progress": 50})
            completion, values = _completion(task, ttl_s)
            _fenced(conn, completion, lease, values)
            done += 1
    print(f"done {done}", flush=True)
    return 0


async def measure_ledger(base: Settings, n: int, k: int) -> float:
    """N tasks' claim and fenced writes from K processes (one connection each; the caller
    passes workers × concurrency); returns tasks/s."""
    world = World.open(base, "bledger")
    children: list[subprocess.Popen] = []
    try:
        await prepare_world(world, n)
        await insert_tasks(world, n)
        children = [start_child("ledger-worker", world.settings,
                                ["--part", str(i), "--parts", str(k)]) for i in range(k)]
        await all_ready(children)
        t0 = time.perf_counter()
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        done = 0
        for c in children:
            done += int((await read_line(c, "done", timeout=60 + n / 20)).split()[1])
        elapsed = time.perf_counter() - t0
        completed, _, total = await ledger_counts(world)
        if (done, completed, total) != (n, n, n):
            raise RuntimeError(f"ledger baseline: done {done}, COMPLETED {completed} of {n}")
        return n / elapsed
    finally:
        for c in children:
            with contextlib.suppress(Exception):
                c.kill()
                c.wait(5)
        await world.close()
