"""Every pytest run of this checkout (tests and notebooks) uses embedded servers of its own.

The suite restarts PostgreSQL, stops Redis and runs chaos for real. Run against the
checkout's `.teamdesk/` — the servers an open JupyterLab uses — it would restart them under
a learner's notebook. So, before anything resolves a URL, the run's data folder becomes a
sibling of the lab's: `.teamdesk-suite/` (or `$TEAMDESK_DATA_DIR-suite`), with its own
ports, passwords and watchdog. Run in parallel (pytest-xdist), each worker gets a server
set of its own, `.teamdesk-suite-gw0/`, `-gw1/` …: a worker's fault tests restart only
its own servers, and no worker's database or queue is another's. The notebooks' kernels
and every `teamdesk` subprocess of the run inherit the worker's folder.
`TEAMDESK_LAB_DATA_DIR` keeps the lab's folder, for the test that proves the lab is left
alone, and marks nested pytest runs (e.g. notebook 27's), which keep the suite's folder.

With DATABASE_URL and REDIS_URL set nothing is started; the tests that must break an
embedded server skip (they say so).
"""

from __future__ import annotations

import os
from pathlib import Path

from devkit import services


def _use_servers_of_our_own() -> None:
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    known = os.environ.get("TEAMDESK_LAB_DATA_DIR")
    if known and not worker:
        return  # a pytest run inside the suite (e.g. notebook 27): the suite's folder already
    # A worker (or a run nested in one, which inherits its name) finds the lab's folder
    # noted by the run that started it, and derives the same folder of its own again.
    lab = Path(known) if known else services.data_dir()
    os.environ["TEAMDESK_LAB_DATA_DIR"] = str(lab)
    os.environ["TEAMDESK_DATA_DIR"] = f"{lab}-suite" + (f"-{worker}" if worker else "")


_use_servers_of_our_own()


def pytest_xdist_make_scheduler(config, log):
    """Under `-n`, the suite's own units of work (`tests/parallel.py`)."""
    from tests.parallel import SuiteScheduling

    return SuiteScheduling(config, log)
