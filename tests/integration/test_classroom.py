"""A classroom: several learners' labs at the same time on one shared server set.

`docs/classroom.md` promises that N learners can share one PostgreSQL and one Redis,
because each lab works in a database cloned for it and under a BullMQ prefix of its own,
and breaks only a Redis of its own (23 §7, 90). Here two notebooks run at once, each in
its own kernel, with DATABASE_URL and REDIS_URL given (the suite's servers stand in for
the class's): each passes its own checkpoints, and afterwards the shared servers hold no
database and no key that any of them left. The connections each lab held at most are
measured and printed — the figure `docs/classroom.md` quotes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import redis

from teamdesk.config import Settings

ROOT = Path(__file__).resolve().parents[2]
#: Two labs that run workers, races and gates (not the ones with a private Redis only):
#: two at once show the sharing as well as three, at two thirds of the machine's load.
NOTEBOOKS = ("24-reminders.ipynb", "26b-takeover-race.ipynb")
#: What docs/classroom.md tells an instructor to allow per learner.
CONNECTIONS_PER_LEARNER = 10


def _lab_databases(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database "
                            "WHERE datname LIKE 'teamdesk\\_lab\\_%'").fetchall()
    return {r[0] for r in rows}


def _lab_prefixes(url: str) -> set[str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        return {k.split(":", 1)[0] for k in client.scan_iter(match="lab*", count=1000)}
    finally:
        client.close()


class _ConnectionWatch(threading.Thread):
    """Samples pg_stat_activity while the notebooks run: most connections per lab
    database seen at once. A measurement, not a synchronisation: nothing waits on it."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.peak: dict[str, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.done.wait(0.2):
                for db, n in conn.execute(
                        "SELECT datname, count(*) FROM pg_stat_activity "
                        "WHERE datname LIKE 'teamdesk\\_lab\\_%' GROUP BY datname"):
                    self.peak[db] = max(n, self.peak.get(db, 0))


def test_two_labs_at_once_on_one_shared_server_set(service_settings: Settings, tmp_path):
    """Two learners on one server set (URLs given, nothing started for them): their
    notebooks' checkpoints all pass while they run side by side, none leaves a database
    or a Redis key behind, and no lab holds more than CONNECTIONS_PER_LEARNER connections
    to PostgreSQL at once."""
    urls = {"DATABASE_URL": service_settings.database_url,
            "REDIS_URL": service_settings.redis_url}
    databases_before = _lab_databases(urls["DATABASE_URL"])
    prefixes_before = _lab_prefixes(urls["REDIS_URL"])
    watch = _ConnectionWatch(urls["DATABASE_URL"])
    watch.start()
    env = {**os.environ, **urls}
    jupyter = Path(sys.executable).with_name("jupyter")
    procs = {name: subprocess.Popen(
        [str(jupyter), "nbconvert", "--to", "notebook", "--execute",
         "--ExecutePreprocessor.timeout=120", "--output-dir", str(tmp_path),
         str(ROOT / "notebooks" / name)],
        env=env, cwd=ROOT / "notebooks", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True) for name in NOTEBOOKS}
    try:
        results = {name: (p.wait(300), p.stdout.read() if p.stdout else "")
                   for name, p in procs.items()}
    finally:
        watch.done.set()
        watch.join(5)
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for name, (code, output) in results.items():
        assert code == 0, f"{name} failed beside the others:\n{output[-3000:]}"
    print(f"\npeak PostgreSQL connections per lab: {sorted(watch.peak.values())}")
    assert len(watch.peak) >= len(NOTEBOOKS), "the labs did not run side by side"
    assert max(watch.peak.values()) <= CONNECTIONS_PER_LEARNER, watch.peak
    # Nothing of theirs is left (another lab of this server set may finish meanwhile).
    assert _lab_databases(urls["DATABASE_URL"]) <= databases_before
    assert _lab_prefixes(urls["REDIS_URL"]) <= prefixes_before
