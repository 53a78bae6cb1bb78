"""Scene helpers of `90-chaos.ipynb` (machinery out of the cells). The chaos
run itself is `labs.chaos`; these only judge the exercise and check the clean-up, so the
notebook's cells stay one line each.
"""

from __future__ import annotations

from typing import Any

import psutil
from sqlalchemy import select

from labs.chaos import FIXED_FAILED_TEXTS
from teamdesk.db.models import BackgroundTask, TaskStatus


async def raw_failures(world: Any) -> set[str]:
    """The ids of the world's FAILED tasks whose `last_error` is none of the fixed texts —
    the ledger's own word, read straight from `background_tasks` rather than from the
    checker's report, on which rows a lease-less `failed` listener overwrote with the raw
    error (W2, P8: a FAILED row carries a fixed, readable text)."""
    async with world.sessions() as s:
        failed = (await s.scalars(select(BackgroundTask).where(
            BackgroundTask.status == TaskStatus.FAILED))).all()
    return {t.id for t in failed if t.last_error not in FIXED_FAILED_TEXTS}


def worker_children() -> list[psutil.Process]:
    """The `teamdesk worker` processes this kernel started that are still running (a
    zombie is already dead and not counted): after a chaos run there must be none, or the
    run leaked a process that would go on writing to a dropped world."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "worker" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:  # it exited while we looked
            pass
    return found
