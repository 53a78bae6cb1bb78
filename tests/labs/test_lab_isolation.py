"""An open lab keeps its servers while the suite breaks servers of its own (S1, S3).

The suite restarts PostgreSQL and stops Redis for real (`test_hot_path`,
`test_dispatch_redis_faults`, chaos). The root `conftest.py` gives the run a data folder of its own
(`.teamdesk-suite/`), so those faults strike the suite's servers, never the ones a
JupyterLab open in the same checkout uses (`.teamdesk/`). Here a stand-in for that open
lab holds a connection to the lab's servers while the suite's own faults run, and the
connection must come through untouched.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from devkit import services
from labs import faults
from teamdesk.config import Settings

LAB_DATA_DIR = os.environ.get("TEAMDESK_LAB_DATA_DIR")

pytestmark = pytest.mark.skipif(
    not LAB_DATA_DIR,
    reason="DATABASE_URL and REDIS_URL are set: the suite runs on those servers and "
           "breaks no embedded one")

#: An open lab, as far as its servers can tell: a process that owns the lab's embedded
#: services (as `teamdesk lab` does) until its stdin closes.
_OPEN_LAB = """
import json, sys
from devkit import services
urls = services.ensure_services()
print(json.dumps({"database_url": urls.database_url, "redis_url": urls.redis_url}), flush=True)
sys.stdin.read()
"""


@pytest.fixture
def open_lab() -> Iterator[dict[str, str]]:
    env = {**os.environ, "TEAMDESK_DATA_DIR": str(LAB_DATA_DIR)}
    proc = subprocess.Popen([sys.executable, "-c", _OPEN_LAB], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"the lab stand-in did not start its services (exit {proc.wait(30)})"
        yield json.loads(line)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(30)


def test_the_suite_runs_on_servers_of_its_own(service_settings: Settings):
    """The run's data folder, ports and passwords are not the lab's."""
    lab = Path(str(LAB_DATA_DIR)).resolve()
    assert services.data_dir() != lab
    assert not services.data_dir().is_relative_to(lab)
    lab_state = lab / "services.json"
    if lab_state.exists():
        ports = json.loads(lab_state.read_text())
        assert f":{ports.get('pg_port')}/" not in service_settings.database_url
        assert f":{ports.get('redis_port')}/" not in service_settings.redis_url


def _postmaster_started(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        return str(conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0])


async def test_an_open_lab_keeps_its_servers_through_the_suites_faults(
        open_lab: dict[str, str], service_settings: Settings):
    """S1: while the suite restarts its PostgreSQL (as `test_hot_path` does), stops and
    starts its Redis (as `test_dispatch_redis_faults` does) and runs a Redis outage of `labs.faults`
    on it, an open lab's connections to its own servers stay up: the same PostgreSQL
    backend, the same Redis server (run id), its keys still there. The suite's servers
    really went down meanwhile — so this would fail if they were the lab's."""
    pg = psycopg.connect(open_lab["database_url"], autocommit=True)
    rd = redis.Redis.from_url(open_lab["redis_url"], decode_responses=True)
    key = f"labcheck{uuid.uuid4().hex[:8]}:learner"
    try:
        backend = pg.execute("SELECT pg_backend_pid()").fetchone()[0]
        run_id = rd.info("server")["run_id"]
        rd.set(key, "still here")
        suite_pg_before = _postmaster_started(service_settings.database_url)
        suite_redis = redis.Redis.from_url(service_settings.redis_url)
        suite_run_id = suite_redis.info("server")["run_id"]

        await asyncio.to_thread(services.restart_postgres)
        await asyncio.to_thread(services.stop_redis)
        await asyncio.to_thread(services.start_redis)
        async with faults.redis_outage(service_settings):
            assert rd.get(key) == "still here"

        assert _postmaster_started(service_settings.database_url) != suite_pg_before
        assert suite_redis.info("server")["run_id"] != suite_run_id, "suite's Redis: no restart"
        suite_redis.close()
        assert pg.execute("SELECT pg_backend_pid()").fetchone()[0] == backend
        assert rd.info("server")["run_id"] == run_id
        assert rd.get(key) == "still here"
    finally:
        rd.delete(key)
        rd.close()
        pg.close()
