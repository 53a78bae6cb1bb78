"""`TaskWorker`'s run hook (`create_task_worker(on_run_error=...)`): a crash of the worker's
run loop is reported when it happens. The bullmq worker is a small stand-in here (its run
loop raising is what is under test, not bullmq); the real worker is used in
tests/labs/test_seams.py."""

from __future__ import annotations

import asyncio

import pytest

from teamdesk.config import Settings
from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.worker import TaskWorker


class _CrashingRun:
    """Stands in for a bullmq `Worker` whose fetch loop ends with an error."""

    closing = False

    async def run(self) -> None:
        raise ConnectionError("fetch loop lost its connection")


def _ctx() -> TaskContext:
    return TaskContext(settings=Settings(database_url="postgresql://u@127.0.0.1:1/none"),
                       actor="W")


async def test_a_crashed_run_loop_is_reported_to_the_hook_at_once():
    seen: list[tuple[TaskWorker, Exception, bool]] = []
    worker = TaskWorker(_CrashingRun(), _ctx(),  # type: ignore[arg-type]
                        on_run_error=lambda w, err: seen.append((w, err, w.closing)))
    worker.start()
    await asyncio.wait_for(worker._run_task, 5)  # the hook took the error: the task is fine
    [(who, err, closing)] = seen
    assert who is worker and isinstance(err, ConnectionError) and closing is False


async def test_without_a_hook_the_error_stays_in_the_run_task():
    worker = TaskWorker(_CrashingRun(), _ctx())  # type: ignore[arg-type]
    worker.start()
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(worker._run_task, 5)
