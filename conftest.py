"""Every pytest run of this checkout (tests and notebooks) uses embedded servers of its own.

The suite restarts PostgreSQL, stops Redis and runs chaos for real. Run against the
checkout's `.teamdesk/` — the servers an open JupyterLab uses — it would restart them under
a learner's notebook. So, before anything resolves a URL, the run's data folder becomes a
sibling of the lab's: `.teamdesk-suite/` (or `$TEAMDESK_DATA_DIR-suite`), with its own
ports, passwords and watchdog. The notebooks' kernels and every `teamdesk` subprocess of
the run inherit it. `TEAMDESK_LAB_DATA_DIR` keeps the lab's folder, for the test that
proves the lab is left alone, and marks nested pytest runs, which keep the suite's folder.

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
    if os.environ.get("TEAMDESK_LAB_DATA_DIR"):
        return  # a pytest run inside the suite (e.g. notebook 27): the suite's folder already
    lab = services.data_dir()
    os.environ["TEAMDESK_LAB_DATA_DIR"] = str(lab)
    os.environ["TEAMDESK_DATA_DIR"] = str(Path(f"{lab}-suite"))


_use_servers_of_our_own()
