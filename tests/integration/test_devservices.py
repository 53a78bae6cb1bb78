"""The embedded default: real servers, reuse, pinning, and no orphans after SIGKILL.

Each test uses its own data folder (TEAMDESK_DATA_DIR), so the suite's own services are
never touched. Waiting for the watchdog is a bounded poll of a condition: the timeout only
detects a watchdog that never acted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="embedded services are not used with URLs set")

HOLDER = (
    "import sys, time\n"
    "from devkit import services as d\n"
    "u = d.ensure_services()\n"
    "print(u.database_url, u.redis_url, flush=True)\n"
    "time.sleep(600)\n"  # held until the test kills it
)


@pytest.fixture
def svc_root() -> Path:
    """A data folder outside pytest's `tmp_path`: as root the embedded PostgreSQL runs as
    another account that must traverse the parents, and any concurrent pytest start resets
    `/tmp/pytest-of-<user>` to 0700 ("could not access directory … Permission denied")."""
    parent = Path(tempfile.mkdtemp(prefix="teamdesk-test-"))
    yield parent / "svc"
    shutil.rmtree(parent, ignore_errors=True)


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


def _watchdog_rounds(root: Path) -> int:
    """How many rounds the *current* watchdog has finished keeping the servers (0 before
    its first, or when the counter belongs to an earlier watchdog): a counted round has
    verified and remembered both servers (S3). Read without the lock, so a half-written
    file counts as "not yet"."""
    try:
        pid = int((root / "watchdog.pid").read_text().split()[0])
        counter_pid, rounds = map(int, (root / "watchdog.rounds").read_text().split())
    except (FileNotFoundError, ValueError, IndexError):
        return 0
    return rounds if counter_pid == pid else 0


def test_sigkilled_owner_leaves_no_orphan_servers(svc_root):
    """Two processes share one pair of servers; SIGKILL both and the watchdog stops them."""
    root = svc_root
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


def test_a_removed_data_folder_takes_its_servers_with_it(svc_root):
    """S3: the watchdog stops the servers it verified when their folder is removed, even
    with an owner alive (the pid files went with the folder, so nothing else could)."""
    root = svc_root
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=_env(root),
                              stdout=subprocess.PIPE, text=True)
    try:
        db_url, redis_url = holder.stdout.readline().split()
        seen = _watchdog_rounds(root)
        _wait_until(lambda: _watchdog_rounds(root) >= seen + 1, 30,
                    "one watchdog round that saw both servers")
        assert _open(db_url) and _open(redis_url)
        # The servers may remove files of their own while the tree goes (as `rm -rf` does).
        shutil.rmtree(root, ignore_errors=True)
        _wait_until(lambda: not _open(db_url) and not _open(redis_url), 30,
                    "the watchdog to stop both servers of the removed folder")
        assert holder.poll() is None, "the owner itself is not the watchdog's to stop"
    finally:
        holder.kill()
        holder.wait()


def test_services_up_pins_until_down(svc_root):
    """`teamdesk services up` keeps the servers after it exits; `down` stops them."""
    root = svc_root
    teamdesk = [sys.executable, "-m", "devkit.cli"]
    up = subprocess.run([*teamdesk, "services", "up"], env=_env(root), capture_output=True,
                        text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    db_url = up.stdout.split()[1]
    try:
        # Two whole watchdog rounds finished after `up` exited, the second begun after it,
        # i.e. with no owner alive: only the "keep" pin can have kept the servers up.
        seen = _watchdog_rounds(root)
        watchdog = root / "watchdog.pid"
        _wait_until(lambda: _watchdog_rounds(root) >= seen + 2 or not watchdog.exists(), 30,
                    "two watchdog rounds after `up` exited")
        assert watchdog.exists(), "the watchdog stopped the pinned servers and exited"
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


def _teamdesk(root: Path, *args: str, timeout: float = 120, **env: str):
    return subprocess.run([sys.executable, "-m", "devkit.cli", *args],
                          env={**_env(root), **env}, capture_output=True, text=True,
                          timeout=timeout)


def _ps_lines() -> str:
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def test_embedded_services_require_credentials(svc_root):
    """S1, S2: a fresh data folder gets a random PostgreSQL password (scram-sha-256 for
    every host line of pg_hba, no `trust`) and a Redis `requirepass`, each in a 0600 file;
    without them both servers refuse; neither password is on a command line (`ps`) or in
    what `services up`/`status` print."""
    import psycopg
    import redis

    root = svc_root
    up = _teamdesk(root, "services", "up")
    assert up.returncode == 0, up.stderr
    try:
        pg_pw = (root / "pg_password").read_text().strip()
        redis_pw = (root / "redis_password").read_text().strip()
        for name in ("pg_password", "redis_password", "redis/redis.conf"):
            assert (root / name).stat().st_mode & 0o077 == 0, name
        hba = [ln.split() for ln in (root / "pg" / "pg_hba.conf").read_text().splitlines()
               if ln.strip() and not ln.startswith("#")]
        assert hba and all(ln[-1] == "scram-sha-256" for ln in hba)
        status = _teamdesk(root, "services", "status")
        shown = up.stdout + up.stderr + status.stdout + status.stderr
        assert pg_pw not in shown and redis_pw not in shown and ":***@" in status.stdout
        ps = _ps_lines()
        assert pg_pw not in ps and redis_pw not in ps
        state = json.loads((root / "services.json").read_text())
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(f"postgresql://postgres:wrong@127.0.0.1:{state['pg_port']}/postgres")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=state["redis_port"]).ping()
        assert redis.Redis(port=state["redis_port"], password=redis_pw).ping()
    finally:
        _teamdesk(root, "services", "down")


def test_percent_encoded_password_works_end_to_end_and_is_never_printed(svc_root):
    """S2: a role whose password holds `@` and `%` (percent-encoded in the URL as %40 and
    %25) migrates with `teamdesk db upgrade` — the `%` is not taken for ini interpolation —
    and a failure to connect prints the URL redacted, never the password."""
    import psycopg
    from psycopg import sql

    root = svc_root
    up = _teamdesk(root, "services", "up")
    assert up.returncode == 0, up.stderr
    try:
        state = json.loads((root / "services.json").read_text())
        admin = (f"postgresql://postgres:{(root / 'pg_password').read_text().strip()}"
                 f"@127.0.0.1:{state['pg_port']}/postgres")
        password = "p@ss%word 50%"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE pct LOGIN PASSWORD {}").format(
                sql.Literal(password)))
            conn.execute("CREATE DATABASE pct_db OWNER pct")
        url = f"postgresql://pct:{quote(password, safe='')}@127.0.0.1:{state['pg_port']}/pct_db"
        env = {"DATABASE_URL": url, "REDIS_URL": "redis://127.0.0.1:1/0"}
        ok = _teamdesk(root, "db", "upgrade", **env)
        assert ok.returncode == 0, ok.stderr
        assert "latest schema" in ok.stdout
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM background_tasks").fetchone() == (0,)
        bad = _teamdesk(root, "db", "upgrade", **{**env, "DATABASE_URL": url.replace(
            "pct_db", "no_such_db")})
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert "p@ss" not in bad.stderr and quote(password, safe="") not in bad.stderr
    finally:
        _teamdesk(root, "services", "down")


def test_unsafe_data_folder_is_refused(svc_root):
    """S1: a data folder others can write to (they could swap the pid or password files),
    or one another user owns, is refused with one clear line and exit 2."""
    root = svc_root
    root.mkdir()
    root.chmod(0o777)
    out = _teamdesk(root, "services", "up")
    assert out.returncode == 2 and "writable by group or others" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (root / "pg").exists()
    if os.geteuid() == 0:  # only root can hand a folder to another account
        root.chmod(0o755)
        os.chown(root, 65534, 65534)
        out = _teamdesk(root, "services", "status")
        assert out.returncode == 2 and "not by you" in out.stderr, out.stderr


def test_old_trust_auth_folder_is_upgraded_in_place(svc_root):
    """S1: a data folder made by an older version (trust auth, no password files) must not
    leave a learner stuck: the next start sets a password and switches pg_hba to
    scram-sha-256, keeping the data; a running Redis without a password gets one."""
    import psycopg
    import redis

    root = svc_root
    assert _teamdesk(root, "services", "up").returncode == 0
    assert _teamdesk(root, "services", "down").returncode == 0
    # What an older version left behind: trust everywhere, no password files.
    hba = root / "pg" / "pg_hba.conf"
    hba.write_text("host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n")
    for name in ("pg_password", "redis_password"):
        (root / name).unlink()
    up = _teamdesk(root, "services", "up")
    assert up.returncode == 0, up.stderr
    try:
        password = (root / "pg_password").read_text().strip()
        assert "trust" not in hba.read_text()
        port = json.loads((root / "services.json").read_text())["pg_port"]
        with psycopg.connect(f"postgresql://postgres:{password}@127.0.0.1:{port}/teamdesk"):
            pass
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(f"postgresql://postgres:old@127.0.0.1:{port}/teamdesk")
        # A Redis an older version started (still running, no password) gets one live.
        redis_port = json.loads((root / "services.json").read_text())["redis_port"]
        old_pw = (root / "redis_password").read_text().strip()
        redis.Redis(port=redis_port, password=old_pw).config_set("requirepass", "")
        (root / "redis_password").unlink()
        assert _teamdesk(root, "services", "up").returncode == 0
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=redis_port).ping()
        new_pw = (root / "redis_password").read_text().strip()
        assert redis.Redis(port=redis_port, password=new_pw).ping()
    finally:
        _teamdesk(root, "services", "down")


def test_stale_pid_files_are_not_trusted_nor_signalled(tmp_path, svc_root):
    """S3: after a reboot the pids in postmaster.pid / redis.pid may belong to unrelated
    processes — here `sleep`s, even ones named like the servers. `status` does not report
    them as the servers, `down` does not signal them, and `up` starts the real servers."""
    root = svc_root
    (root / "pg").mkdir(parents=True)
    (root / "redis").mkdir()
    fakes = []
    for name in ("postgres", "valkey-server"):
        binary = tmp_path / name
        shutil.copy(shutil.which("sleep"), binary)
        fakes.append(subprocess.Popen([str(binary), "600"]))
    pg_fake, redis_fake = fakes
    try:
        (root / "pg" / "postmaster.pid").write_text(
            f"{pg_fake.pid}\n{root / 'pg'}\n{int(time.time())}\n5432\n")
        (root / "redis" / "redis.pid").write_text(f"{redis_fake.pid}\n")
        status = _teamdesk(root, "services", "status")
        assert status.returncode == 1, status.stdout
        assert str(pg_fake.pid) not in status.stdout and str(redis_fake.pid) not in status.stdout
        down = _teamdesk(root, "services", "down")
        assert down.returncode == 0 and "nothing was running" in down.stdout, down.stdout
        up = _teamdesk(root, "services", "up")
        assert up.returncode == 0, up.stderr
        _teamdesk(root, "services", "down")
        assert pg_fake.poll() is None and redis_fake.poll() is None, "an unrelated pid was hit"
    finally:
        for p in fakes:
            p.kill()
            p.wait()


def test_a_locale_the_machine_lacks_neither_stops_the_servers_nor_orders_rows(svc_root):
    """A learner's LANG may name a locale the machine never generated (zh_CN.UTF-8 in many
    containers and WSL images): initdb would refuse it. The embedded cluster is made in
    the C locale whatever LANG says, so it starts, and text sorts the same on every
    machine (byte order: "B" before "a")."""
    import psycopg

    root = svc_root
    up = _teamdesk(root, "services", "up", LANG="xx_XX.UTF-8", LC_ALL="xx_XX.UTF-8")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        state = json.loads((root / "services.json").read_text())
        pw = (root / "pg_password").read_text().strip()
        url = f"postgresql://postgres:{quote(pw, safe='')}@127.0.0.1:{state['pg_port']}/postgres"
        with psycopg.connect(url) as conn:
            collate = conn.execute("SELECT datcollate FROM pg_database "
                                   "WHERE datname = 'postgres'").fetchone()[0]
            order = [r[0] for r in conn.execute(
                "SELECT x FROM (VALUES ('a'), ('B')) AS t(x) ORDER BY x")]
        assert collate == "C" and order == ["B", "a"]
    finally:
        _teamdesk(root, "services", "down")
