"""The `teamdesk` command against real services: the live demo and the tasks table."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(settings, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": settings.database_url, "REDIS_URL": settings.redis_url,
           "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix}
    return subprocess.run([sys.executable, "-m", "teamdesk.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_demo_race_narrates_the_takeover(settings):
    """P3, P6, P12 live: A paused, B takes over after a real stall, A's write matches 0
    rows, B's CSV is saved; the demo cleans up its own world."""
    out = _run(settings, "demo", "race")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for step in ("[1]", "[2]", "[3]", "[4]", "[5]", "[6]"):
        assert step in text
    assert "0 rows matched → LeaseLost" in text and "task.lease_lost" in text
    assert "verdict: A's write matched 0 rows; B's CSV saved" in text
    assert text.count("COMPLETED") == 1


async def test_tasks_table_shows_ledger_and_queue(settings, sessions, demo, queue):
    """`teamdesk tasks`: ledger columns next to the queue state of the current job."""
    from teamdesk.services import exports
    from teamdesk.tasks.dispatcher import dispatch_tasks

    async with sessions() as s:
        task = await exports.request_export(s, "acme", "ben", {})
    await dispatch_tasks(sessions, queue, settings)
    out = _run(settings, "tasks")
    assert out.returncode == 0, out.stderr
    header, line = out.stdout.splitlines()[:2]
    assert header.split()[:4] == ["id", "type", "run", "status"]
    assert line.split()[0] == task.id and f"{task.id}-0" in line and "waiting" in line
