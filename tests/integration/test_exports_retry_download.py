"""Export requests, manual retry and download against real PostgreSQL (O1, R1–R4, X1, X2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, func, select, update

from teamdesk.config import Settings
from teamdesk.db.models import BackgroundTask, Member, Role, Scope, TaskStatus
from teamdesk.errors import (
    ExportExpired,
    ExportNotReady,
    ExportTooLarge,
    InvalidFilters,
    NotFound,
    NotRetryable,
    OwnerAccessLost,
    PermissionDenied,
)
from teamdesk.services import exports, tasks, teams


async def _task_count(sessions) -> int:
    async with sessions() as s:
        return await s.scalar(select(func.count()).select_from(BackgroundTask))


async def test_request_export_writes_waiting_run0_undispatched(sessions, demo):
    """O1, O2, O4, I1: the request writes one EXPORT row of `background_tasks` — the
    ledger is the outbox, there is no other table — WAITING, run 0, dispatched_at NULL."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"status": ["OPEN"]})
    async with sessions() as s:
        row = await s.get(BackgroundTask, task.id)
    assert (row.status, row.run, row.dispatched_at, row.scope) == (
        TaskStatus.WAITING, 0, None, Scope.TEAM)
    assert row.filters == {"status": ["OPEN"]}
    assert len(row.id) == 6 and row.id.startswith("T")


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (["status"], "filters must be an object, not list"),
        ({"colour": "red"}, "unknown filter keys: colour; allowed: assignee_id, created_from, "
                            "created_to, priority, status, text"),
        ({"status": "OPEN"}, "status must be a non-empty list of names"),
        ({"status": ["SOLVED"]}, "status 'SOLVED' is not one of OPEN, PENDING, CLOSED"),
        ({"priority": []}, "priority must be a non-empty list of names"),
        ({"created_from": 20260101}, "created_from must be an ISO date string like "
                                     "'2026-01-31'"),
        ({"created_from": "2026-13-01"}, "created_from '2026-13-01' is not an ISO date like "
                                         "'2026-01-31'"),
        ({"created_from": "2026-03-01", "created_to": "2026-02-01"},
         "created_from 2026-03-01 is after created_to 2026-02-01"),
        ({"text": "x" * 101}, "text is 101 characters; at most 100"),
        ({"assignee_id": 7}, "assignee_id must be a user id string"),
    ],
)
async def test_malformed_filters_are_refused_and_write_nothing(sessions, demo, filters,
                                                               message):
    """Bad input (X1, O1): a specific `InvalidFilters` whose one-line message names what is
    wrong with *this* input — the key, the value, what was expected — and no task row."""
    before = await _task_count(sessions)
    async with sessions() as s:
        with pytest.raises(InvalidFilters) as info:
            await exports.request_export(s, "acme", "ben", filters)
    assert str(info.value) == message
    assert await _task_count(sessions) == before


async def test_export_scope_and_limit(sessions, demo):
    """X1, R1: a customer may not export the team's tickets; over the limit is refused."""
    before = await _task_count(sessions)
    async with sessions() as s:
        with pytest.raises(PermissionDenied):
            await exports.request_export(s, "acme", "dan", {}, scope="TEAM")
    async with sessions() as s:
        with pytest.raises(ExportTooLarge, match="export limit is 10"):
            await exports.request_export(s, "acme", "ben", {},
                                         settings=Settings(export_limit=10))
    async with sessions() as s:
        with pytest.raises(PermissionDenied):
            await exports.request_export(s, "acme", "mallory", {})
    assert await _task_count(sessions) == before
    async with sessions() as s:
        own = await exports.request_export(s, "acme", "dan", {})
    assert own.scope is Scope.OWN


async def test_request_export_honours_the_configured_limit(sessions, demo, monkeypatch):
    """X1, R4: with `TEAMDESK_EXPORT_LIMIT=10` in the environment — what the worker
    enforces — a request over 10 tickets is refused up front, not accepted and then
    rejected by the executor; nothing is written."""
    monkeypatch.setenv("TEAMDESK_EXPORT_LIMIT", "10")
    before = await _task_count(sessions)
    async with sessions() as s:
        with pytest.raises(ExportTooLarge, match="export limit is 10"):
            await exports.request_export(s, "acme", "ben", {})
    assert await _task_count(sessions) == before


async def _fail(sessions, task_id: str) -> None:
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == task_id).values(
            status=TaskStatus.FAILED, attempts=3, progress=40, last_error="boom",
            execution_id=None, dispatched_at=datetime.now(UTC),
            result_summary="partial"))


