"""`teamdesk preflight` as an instructor runs it, the whole command against real servers:
it passes here, and with a server stopped it fails with one clear line and its fix. The
stopped server is a private Redis of this test's own (the shared one is never stopped)."""

from __future__ import annotations

import os
import subprocess
import sys

from devkit.services.paths import free_port
from labs.private_redis import PrivateRedis

TIMEOUT_S = 300  # a kernel start and the race, on a shared 2-core machine


def _preflight(settings, redis_url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": settings.database_url, "REDIS_URL": redis_url,
           "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix}
    # A port of its own: another lab on this machine may hold 8888 and the ones after it.
    return subprocess.run([sys.executable, "-m", "labs.command", "preflight", "--lang", "en",
                           "--port", str(free_port())], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def _marks(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("✓", "✗"))]


def test_preflight_passes_here(settings):
    """Every check ✓, each announced by a progress line first; the race's time shown."""
    out = _preflight(settings, settings.redis_url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [m.split(":")[0] for m in _marks(out.stdout)] == [
        "✓ Python", "✓ PostgreSQL", "✓ Redis", "✓ kernel", "✓ CJK font", "✓ lab port",
        "✓ takeover race", "✓ memory"], out.stdout
    lines = out.stdout.splitlines()
    assert lines[0].startswith("teamdesk preflight: this machine, for 1 learner(s)")
    assert lines[1] == "  … Python and its packages"
    assert sum(line.startswith("  … ") for line in lines) == 6
    assert "maxmemory-policy noeviction" in out.stdout
    assert "✓ takeover race: passed in " in out.stdout
    assert lines[-1].startswith("preflight: all 8 checks passed in ")
    assert "Traceback" not in out.stderr


def test_preflight_fails_with_a_clear_line_when_a_server_is_stopped(settings):
    """Redis stopped: ✗ Redis names where it could not connect, with the fix; the race
    is not run; exit 1; the password in REDIS_URL is shown nowhere (S2)."""
    own = PrivateRedis().start()
    url, port, password = own.url, own.port, own.password
    own.stop()  # a real server, really stopped
    try:
        out = _preflight(settings, url)
    finally:
        own.remove()
    assert out.returncode == 1, out.stdout + out.stderr
    marks = _marks(out.stdout)
    redis = next(m for m in marks if m.startswith("✗ Redis"))
    assert redis.startswith(f"✗ Redis: cannot connect to 127.0.0.1:{port} ("), redis
    lines = out.stdout.splitlines()
    assert lines[lines.index(redis) + 1].startswith("    fix: start it")
    assert "✓ PostgreSQL" in out.stdout and "✗ takeover race: not run" in out.stdout
    assert lines[-1].startswith("preflight: 2 of 8 checks failed (Redis, takeover race)")
    assert password not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
