"""A `teamdesk worker` process with a counterexample switched on — for one lab run only.

    python -m labs.counterexample_worker legacy-failed-listener worker --name w1 ...

The product is not changed, and none of its names is rebound: this entry point runs the
ordinary `teamdesk` command line with the remaining arguments and passes it a worker hook
(`teamdesk.cli.main(argv, on_worker=...)` → `run_worker_process`, W1's worker), which adds
the counterexample to the process's task worker before it takes a job. Only processes
started this way (by `labs.chaos` with `ChaosConfig(counterexample=...)`) carry it.

`legacy-failed-listener` — the old `failed` callback that ch. 26 §7 retired (contract W2):
when the queue gives up on a job it sets the task FAILED by `task_id + run`, with the
error's own text, and no lease. The event carries no `execution_id`, so this write can
overwrite a rejection's fixed text (P8), or fail a task that a newer executor now owns
(W3). `tests/integration/test_worker_recovery.py` shows the second in a gated race.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.worker import TaskWorker, is_exhausted

log = logging.getLogger("labs.counterexample")

# The retired write: by task id + run, no lease, the error's own text.
_LEGACY_FAILED = ("UPDATE background_tasks SET status = 'FAILED', execution_id = NULL, "
                  "last_error = %(last_error)s "
                  "WHERE id = %(task_id)s AND run = %(run)s AND status <> 'COMPLETED'")


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
                result = await conn.execute(_LEGACY_FAILED, values)
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


#: name → the worker hook that switches it on.
COUNTEREXAMPLES = {"legacy-failed-listener": add_legacy_listener}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COUNTEREXAMPLES:
        print(f"usage: python -m labs.counterexample_worker {{{','.join(COUNTEREXAMPLES)}}} "
              "worker [teamdesk worker options]", file=sys.stderr)
        return 2
    from teamdesk.cli import main as teamdesk_main

    return teamdesk_main(argv[1:], on_worker=COUNTEREXAMPLES[argv[0]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
