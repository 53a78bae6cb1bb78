"""pandas views of a lab: the ledger, the queue, and the two side by side with a verdict.

    await ledger(lab)            # background_tasks rows, oldest first
    await queue(lab)             # every job record under the lab's prefix
    await ledger_vs_queue(lab)   # one row per task (+ orphan jobs) with a `verdict`
    show(df)                     # for display: every missing value as `MISSING` ("–")
    await board(lab, cols, names=names, tasks=[...])   # ledger_vs_queue, shown, by name
    await row(lab, task_id)      # one whole ledger row as a dict ("nothing changed" checks)
    await reminder_effects(lab, ticket_id)   # (notifications, reminder_sent events, version)
    pad(text, width)             # text padded to `width` terminal columns (a Chinese
                                 # character takes two)

The column orders are fixed (`LEDGER_COLUMNS`, `QUEUE_COLUMNS`, `COMPARE_COLUMNS`) so a
notebook can assert on them. Ids are short: task ids are already short (`T7KQ2M`), job ids
are `<task>-<run>` (I2), and execution ids are cut to 8 characters. The frames keep pandas' missing
values (NA, None, NaT) for assertions; `show(df)` is the same table for people, with one
symbol (`MISSING`) for every kind of missing value. Every Redis call is
bounded by `settings.redis_timeout_s`: against a dead Redis, `queue()` and
`ledger_vs_queue()` raise within seconds, while `ledger()` still works.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd
from sqlalchemy import select

from devkit import i18n
from devkit.i18n import columns
from labs import statements
from labs.history import short
from labs.i18n import say
from teamdesk import testing
from teamdesk.db.models import BackgroundTask, TaskStatus
from teamdesk.tasks.queue import job_states, task_job_id

if TYPE_CHECKING:
    from labs.lab import Lab

T = TypeVar("T")

#: The one symbol every table shown in a notebook uses for a missing value (no job, no
#: lease, no ledger row): `show(df)` puts it in place of None / NaN / <NA> / NaT.
MISSING = "–"

LEDGER_COLUMNS: tuple[str, ...] = ("id", "type", "run", "status", "attempts", "progress",
                                   "execution", "dispatched_at", "updated_at", "last_error")
QUEUE_COLUMNS: tuple[str, ...] = ("job_id", "task_id", "run", "state", "attemptsMade",
                                  "progress", "failedReason")
COMPARE_COLUMNS: tuple[str, ...] = ("task_id", "type", "run", "status", "progress", "execution",
                                    "job_id", "state", "attemptsMade", "job_progress",
                                    "verdict")

#: Verdicts of `ledger_vs_queue` (see `verdict` for the exact rules).
IN_STEP = "in step"
NO_JOB = "no job"
QUEUE_BEHIND = "queue behind"
LEDGER_BEHIND = "ledger behind"
ORPHAN_JOB = "orphan job"
VERDICTS: tuple[str, ...] = (IN_STEP, NO_JOB, QUEUE_BEHIND, LEDGER_BEHIND, ORPHAN_JOB)

_ACTIVE_LEDGER = {TaskStatus.WAITING.value, TaskStatus.RUNNING.value}
_FINISHED_JOB = {"completed", "failed"}


def verdict(status: str | None, state: str | None) -> str:
    """How a ledger row and its queue job relate. `status` is the ledger status of the
    task's *current* run (None: no ledger row has this job id as its current job);
    `state` is the state of job `<task>-<run>` as `job.getState()` reports it (None: no
    job record). The rules, in order:

    1. **"orphan job"** — a job record exists but no ledger row's current run has this job
       id: a job of an older run (after a manual retry, R3), or of a task this ledger does
       not have. Harmless (P1 skips an old run), but nothing in the ledger accounts for it.
    2. **"queue behind"** — the ledger is WAITING or RUNNING and there is no job record
       (or a record in no list at all, state "unknown"): nothing will run the task until
       a dispatcher scan adds it (D4; a RUNNING row first needs the stale recovery, D6).
    3. **"no job"** — the ledger is COMPLETED or FAILED and the job record is gone
       (retention, removal or a Redis flush). Healthy: the ledger is the truth.
    4. **"ledger behind"** — the queue finished the job (completed or failed) while the
       ledger is still WAITING or RUNNING: reconciliation is pending (D4 re-adds a
       completed one or fails a failed one; a RUNNING row waits for D6 first).
    5. **"in step"** — everything else; nothing to reconcile: WAITING with a
       waiting/delayed/prioritized/waiting-children/paused/active job (queued or about to
       be claimed), RUNNING with an active job, or with a waiting/delayed one (a redelivery
       whose claim will take over the lease, P2); COMPLETED or FAILED with any job state
       (the terminal ledger is the truth, whatever the queue's record says, W2/W3; a
       queued delivery of a COMPLETED run is skipped by P1).
    """
    if status is None:
        return ORPHAN_JOB
    if status in _ACTIVE_LEDGER:
        if state is None or state == "unknown":
            return QUEUE_BEHIND
        if state in _FINISHED_JOB:
            return LEDGER_BEHIND
        return IN_STEP
    if state is None:
        return NO_JOB
    return IN_STEP


async def _bounded(lab: Lab, call: Awaitable[T], what: str) -> T:
    timeout = lab.settings.redis_timeout_s
    try:
        return await asyncio.wait_for(call, timeout)
    except TimeoutError:
        raise TimeoutError(f"Redis did not answer {what} within {timeout:g} s") from None


async def _ledger_rows(lab: Lab) -> list[dict[str, Any]]:
    async with lab.sessions() as session:
        tasks = (await session.scalars(select(BackgroundTask).order_by(
            BackgroundTask.created_at, BackgroundTask.id))).all()
    return [{
        "id": t.id, "type": t.type.value, "run": t.run, "status": t.status.value,
        "attempts": t.attempts, "progress": t.progress, "execution": short(t.execution_id),
        "dispatched_at": t.dispatched_at, "updated_at": t.updated_at,
        "last_error": t.last_error,
    } for t in tasks]


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...],
           ints: tuple[str, ...] = (), times: tuple[str, ...] = ()) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(columns))
    for c in ints:
        # From the rows, not the frame: one None makes pandas store the column as floats.
        df[c] = pd.array([r.get(c) if isinstance(r.get(c), int) and not isinstance(
            r.get(c), bool) else None for r in rows], dtype="Int64")
    for c in times:
        df[c] = pd.to_datetime(df[c], utc=True)
    return df


async def ledger(lab: Lab) -> pd.DataFrame:
    """The lab's `background_tasks` rows, oldest first: `LEDGER_COLUMNS` = id, type, run,
    status, attempts, progress, execution (8 characters of the lease, '' when none),
    dispatched_at, updated_at (UTC timestamps), last_error. Needs only PostgreSQL."""
    return _frame(await _ledger_rows(lab), LEDGER_COLUMNS,
                  ints=("run", "attempts", "progress"), times=("dispatched_at", "updated_at"))


def _job_row(job: Any, state: str) -> dict[str, Any]:
    data = job.data if isinstance(job.data, dict) else {}
    return {"job_id": job.id, "task_id": data.get("taskId"), "run": data.get("run"),
            "state": state, "attemptsMade": job.attemptsMade, "progress": job.progress,
            "failedReason": job.failedReason or None, "_ts": job.timestamp or 0}


async def _jobs(lab: Lab) -> dict[str, tuple[Any, str | None]]:
    """Every job record in the queue's lists, with its state: one `getJobs` and one
    round trip for all the states (`queue.job_states`)."""
    jobs = await _bounded(lab, lab.queue.getJobs([]), "getJobs")
    states = await _bounded(lab, job_states(lab.queue, [j.id for j in jobs]), "job_states")
    return {j.id: (j, state) for j, state in zip(jobs, states, strict=True)}


def _queue_rows(jobs: dict[str, tuple[Any, str | None]]) -> list[dict[str, Any]]:
    rows = [_job_row(job, state) for job, state in jobs.values()]
    rows.sort(key=lambda r: (r["_ts"], str(r["job_id"])))
    return rows


async def queue(lab: Lab) -> pd.DataFrame:
    """Every job record of the lab's queue (bullmq `queue.getJobs` over all lists, their
    states in one round trip), oldest first: `QUEUE_COLUMNS` = job_id, task_id and run
    (from the job's data), state, attemptsMade, progress, failedReason."""
    rows = _queue_rows(await _jobs(lab))
    return _frame(rows, QUEUE_COLUMNS, ints=("run", "attemptsMade", "progress"))


async def ledger_vs_queue(lab: Lab) -> pd.DataFrame:
    """The ledger and the queue side by side, one row per task (its current run's job
    `<task>-<run>`, its state read as the dispatcher reads it: `queue.job_states`),
    then one row per orphan job, with a `verdict` column (rules: `verdict`).

    Columns (`COMPARE_COLUMNS`): task_id, type, run, status, progress, execution (ledger
    side), job_id, state, attemptsMade, job_progress (queue side; missing = <NA>/None),
    verdict. Orphan rows take task_id and run from the job's data and have no ledger
    fields."""
    led = await _ledger_rows(lab)
    jobs = await _jobs(lab)
    ids = [task_job_id(t["id"], t["run"]) for t in led]
    states = await _bounded(lab, job_states(lab.queue, ids), "job_states")
    rows: list[dict[str, Any]] = []
    for t, job_id, state in zip(led, ids, states, strict=True):
        job = jobs[job_id][0] if job_id in jobs else None
        if job is None and state is not None:  # a record in no list ("unknown"): rare
            job = await _bounded(lab, lab.queue.getJob(job_id), f"getJob({job_id})")
        rows.append({
            "task_id": t["id"], "type": t["type"], "run": t["run"], "status": t["status"],
            "progress": t["progress"], "execution": t["execution"], "job_id": job_id,
            "state": state, "attemptsMade": job.attemptsMade if job else None,
            "job_progress": job.progress if job else None,
            "verdict": verdict(t["status"], state),
        })
    current = set(ids)
    for j in _queue_rows(jobs):
        if j["job_id"] in current:
            continue
        rows.append({
            "task_id": j["task_id"], "type": None, "run": j["run"], "status": None,
            "progress": None, "execution": None, "job_id": j["job_id"], "state": j["state"],
            "attemptsMade": j["attemptsMade"], "job_progress": j["progress"],
            "verdict": verdict(None, j["state"]),
        })
    return _frame(rows, COMPARE_COLUMNS,
                  ints=("run", "progress", "attemptsMade", "job_progress"))


def pad(text: Any, width: int) -> str:
    """`text` left-aligned in `width` terminal columns, as `f"{text:<{width}}"` does for
    ASCII, so a printed table lines up in both editions (`devkit.i18n.columns`)."""
    return str(text) + " " * max(width - columns(text), 0)


def headers(lang: str | None = None) -> dict[str, str]:
    """The column headers in the edition's words, or `lang`'s (display only: the values
    stay English, so a check cell is the same code in both editions). Statuses, states and
    ids are the product's identifiers and stay as they are."""
    return {
        "task_id": say("tables.column.task_id", "task_id", lang=lang),
        "task": say("tables.column.task", "task", lang=lang),
        "type": say("tables.column.type", "type", lang=lang),
        "run": say("tables.column.run", "run", lang=lang),
        "status": say("tables.column.status", "status", lang=lang),
        "progress": say("tables.column.progress", "progress", lang=lang),
        "execution": say("tables.column.execution", "execution", lang=lang),
        "job_id": say("tables.column.job_id", "job_id", lang=lang),
        "state": say("tables.column.state", "state", lang=lang),
        "job_progress": say("tables.column.job_progress", "job_progress", lang=lang),
        "verdict": say("tables.column.verdict", "verdict", lang=lang),
        "dispatched_at": say("tables.column.dispatched_at", "dispatched_at", lang=lang),
        "updated_at": say("tables.column.updated_at", "updated_at", lang=lang),
        "last_error": say("tables.column.last_error", "last_error", lang=lang),
        "attempts": say("tables.column.attempts", "attempts", lang=lang),
        "attemptsMade": say("tables.column.attemptsMade", "attemptsMade", lang=lang),
        "ledger_attempts": say("tables.column.ledger_attempts", "ledger_attempts", lang=lang),
        "id": say("tables.column.id", "id", lang=lang),
        # the chaos checker's invariant table (`labs.chaos.report.ChaosReport.invariant_table`)
        "invariant": say("tables.column.invariant", "invariant", lang=lang),
        "rules": say("tables.column.rules", "rules", lang=lang),
        "violations": say("tables.column.violations", "violations", lang=lang),
        "example": say("tables.column.example", "example", lang=lang),
    }


def verdict_words(lang: str | None = None) -> dict[str, str]:
    """The verdicts, and `dispatched_at`'s "set", in the edition's words or `lang`'s."""
    return {IN_STEP: say("tables.verdict.in-step", "in step", lang=lang),
            NO_JOB: say("tables.verdict.no-job", "no job", lang=lang),
            QUEUE_BEHIND: say("tables.verdict.queue-behind", "queue behind", lang=lang),
            LEDGER_BEHIND: say("tables.verdict.ledger-behind", "ledger behind", lang=lang),
            ORPHAN_JOB: say("tables.verdict.orphan-job", "orphan job", lang=lang),
            "set": say("tables.verdict.set", "set", lang=lang)}


class Shown(pd.DataFrame):
    """A frame for people (`show`): the same data, rendered in the edition's language
    (`devkit.i18n`): in the Chinese edition the headers and verdicts are Chinese."""

    @property
    def _constructor(self) -> type[Shown]:
        return Shown

    def translated(self) -> pd.DataFrame:
        """A plain frame as the reader sees it (the English edition's: the frame itself)."""
        plain = pd.DataFrame(self)
        if i18n.lang() == i18n.SOURCE_LANG:
            return plain
        out, words = plain.copy(), verdict_words()
        for column in ("verdict", "dispatched_at"):
            if column in out.columns and out[column].ndim == 1:
                out[column] = [words.get(v, v) if isinstance(v, str) else v
                               for v in out[column]]
        named = headers()
        # Every level's name (pd.concat with keys makes two levels, the first unnamed).
        return out.rename(columns=named).rename_axis([named.get(n, n) for n in out.index.names])

    def _repr_html_(self) -> str | None:
        return self.translated()._repr_html_()

    def __repr__(self) -> str:
        return repr(self.translated())


def show(df: pd.DataFrame) -> pd.DataFrame:
    """`df` for display: every missing value (None, NaN, <NA>, NaT, '') becomes `MISSING`,
    so a notebook's tables all say "missing" the same way, rendered in the edition's
    language (`Shown`). The frame is a copy with object columns; assert on the original
    frame, not on this one."""
    out = df.astype(object)
    return Shown(out.where(~(out.isna() | (out == "")), MISSING))


async def board(lab: Lab, columns: list[str], *, names: Any = None,
                tasks: list[Any] | None = None) -> pd.DataFrame:
    """`ledger_vs_queue` for display (`show`), in `columns` (any of `COMPARE_COLUMNS`, plus
    "task" and "dispatched_at"). With `names` (`labs.names.Names`) the execution column
    shows lease names (E1, E2, …) and "task" the task's name. With `tasks` (tasks or task
    ids) only those rows, in that order. "dispatched_at" says "set" or missing (D2)."""
    df = await ledger_vs_queue(lab)
    if tasks is not None:
        ids = [getattr(t, "id", t) for t in tasks]
        df = df[df["task_id"].isin(ids)].set_index("task_id").loc[
            [i for i in ids if i in set(df["task_id"])]].reset_index()
    if names is not None:
        df["execution"] = [names.lease_of(e) for e in df["execution"]]
        df["task"] = [names.of(t) for t in df["task_id"]]
    if "dispatched_at" in columns:
        led = await ledger(lab)
        marked = dict(zip(led["id"], led["dispatched_at"].notna(), strict=True))
        df["dispatched_at"] = ["set" if marked.get(t) else None for t in df["task_id"]]
    return show(df[columns])


async def row(lab: Lab, task_id: str) -> dict[str, Any]:
    """The whole ledger row of one task (`teamdesk.testing.task_row`): compare two of them
    to prove that *nothing at all* changed (P3)."""
    return await testing.task_row(lab.sessions, task_id)


async def idle_s(lab: Lab, task_id: str) -> float:
    """How long the task's `updated_at` has not moved, in seconds — in the database's
    clock, the one D6's 120 s threshold is measured in."""
    async with lab.sessions() as s:
        return float((await statements.run(s, "idle_seconds", {"id": task_id})).scalar_one())


async def reminder_effects(lab: Lab, ticket_id: int) -> tuple[int, int, int]:
    """A reminder's three effects on one ticket (`teamdesk.testing.reminder_effects`):
    notifications, `reminder_sent` events, the ticket's version — P10 moves all three
    together, exactly once."""
    return await testing.reminder_effects(lab.sessions, ticket_id)
