"""A `teamdesk worker` process with a counterexample switched on — for one lab run only.

    python -m labs.counterexample_worker legacy-failed-listener worker --name w1 ...
    python -m labs.counterexample_worker lease-less-export worker --name w1 ...

The product is not changed, and none of its names is rebound: the remaining arguments are
the product's `worker` options, and the counterexample goes through the worker process's
seams (`labs.worker_entry` → `runner.worker_main(seams=...)`): a worker hook
(`Seams(on_worker=...)`, W1's worker) that adds it to the process's task worker before it
takes a job, or a fence (`Seams(fence=...)`, the `fence=` of `create_task_worker`, P3).
Only processes started this way (by `labs.chaos` with `ChaosConfig(counterexample=...)`,
through `labs.chaos.worker`) carry it.

`legacy-failed-listener` — the old `failed` callback that ch. 26 §7 retired (contract W2):
when the queue gives up on a job it sets the task FAILED by `task_id + run`, with the
error's own text, and no lease. The event carries no `execution_id`, so this write can
overwrite a rejection's fixed text (P8), or fail a task that a newer executor now owns
(W3). `tests/integration/test_worker_recovery.py` shows the second in a gated race.

`lease-less-export` — the export's writes as they were before the lease: progress and
the final CSV by `task_id + run`, without `execution_id` or `status = 'RUNNING'`, and no
row count looked at (the book, ch. 26 §4: the final CSV write carries lease + RUNNING
too, so an old result cannot overwrite a new one unconditionally; without them, it can).
An old execution E1 that wakes up after E2 took the task over writes its CSV over E2's
newer lease or result (breaks P3, P5; `task_id + run` is not a lease, W2).
It goes through the worker's fence seam (`Seams(fence=...)` → `run_worker_process` →
`create_task_worker`); every other fenced write keeps the product's `leased_update`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from labs.statements import LAB_QUERIES
from teamdesk.tasks.lease import Fence, Lease, leased_update
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.runner import PRODUCT, Seams, WorkerHook
from teamdesk.tasks.worker import TaskWorker, is_exhausted

log = logging.getLogger("labs.counterexample")

def legacy_failed_listener(ledger: Ledger, *, hold: Callable[[], Awaitable[Any]] | None = None,
                           on_write: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """The retired listener: on exhaustion, FAILED by task id + run (no lease, raw text).
    It writes on a connection of its own (`ledger.fresh_connection`), outside the pool the
    worker's jobs use.

    In-process (a notebook, `labs.scenes.ch26d.LateCallback`), `hold` is awaited before
    the write — the book's *late* callback, released once a newer executor has claimed —
    and `on_write` hears of each write (`task_id`, `run`, `rows`, `last_error`) when it
    landed. Without them (the counterexample worker process) it writes at once."""
    pending: set[asyncio.Future] = set()

    def on_failed(job: Any, err: BaseException) -> None:
        if not is_exhausted(job, err):
            return
        data = job.data if isinstance(job.data, dict) else {}

        async def write() -> None:
            if hold is not None:
                await hold()
            values = {"task_id": data.get("taskId"), "run": data.get("run"),
                      "last_error": f"{type(err).__name__}: {err}"[:500]}
            async with ledger.fresh_connection() as conn:
                result = await conn.execute(LAB_QUERIES["legacy_failed"], values)
            log.warning("counterexample.legacy_failed_write task_id=%s run=%s rows=%s",
                        data.get("taskId"), data.get("run"), result.rowcount)
            if on_write is not None:
                on_write({**values, "rows": result.rowcount})

        fut = asyncio.ensure_future(write())
        pending.add(fut)
        fut.add_done_callback(pending.discard)

    return on_failed


def add_legacy_listener(worker: TaskWorker) -> None:
    """A `teamdesk.tasks.runner.WorkerHook`: the retired listener beside the W2 ones."""
    assert worker.ctx.ledger is not None
    worker.worker.on("failed", legacy_failed_listener(worker.ctx.ledger))
    log.warning("counterexample.installed legacy-failed-listener")


# The export's writes before the lease (labs/queries.sql): by task id + run, whatever the
# status (P3, P5 broken on purpose), in place of the product's statement of that name.
_LEASELESS = {"progress": "leaseless_progress", "export_result": "leaseless_export_result"}


async def leaseless_export(conn: Any, lease: Lease, statement: str | None = None, *,
                           during: str = "write", **values: Any) -> None:
    """A `teamdesk.tasks.lease.Fence` with the export's progress and result written by
    `task_id + run` only, the row count ignored; any other write is the product's."""
    if statement not in _LEASELESS or not isinstance(conn, psycopg.AsyncConnection):
        return await leased_update(conn, lease, statement, during=during, **values)
    params = {**values, "task_id": lease.task_id, "run": lease.run}
    result = await conn.execute(LAB_QUERIES[_LEASELESS[statement]], params)
    log.warning("counterexample.leaseless_write task_id=%s run=%s execution_id=%s "
                "during=%s rows=%s", lease.task_id, lease.run, lease.execution_id, during,
                result.rowcount)


#: name → the worker hook that switches it on (a listener of its own).
COUNTEREXAMPLES: dict[str, WorkerHook] = {"legacy-failed-listener": add_legacy_listener}
#: name → the fence it runs instead of the product's (`fence=` of the worker).
FENCES: dict[str, Fence] = {"lease-less-export": leaseless_export}
#: Every counterexample a worker process can be started with.
NAMES: tuple[str, ...] = (*COUNTEREXAMPLES, *FENCES)


def seams_for(name: str | None) -> Seams:
    """The worker process's seams that switch counterexample `name` on; the product's own
    parts for None."""
    if name is None:
        return PRODUCT
    if name not in NAMES:
        raise ValueError(f"unknown counterexample {name!r}; choose from {NAMES}")
    return Seams(on_worker=COUNTEREXAMPLES.get(name), fence=FENCES.get(name, leased_update))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in NAMES:
        print(f"usage: python -m labs.counterexample_worker {{{','.join(NAMES)}}} "
              "worker [teamdesk worker options]", file=sys.stderr)
        return 2
    from labs.worker_entry import run_worker

    return run_worker(argv[1:], seams_for(argv[0]),
                      prog=f"python -m labs.counterexample_worker {argv[0]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
