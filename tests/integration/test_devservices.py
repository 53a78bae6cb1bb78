"""The embedded default: real servers, reuse, pinning, and no orphans after SIGKILL.

Each test uses its own data folder (TEAMDESK_DATA_DIR), so the suite's own services are
never touched. Waiting for the watchdog is a bounded poll of a condition: the timeout only
detects a watchdog that never acted.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="embedded services are not used with URLs set")

HOLDER = (
    "import sys, time\n"
    "from teamdesk import devservices as d\n"
    "u = d.ensure_services()\n"
    "print(u.database_url, u.redis_url, flush=True)\n"
    "time.sleep(600)\n"  # held until the test kills it
)


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["TEAMDESK_DATA_DIR"] = str(root)
    return env


def _open(url: str) -> bool:
    port = urlparse(url).port
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.1)


def test_sigkilled_owner_leaves_no_orphan_servers(tmp_path):
    """Two processes share one pair of servers; SIGKILL both and the watchdog stops them."""
    root = tmp_path / "svc"
    a = subprocess.Popen([sys.executable, "-c", HOLDER], env=_env(root), stdout=subprocess.PIPE,
                         text=True)
    b = subprocess.Popen([sys.executable, "-c", HOLDER], env=_env(root), stdout=subprocess.PIPE,
                         text=True)
    try:
        urls_a = a.stdout.readline().split()
        urls_b = b.stdout.readline().split()
        assert urls_a == urls_b, "the second process must reuse the running servers"
        db_url, redis_url = urls_a
        assert _open(db_url) and _open(redis_url)
        a.send_signal(signal.SIGKILL)
        a.wait()
        # The watchdog prunes a's dead entry in one of its rounds; in that same round it
        # sees b alive, so the servers must still be up afterwards.
        _wait_until(lambda: not (root / "owners" / str(a.pid)).exists(), 30,
                    "the watchdog to prune the killed owner")
        assert (root / "owners" / str(b.pid)).exists()
        assert _open(db_url) and _open(redis_url)
        b.send_signal(signal.SIGKILL)
        b.wait()
        _wait_until(lambda: not _open(db_url) and not _open(redis_url), 30,
                    "the watchdog to stop both servers")
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert not (root / "pg" / "postmaster.pid").exists()


def test_services_up_pins_until_down(tmp_path):
    """`teamdesk services up` keeps the servers after it exits; `down` stops them."""
    root = tmp_path / "svc"
    teamdesk = [sys.executable, "-m", "teamdesk.cli"]
    up = subprocess.run([*teamdesk, "services", "up"], env=_env(root), capture_output=True,
                        text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    db_url = up.stdout.split()[1]
    try:
        time.sleep(2.5)  # the watchdog has had two rounds with no owner alive
        assert _open(db_url)
        status = subprocess.run([*teamdesk, "services", "status"], env=_env(root),
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "PostgreSQL 18" in status.stdout.replace(
            "(PostgreSQL) ", "PostgreSQL ")
        # S2: `up` prints the URLs redacted; the password is in the data folder (S1).
        redis_url = up.stdout.split()[3]
        assert ":***@" in redis_url and ":***@" in db_url
        password = (root / "redis_password").read_text().strip()
        assert password not in up.stdout and password not in status.stdout
        assert "noeviction" in subprocess.run(
            [str(Path(sys.executable).parent / "python"), "-c",
             "import redis,sys; print(redis.Redis.from_url(sys.argv[1]).config_get("
             "'maxmemory-policy'))", redis_url.replace("***", password)],
            capture_output=True, text=True, timeout=30).stdout
    finally:
        down = subprocess.run([*teamdesk, "services", "down"], env=_env(root),
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not _open(db_url)
    again = subprocess.run([*teamdesk, "services", "status"], env=_env(root),
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "stopped" in again.stdout