async def test_retry_opens_next_run_and_keeps_identity(sessions, demo):
    """R2: run+1, WAITING, progress/attempts 0, cleared fields, run_at now; id, owner,
    filters and scope kept."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {"priority": ["HIGH"]})
    await _fail(sessions, task.id)
    async with sessions() as s:
        retried = await tasks.retry_task(s, "acme", "ben", task.id)
    async with sessions() as s:
        row = await s.get(BackgroundTask, task.id)
    assert retried.run == row.run == 1
    assert (row.status, row.progress, row.attempts) == (TaskStatus.WAITING, 0, 0)
    assert (row.last_error, row.execution_id, row.dispatched_at, row.result_csv,
            row.result_summary, row.expires_at) == (None,) * 6
    assert (row.owner_id, row.filters, row.scope) == ("ben", {"priority": ["HIGH"]}, Scope.TEAM)
    assert abs(row.run_at - datetime.now(UTC)) < timedelta(seconds=30)


async def test_retry_preconditions(sessions, demo):
    """R1: only FAILED; a customer cannot touch another member's task; another team's id is
    not found; a team-scope export whose creator was demoted is refused."""
    async with sessions() as s:
        team_task = await exports.request_export(s, "acme", "cai", {})
    async with sessions() as s:
        eve_task = await exports.request_export(s, "acme", "eve", {})
    async with sessions() as s:
        with pytest.raises(NotRetryable, match="only FAILED"):
            await tasks.retry_task(s, "acme", "cai", team_task.id)
    await _fail(sessions, team_task.id)
    await _fail(sessions, eve_task.id)
    async with sessions() as s:
        with pytest.raises(NotFound):
            await tasks.retry_task(s, "acme", "dan", eve_task.id)
    async with sessions() as s:
        await teams.create_team(s, "other", "Other")
        await teams.add_member(s, "other", "oz", "Oz", "admin")
    async with sessions() as s:
        with pytest.raises(NotFound):
            await tasks.retry_task(s, "other", "oz", eve_task.id)
    async with sessions() as s:
        await teams.change_role(s, "acme", "cai", "customer")
    async with sessions() as s:
        with pytest.raises(PermissionDenied, match="no longer staff"):
            await tasks.retry_task(s, "acme", "cai", team_task.id)
    async with sessions() as s:
        for task_id in (team_task.id, eve_task.id):
            row = await s.get(BackgroundTask, task_id)
            assert (row.status, row.run) == (TaskStatus.FAILED, 0)  # nothing written


@pytest.mark.parametrize("owner_change", ["demoted", "left"])
async def test_retry_refuses_team_export_whose_owner_lost_staff_whoever_asks(
        sessions, demo, owner_change):
    """R1, R4: the *owner's* role decides, not the caller's. An admin (ada) retrying the
    team-wide export of an agent (cai) who was demoted to customer, or left the team, is
    refused up front with `OwnerAccessLost` — not "Retry accepted" and a new run the
    executor rejects again (P8) — and nothing is written (the row stays FAILED, run 0)."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "cai", {})
    await _fail(sessions, task.id)
    async with sessions() as s, s.begin():
        cai = (Member.team_id == "acme", Member.user_id == "cai")
        if owner_change == "demoted":
            await s.execute(update(Member).where(*cai).values(role=Role.CUSTOMER))
        else:
            await s.execute(delete(Member).where(*cai))
    before = await _task_row(sessions, task.id)
    async with sessions() as s:
        with pytest.raises(OwnerAccessLost, match="owner 'cai' is no longer"):
            await tasks.retry_task(s, "acme", "ada", task.id)
    assert await _task_row(sessions, task.id) == before
    assert (before["status"], before["run"]) == (TaskStatus.FAILED, 0)


async def _task_row(sessions, task_id: str) -> dict:
    async with sessions() as s:
        row = await s.get(BackgroundTask, task_id)
        return {c.name: getattr(row, c.key) for c in BackgroundTask.__table__.columns}


async def _complete(sessions, task_id: str, expires_at: datetime) -> None:
    async with sessions() as s, s.begin():
        await s.execute(update(BackgroundTask).where(BackgroundTask.id == task_id).values(
            status=TaskStatus.COMPLETED, progress=100, result_csv="id,title\n1,x\n",
            result_summary="1 ticket", expires_at=expires_at))


async def test_download_checks_access_readiness_and_expiry(sessions, demo):
    """X2, D7: not ready before completion; only visible to the owner's scope; refused once
    expired even though the CSV is still stored (the purge has not run)."""
    async with sessions() as s:
        task = await exports.request_export(s, "acme", "dan", {})
    async with sessions() as s:
        with pytest.raises(ExportNotReady):
            await exports.download_export(s, "acme", "dan", task.id)
    expires = datetime.now(UTC) + timedelta(hours=24)
    await _complete(sessions, task.id, expires)
    async with sessions() as s:
        file = await exports.download_export(s, "acme", "dan", task.id)
    assert file.csv.startswith("id,title") and file.filename == f"tickets-{task.id}.csv"
    async with sessions() as s:
        admin_file = await exports.download_export(s, "acme", "ada", task.id)
    assert admin_file.csv == file.csv
    async with sessions() as s:
        with pytest.raises(NotFound):
            await exports.download_export(s, "acme", "eve", task.id)
    async with sessions() as s:
        with pytest.raises(ExportExpired):
            await exports.download_export(s, "acme", "dan", task.id,
                                          now=expires + timedelta(seconds=1))
        assert (await s.get(BackgroundTask, task.id)).result_csv is not None
