"""One meaning of an export filter (X1, P8, R4): the request's count and the executor's
export select the same tickets for the same filters — they run the same query
(`_export_tickets`) with the same parameters (`export_filters.filter_params`). Real
PostgreSQL, the demo team's 120 tickets."""

from __future__ import annotations

import csv
import io

import pytest

from teamdesk.db.models import Scope
from teamdesk.export_filters import validate_filters
from teamdesk.services import exports
from teamdesk.tasks.context import TaskContext
from teamdesk.tasks.ledger import Ledger
from teamdesk.tasks.processor import process_task
from teamdesk.testing import FakeJob

CASES = [
    ("ben", Scope.TEAM, {}),
    ("ben", Scope.TEAM, {"status": ["OPEN"]}),
    ("ben", Scope.TEAM, {"status": ["OPEN", "PENDING"], "priority": ["HIGH", "URGENT"]}),
    ("ben", Scope.TEAM, {"created_from": "2026-01-01", "created_to": "2026-01-31"}),
    ("ben", Scope.TEAM, {"created_to": "2025-12-31"}),
    ("ben", Scope.TEAM, {"text": "login"}),
    ("ben", Scope.TEAM, {"text": "100%_\\"}),  # LIKE's own characters, taken literally
    ("ben", Scope.TEAM, {"assignee_id": "cai"}),
    ("ben", Scope.TEAM, {"text": "   "}),  # blank text: no filter
    ("dan", Scope.OWN, {}),
    ("dan", Scope.OWN, {"priority": ["LOW"]}),
]


@pytest.mark.parametrize(("user", "scope", "raw"), CASES)
async def test_request_and_execution_select_the_same_tickets(settings, sessions, demo,
                                                             user, scope, raw):
    """X1, P8: for each filter, the tickets the request counted (its limit check), the
    tickets a preview lists and the tickets the executor exported are the same set."""
    filters = validate_filters(raw)
    async with sessions() as s:
        counted = await exports.count_matching(s, "acme", user, scope, filters)
        listed = [t.id for t in await exports.matching_tickets(s, "acme", user, scope,
                                                               filters, batch_size=7)]
    async with sessions() as s:
        task = await exports.request_export(s, "acme", user, raw, scope=scope)
    ctx = TaskContext(settings=settings.replace(export_batch_size=10), actor="A",
                      ledger=Ledger(settings.database_url))
    assert "exported" in await process_task(FakeJob(task.id), None, ctx)
    async with sessions() as s:
        exported = await exports.download_export(s, "acme", user, task.id)
    exported_ids = [int(row[0]) for row in list(csv.reader(io.StringIO(exported.csv)))[1:]]
    assert exported_ids == listed == sorted(listed)
    assert counted == len(listed)


async def test_the_cases_are_not_all_alike(sessions, demo):
    """The table above would prove nothing if every filter matched everything or nothing."""
    async with sessions() as s:
        counts = {await exports.count_matching(s, "acme", u, sc, validate_filters(f))
                  for u, sc, f in CASES}
    assert len(counts) >= 5 and 0 in counts and max(counts) == 120
