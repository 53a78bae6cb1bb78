"""Unit tests of pure pieces: settings, job ids, filters, probe names, CSV cells."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest

from teamdesk import probes
from teamdesk.config import Settings
from teamdesk.db.models import Priority, Ticket, TicketStatus
from teamdesk.errors import InvalidFilters
from teamdesk.services.exports import validate_filters
from teamdesk.tasks.exports import CSV_COLUMNS, neutralise, to_csv
from teamdesk.tasks.queue import DEFAULT_JOB_OPTIONS, MAX_TASK_ATTEMPTS, job_options, task_job_id


def test_task_job_id_is_id_dash_run():
    """I2: `T-0`, and a manual retry's `T-1`."""
    assert task_job_id("T", 0) == "T-0"
    assert task_job_id("TABCDE", 1) == "TABCDE-1"
    with pytest.raises(ValueError):
        task_job_id("", 0)
    with pytest.raises(ValueError):
        task_job_id("T", -1)


def test_default_job_options_are_the_books():
    """Q1: 3 attempts including the first, exponential 2000 ms, record retention."""
    assert MAX_TASK_ATTEMPTS == 3
    assert DEFAULT_JOB_OPTIONS == {
        "attempts": 3,
        "backoff": {"type": "exponential", "delay": 2000},
        "removeOnComplete": {"age": 86400, "count": 1000},
        "removeOnFail": {"age": 604800, "count": 1000},
    }
    assert job_options(Settings())["backoff"]["delay"] == 2000


def test_settings_env_overrides_and_production_defaults():
    """Q2: tests shorten timings through configuration; defaults stay the book's."""
    s = Settings.from_env({"TEAMDESK_LOCK_DURATION_MS": "1000", "TEAMDESK_BACKOFF_DELAY_MS": "30",
                           "REDIS_URL": "redis://x:1/0"})
    assert (s.lock_duration_ms, s.backoff_delay_ms, s.redis_url) == (1000, 30, "redis://x:1/0")
    d = Settings()
    assert (d.dispatch_tick_s, d.redispatch_age_s, d.stale_running_age_s, d.result_ttl_s,
            d.dispatch_batch_size) == (3.0, 30.0, 120.0, 86400.0, 100)
    with pytest.raises(ValueError, match="TEAMDESK_DISPATCH_TICK_S"):
        Settings.from_env({"TEAMDESK_DISPATCH_TICK_S": "soon"})


def test_filters_are_normalised():
    assert validate_filters({"status": ["OPEN", "CLOSED", "OPEN"], "text": "  login ",
                             "created_from": "2026-01-05"}) == {
        "status": ["CLOSED", "OPEN"], "text": "login", "created_from": "2026-01-05"}
    assert validate_filters(None) == {}
    with pytest.raises(InvalidFilters, match="unknown filter keys: colour"):
        validate_filters({"colour": 1})


async def test_unknown_probe_point_is_an_error():
    """A misspelt point would make a gate unreachable; it fails loudly instead."""
    seen = []

    async def handler(point, ctx):
        seen.append((point, ctx))

    with probes.installed(handler):
        await probes.announce("claim.after", task_id="T", run=0)
        with pytest.raises(ValueError, match="unknown probe point"):
            await probes.announce("claim.aftr", task_id="T", run=0)
    await probes.announce("claim.after", task_id="T", run=0)
    assert seen == [("claim.after", {"task_id": "T", "run": 0})]


#: X3's six formula starts, each with a payload a spreadsheet would run.
FORMULA_CELLS = ("=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\t=1+1", "\r=1+1")


@pytest.mark.parametrize("cell", FORMULA_CELLS, ids=["eq", "plus", "minus", "at", "tab", "cr"])
def test_every_formula_start_is_neutralised(cell):
    """X3: a cell starting with `=`, `+`, `-`, `@`, tab or CR gets one leading apostrophe,
    the rest kept as it was."""
    assert neutralise(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["", "plain", "a=b", "1-2", " =1", "'=1", "\n=1", "x\t=1"])
def test_other_cells_are_left_alone(cell):
    """X3 names six starts and no others: a formula sign later in the cell, a leading space
    or newline, or an apostrophe already there, change nothing."""
    assert neutralise(cell) == cell


@pytest.mark.parametrize("cell", [
    *FORMULA_CELLS,
], ids=["eq", "plus", "minus", "at", "tab", "cr"])
def test_to_csv_neutralises_the_prefix_and_parses_back(cell):
    """X3 through the whole CSV path: `to_csv` of a ticket titled with a formula start,
    parsed back by the csv module as a spreadsheet import would, gives one record whose
    title is the cell with one leading apostrophe (a tab or CR kept inside it), the other
    columns untouched, and the next ticket's record intact after it."""
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    tickets = [Ticket(id=i, title=title, status=TicketStatus.OPEN, priority=Priority.NORMAL,
                      creator_id="dan", assignee_id=None, due_at=None, created_at=created)
               for i, title in ((1, cell), (2, "plain"))]
    rows = list(csv.reader(io.StringIO(to_csv(tickets), newline="")))
    plain = ["OPEN", "NORMAL", "dan", "", "", created.isoformat()]
    assert rows == [list(CSV_COLUMNS), ["1", "'" + cell, *plain], ["2", "plain", *plain]]


def test_the_team_lock_key_is_stable_and_fits_a_bigint():
    """ch. 26 §5: the key must be the same in every process and on every machine (Python's
    own `hash` is salted per process), and a signed 64-bit integer for PostgreSQL."""
    from teamdesk.db.locks import team_lock_key, team_lock_key_parts

    assert team_lock_key("acme") == team_lock_key("acme") != team_lock_key("acme2")
    assert -(2 ** 63) <= team_lock_key("acme") < 2 ** 63
    hi, lo = team_lock_key_parts("acme")
    assert ((hi << 32) | lo) == team_lock_key("acme") & (2 ** 64 - 1)
