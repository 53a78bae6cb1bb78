"""A `teamdesk worker` process with a counterexample switched on — for one lab run only.

    python -m labs.counterexample_worker legacy-failed-listener worker --name w1 ...

The product is not changed: this entry point wraps the product's `create_task_worker` as
the worker process looks it up (`teamdesk.tasks.runner`), adds the counterexample, then
runs the ordinary `teamdesk` command line with the remaining arguments. Only processes
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
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from teamdesk.db.engine import create_engine, session_factory
from teamdesk.db.models import BackgroundTask, TaskStatus
from teamdesk.tasks import runner
from teamdesk.tasks.worker import is_exhausted

log = logging.getLogger("labs.counterexample")


def legacy_failed_listener(sessions: async_sessionmaker[AsyncSession]) -> Any:
    """The retired listener: on exhaustion, FAILED by task id + run (no lease, raw text)."""
    pending: set[asyncio.Future] = set()

    def on_failed(job: Any, err: BaseException) -> None:
        if not is_exhausted(job, err):
            return
        data = job.data if isinstance(job.data, dict) else {}

        async def write() -> None:
            async with sessions() as s, s.begin():
                result = await s.execute(update(BackgroundTask).where(
                    BackgroundTask.id == data.get("taskId"),
                    BackgroundTask.run == data.get("run"),
                    BackgroundTask.status != TaskStatus.COMPLETED,
                ).values(status=TaskStatus.FAILED, execution_id=None,
                         last_error=f"{type(err).__name__}: {err}"[:500]))
            log.warning("counterexample.legacy_failed_write task_id=%s run=%s rows=%s",
                        data.get("taskId"), data.get("run"), result.rowcount)

        fut = asyncio.ensure_future(write())
        pending.add(fut)
        fut.add_done_callback(pending.discard)

    return on_failed


def _with_legacy_listener(original: Any) -> Any:
    async def create(settings: Any, **kwargs: Any) -> Any:
        worker = await original(settings, **kwargs)
        sessions = session_factory(create_engine(settings.database_url))
        worker.worker.on("failed", legacy_failed_listener(sessions))
        log.warning("counterexample.installed legacy-failed-listener")
        return worker

    return create


COUNTEREXAMPLES = {"legacy-failed-listener": _with_legacy_listener}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COUNTEREXAMPLES:
        print(f"usage: python -m labs.counterexample_worker {{{','.join(COUNTEREXAMPLES)}}} "
              "worker [teamdesk worker options]", file=sys.stderr)
        return 2
    runner.create_task_worker = COUNTEREXAMPLES[argv[0]](runner.create_task_worker)
    from teamdesk.cli import main as teamdesk_main

    return teamdesk_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
