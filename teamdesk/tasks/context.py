"""`TaskContext`: what an executor receives for one task run (W1, P3).

`create_task_worker` builds one per worker and `process_task` hands it to the executor the
registry names (`teamdesk.tasks.processor.EXECUTORS`); executors only read it. It lives in
a module of its own so that an executor needs neither the worker nor the processor to name
its type (procrastinate's `job_context.py` has the same shape).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from teamdesk.config import Settings
from teamdesk.tasks.lease import Fence, Lease, leased_update
from teamdesk.tasks.ledger import Ledger


@dataclass(frozen=True)
class TaskContext:
    """One worker's settings, ledger, actor label and fence, shared by all its runs."""

    #: Timings and limits (Q2): executors read `export_limit`, `export_batch_size`,
    #: `result_ttl_s`; `database_url` is where a ledger made here connects.
    settings: Settings
    #: A label such as "A" or a worker name; shows in probe contexts and log lines.
    actor: str | None = None
    #: Where the task path gets its connection (one per run); `create_task_worker` passes
    #: its pool. None given: one fresh connection per run to `settings.database_url`
    #: (tests, labs) — filled in at construction, so it is never None afterwards.
    ledger: Ledger | None = None
    #: The function every fenced write goes through (P3): `lease.leased_update`. A lab may
    #: pass an old fence of its own here to show what the lease prevents.
    fence: Fence = leased_update
    #: Why a REMINDER no longer applies (M1), or None to send it: `(task, ticket) -> str |
    #: None`, the ticket None when its row is gone. None here means the product's
    #: `reminders.stale_reason`. A lab may pass a learner's condition (ch. 24's exercise);
    #: the executor still does everything else — team lock, effects, the fenced completion
    #: (P10) — exactly as always.
    stale_check: Callable[[Any, Any], str | None] | None = None

    def __post_init__(self) -> None:
        if self.ledger is None:
            # Connecting is deferred to the first run: a Ledger without a pool is only a URL.
            object.__setattr__(self, "ledger", Ledger(self.settings.database_url or ""))


#: An executor: runs one claimed run of a task on the run's connection, every write through
#: `ctx.fence` (P3), and returns the outcome text (the queue job's result). Arguments:
#: context, connection, queue job, lease, the claimed row.
Executor = Callable[[TaskContext, psycopg.AsyncConnection, Any, Lease, Any], Awaitable[str]]
