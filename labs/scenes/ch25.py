"""Scene helpers of `25-exports.ipynb` (chapter 25, inferred: exports).

A download that reports instead of raising, a read-only count for the exercise, a
snapshot of both records while an export is paused, and the exercise's judge. A learner
need not read them to follow the chapter; the scenes (the gates between batches, the
rejection, the demotion, the purge) stay in the cells.
"""

from __future__ import annotations

from typing import Any

from teamdesk.db.models import Scope
from teamdesk.errors import TeamDeskError
from teamdesk.services import exports
from teamdesk.services.exports import ExportFile


async def download(lab: Any, user: str, task: Any) -> ExportFile:
    """`download_export` as `user` (X2: access and expiry are checked at download time)."""
    async with lab.sessions() as s:
        return await exports.download_export(s, lab.team, user, task.id)


async def try_download(lab: Any, user: str, task: Any) -> str:
    """A download as one short line for a table: "ok: N rows", or the refusal's name
    (NotFound, PermissionDenied, ExportExpired, …)."""
    try:
        file = await download(lab, user, task)
    except TeamDeskError as err:
        return type(err).__name__
    return f"ok: {len(file.csv.splitlines()) - 1} rows"


async def matches(lab: Any, user: str, filters: Any) -> int | str:
    """How many team tickets `filters` match for `user` — the count `request_export` makes
    before it writes anything (X1) — read only; the service's refusal as text when the
    filters are invalid."""
    try:
        async with lab.sessions() as s:
            clean = exports.validate_filters(filters)
            return await exports.count_matching(s, lab.team, user, Scope.TEAM, clean)
    except TeamDeskError as err:
        return f"{type(err).__name__}: {err}"


async def snapshot(lab: Any, task: Any, moment: str, read: str) -> dict[str, Any]:
    """Both records of one export at a moment: its ledger status and progress beside the
    queue job's progress (P4: ledger first, then queue), plus the ledger's `updated_at`
    (D6: each batch moves it)."""
    row, job = await lab.task(task.id), await lab.job(task.id)
    return {"moment": moment, "read": read, "status": row.status.value,
            "ledger progress": row.progress, "queue progress": job.progress,
            "updated_at": row.updated_at}


def fits(filters: Any, matched: int | str | None, limit: int) -> bool | str:
    """The exercise's judge: `filters` keep `{"status": ["OPEN"]}` and match between 1 and
    `limit` tickets (`matched`, from `matches`), so `request_export` would accept them (X1;
    a new, narrower request, R4). A string says what is wrong."""
    if not isinstance(filters, dict) or filters.get("status") != ["OPEN"]:
        return "keep the status filter: {'status': ['OPEN'], …}"
    if isinstance(matched, str):
        return f"the service refuses these filters — {matched}"
    if matched is None:
        return "nothing counted yet"
    return 0 < matched <= limit or f"they match {matched} tickets; the aim is 1–{limit}"
