"""Scene helpers of `25-exports.ipynb` (chapter 25, inferred: exports).

A download that reports instead of raising, a read-only count, a snapshot of both records
while an export is paused, the task row an older release's request would have written
(for the invalid-filter scene, P8), and the exercise's judge (`25.narrowed`,
`labs.exercises`): the learner's narrower filters run as a real export (request,
dispatcher, worker, download) and are judged by the rows it saved (X1, R4). A learner
need not read them to follow the chapter; the scenes (the gates between batches, the
rejections, the retry, the demotion, the purge) stay in the cells.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

from labs.exercises import Verdict, exercise, failed, passed
from labs.i18n import say
from labs.worlds import world_context
from teamdesk.db.models import BackgroundTask, Scope, TaskStatus
from teamdesk.errors import TeamDeskError
from teamdesk.services import exports
from teamdesk.services.exports import ExportFile
from teamdesk.tasks.outbox import new_export_task
from teamdesk.tasks.queue import task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab

T = 8.0  # seconds: the bound on every wait of the judge


async def download(lab: Lab, user: str, task: Any) -> ExportFile:
    """`download_export` as `user` (X2: access and expiry are checked at download time)."""
    async with lab.sessions() as s:
        return await exports.download_export(s, lab.team, user, task.id)


async def try_download(lab: Lab, user: str, task: Any) -> str:
    """A download as one short line for a table: "ok: N rows", or the refusal's name
    (NotFound, PermissionDenied, ExportExpired, …)."""
    try:
        file = await download(lab, user, task)
    except TeamDeskError as err:
        return type(err).__name__
    return f"ok: {len(file.csv.splitlines()) - 1} rows"


async def snapshot(lab: Lab, task: Any, moment: str, read: str) -> dict[str, Any]:
    """Both records of one export at a moment: its ledger status and progress beside the
    queue job's progress (P4: ledger first, then queue), plus the ledger's `updated_at`
    (D6: each batch moves it)."""
    row, job = await lab.task(task.id), await lab.job(task.id)
    return {"moment": moment, "read": read, "status": row.status.value,
            "ledger progress": row.progress, "queue progress": job.progress,
            "updated_at": row.updated_at}


async def legacy_export(lab: Lab, filters: dict[str, Any], *, user: str = "ben"
                        ) -> BackgroundTask:
    """An EXPORT task whose stored `filters` are taken as given — the row an older
    release's request could have written before a filter value was retired. It goes
    through the outbox's own `new_export_task` (WAITING, run 0, not dispatched, O1); only
    today's request checks filters first (`request_export`), so this is how a task whose
    filters no longer validate reaches a worker, where it is a permanent rejection (P8)."""
    async with lab.sessions() as s, s.begin():
        task = await new_export_task(s, team_id=lab.team, owner_id=user, scope=Scope.TEAM,
                                     filters=filters)
        task_id = task.id
    return await lab.task(task_id)


# ---------------------------------------------------------------- the exercise: narrower

#: What Ben asked for in §4, kept by every retry (R4): the exercise narrows it.
WISH = {"text": "Webhook"}


async def _webhook_world(lab: Lab) -> dict[str, Any]:
    """The exercise's context outside the notebook: a lab with notebook 25's export limit
    (30) whose Webhook tickets grew past it, as §4 made them (31), `lab=`."""
    for i in range(3):
        await lab.create_ticket(f"Webhook retries pile up ({i + 1})", actor="eve")
    return {"lab": lab}


@exercise("25.narrowed", answer="my_filters", solution="solution_filters",
          context=world_context("25-narrowed-judge", _webhook_world, export_limit=30),
          wrong={"an invalid status": {"text": "Webhook", "status": ["ARCHIVED"]},
                 "a filter that matches nothing": {"text": "Webhook",
                                                   "created_to": "2000-01-01"},
                 "dropping Ben's wish": {"status": ["OPEN"]}})
async def judge_narrowed(filters: Any, *, lab: Lab, user: str = "ben") -> Verdict:
    """Request `filters` as a new export (X1: validated and counted first), dispatch it,
    let the lab's worker W run it, download it and read the rows: it holds when it
    COMPLETED with 1 to `export_limit` rows, every title about Webhook, exactly the tickets
    the filters match (a new, narrower task, R4). Else what went wrong, from the real
    system."""
    if not isinstance(filters, dict) or filters.get("text") != WISH["text"]:
        return failed(say("ch25.narrow.keep-wish", "keep Ben's wish, {{'text': 'Webhook', …}}, and "
                          "narrow it with more filters"))
    try:
        task = await lab.request_export(filters, user=user)
    except TeamDeskError as err:
        return failed(say("ch25.narrow.refused", "the request was refused and wrote "
                          "nothing — {error_type}: {err}", error_type=type(err).__name__, err=err),
                      refused=type(err).__name__)
    if "W" not in lab.workers:
        await lab.start_worker("W", export_batch_size=10)
    await lab.dispatch()
    await lab.done_with(task_job_id(task.id, 0), T)  # completed, or a late rejection
    row = await lab.task(task.id)
    facts = {"task_id": task.id, "status": row.status.value}
    if row.status is not TaskStatus.COMPLETED:
        return failed(say("ch25.narrow.export-failed", "accepted, but the export ended {status}: "
                          "{last_error}", status=row.status.value, last_error=row.last_error),
                      **facts)
    saved = list(csv.DictReader(io.StringIO((await download(lab, user, task)).csv)))
    async with lab.sessions() as s:
        meant = await exports.matching_tickets(s, lab.team, user, task.scope,
                                               exports.validate_filters(filters))
    limit = lab.settings.export_limit
    facts |= {"rows": len(saved), "limit": limit}
    if not saved:
        return failed(say("ch25.narrow.empty", "it ran, but saved 0 rows: narrow the export, do "
                          "not empty it"), **facts)
    if [int(r["id"]) for r in saved] != [t.id for t in meant] or not all(
            WISH["text"].lower() in r["title"].lower() for r in saved):
        return failed(say("ch25.narrow.wrong-rows",
                          "the saved rows are not the tickets your filters "
                          "match"), **facts)
    return passed(say("ch25.narrow.holds", "a new, narrower task: COMPLETED, {rows} rows "
                      "(limit {limit}), every one about Webhook — {result_summary} (X1, R4)",
                      rows=len(saved), limit=limit, result_summary=row.result_summary), **facts)
