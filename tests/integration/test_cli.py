"""The `teamdesk` command against real services: the live demo, the tasks table, option
validation, redaction (S2), the Jupyter token (S1) and the worker's signals (W4)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest


def _run(settings, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": settings.database_url, "REDIS_URL": settings.redis_url,
           "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix}
    return subprocess.run([sys.executable, "-m", "labs.command", *args], env=env,
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
    await dispatch_tasks(queue, settings)
    out = _run(settings, "tasks")
    assert out.returncode == 0, out.stderr
    header, line = out.stdout.splitlines()[:2]
    assert header.split()[:4] == ["id", "type", "run", "status"]
    assert line.split()[0] == task.id and f"{task.id}-0" in line and "waiting" in line


@pytest.mark.parametrize("args", [
    ["seed", "--tickets", "-5"],
    ["seed", "--team", "Bad Team"],
    ["worker", "--concurrency", "0"],
    ["worker", "--drain-timeout", "-1"],
    ["worker", "--drain-timeout", "nan"],
    ["worker", "--name", "has space"],
    ["tasks", "--limit", "-3"],
    ["tasks", "--limit", "many"],
    ["lab", "--port", "70000"],
])
def test_bad_option_values_are_refused_at_parse_time(settings, args):
    """Bad input writes nothing: every option is checked by argparse before a service
    starts or a row is written — one error line naming the option, exit 2, no traceback
    (before: "seeded … -5 tickets", a worker that never takes a job, a SQLAlchemy
    traceback with the SQL for `--limit -3`)."""
    out = _run(settings, *args, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    errors = [ln for ln in out.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and f"argument {args[1]}" in errors[0], out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_demo_pause_without_a_terminal_says_so(settings):
    """`--pause` waits for Enter between steps: with no terminal on stdin it is refused
    with one line and exit 2, not an `EOFError` halfway through the demo."""
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "REDIS_URL": settings.redis_url, "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix}
    out = subprocess.run([sys.executable, "-m", "labs.command", "demo", "race", "--pause"],
                         env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "--pause needs a terminal" in out.stderr and "EOFError" not in out.stderr


def test_worker_redacts_the_redis_password_when_redis_is_unreachable(settings):
    """S2: the worker's one-line start failure names the Redis URL with its password
    masked (before: the whole `REDIS_URL`, password included)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "REDIS_URL": f"redis://:s3cr%40t-pw@127.0.0.1:{port}/0",
           "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix}
    out = subprocess.run([sys.executable, "-m", "devkit.cli", "worker"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "s3cr" not in out.stderr + out.stdout
    assert f"redis://:***@127.0.0.1:{port}/0" in out.stderr


def test_lab_passes_the_jupyter_token_by_environment(settings, monkeypatch, capsys):
    """S1: the token never appears on a command line (`ps` shows argv to every local
    account): JupyterLab gets it as `JUPYTER_TOKEN`; the printed link carries it."""
    from devkit import cli, services
    from devkit import lab as lab_command

    seen: dict = {}

    class FakeJupyter:
        def __init__(self, cmd, **kwargs):
            seen["cmd"], seen["env"] = cmd, kwargs.get("env") or {}

        def wait(self, timeout=None):
            return 0

    monkeypatch.setenv("DATABASE_URL", settings.database_url)
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setattr(lab_command.subprocess, "Popen", FakeJupyter)  # no real JupyterLab
    held = services.registered_owner()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert cli.main(["lab", "--no-browser", "--port", "8899"]) == 0
    finally:
        for sig, handler in handlers.items():  # `lab` installs its own
            signal.signal(sig, handler)
    token = seen["env"].get("JUPYTER_TOKEN")
    assert token and len(token) >= 32
    assert not any(token in arg for arg in seen["cmd"])
    assert f"token={token}" in capsys.readouterr().out
    # In-process, `lab` ends only a claim of its own: this pytest process keeps its own.
    assert services.registered_owner() == held


def test_sigterm_while_the_worker_is_starting_exits_0(settings):
    """W4: a SIGTERM that arrives while `teamdesk worker` is still starting (here: held at
    the embedded services' lock, before any connection) is a stop request — the process
    exits 0 without starting the worker — not death by the default signal action."""
    import fcntl

    # Outside pytest's tmp_path: as root the embedded PostgreSQL's account must traverse
    # the parents, and a concurrent pytest start resets /tmp/pytest-of-<user> to 0700.
    root = Path(tempfile.mkdtemp(prefix="teamdesk-test-")) / "svc"
    root.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(TEAMDESK_DATA_DIR=str(root), TEAMDESK_QUEUE_PREFIX=settings.queue_prefix)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.Popen([sys.executable, "-m", "devkit.cli", "worker"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # Sync point: the worker blocks on our lock (a waiter in /proc/locks), i.e. it
            # is past its imports and signal set-up but has started nothing.
            _wait_until(lambda: _blocked_on_lock(proc.pid), 60, "the worker to wait on the lock")
            proc.send_signal(signal.SIGTERM)
        except BaseException:
            proc.kill()
            raise
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        subprocess.run([sys.executable, "-m", "devkit.cli", "services", "down"], env=env,
                       capture_output=True, timeout=120)
        shutil.rmtree(root.parent, ignore_errors=True)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "worker.started" not in err
    assert "stop requested while starting" in err


def test_clean_drain_with_urls_set_touches_no_data_folder(settings, tmp_path):
    """W4: with DATABASE_URL/REDIS_URL set nothing is registered, so nothing is released:
    a clean SIGTERM drain exits 0 even where no `.teamdesk/` can be created (here the data
    folder would sit under a regular file), and no folder appears."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "REDIS_URL": settings.redis_url, "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix,
           "TEAMDESK_DATA_DIR": str(blocker / ".teamdesk")}
    proc = subprocess.Popen([sys.executable, "-m", "devkit.cli", "worker"], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        for line in proc.stdout:
            if "worker.started" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "Traceback" not in rest and "worker.stopped" in rest
    assert not (tmp_path / ".teamdesk").exists()


def _blocked_on_lock(pid: int) -> bool:
    """True when `pid` waits for a file lock (a `->` waiter line of /proc/locks)."""
    text = Path("/proc/locks").read_text()
    return any(ln.split()[1] == "->" and ln.split()[5] == str(pid)
               for ln in text.splitlines() if len(ln.split()) > 5)


def _wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.05)
