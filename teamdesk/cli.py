"""The `teamdesk` command.

    teamdesk services up|down|status   the embedded PostgreSQL + Redis
    teamdesk db upgrade                 migrate the database to the latest schema
    teamdesk seed                       demo team, members, tickets (deterministic)
    teamdesk lab                        services + schema + demo data, then JupyterLab
    teamdesk tasks                      the task ledger as a table
    teamdesk worker                     the worker process: task worker + dispatch tick
    teamdesk demo race                  the takeover race, narrated in the terminal
    teamdesk rules [ID ...]             the contract's rules: code, tests, notebooks

Errors a user can act on are printed as one line and exit 2; no stack traces.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from teamdesk import devservices
from teamdesk.config import Settings
from teamdesk.errors import TeamDeskError
from teamdesk.redaction import redact, redact_text

if TYPE_CHECKING:
    from teamdesk.tasks.runner import WorkerHook


def _release_claim(held_before: bool) -> None:
    """End the owner claim a command made on the embedded services — not one this process
    held before the command ran (a program that calls `main` in-process keeps its own)."""
    if not held_before:
        devservices.release_owner()


def _settings(owner: bool = True) -> Settings:
    """Resolved settings; with the embedded default this process becomes an owner."""
    return devservices.resolve_settings(owner_pid=os.getpid() if owner else None)


# ---------------------------------------------------------------- services

def cmd_services(args: argparse.Namespace) -> int:
    if args.action == "up":
        env = Settings.from_env()
        if env.database_url and env.redis_url:
            print("DATABASE_URL and REDIS_URL are set: using those servers, starting nothing.")
            return 0
        urls = devservices.ensure_services(keep=True)
        root = devservices.data_dir()
        # S2: never print a password; it is in the data folder, readable by you alone (S1).
        print(f"PostgreSQL  {redact(urls.database_url)}")
        print(f"Redis       {redact(urls.redis_url)}")
        print(f"data folder {root}  (passwords: pg_password, redis_password)")
        print("They keep running until `teamdesk services down`.")
        return 0
    if args.action == "down":
        was = devservices.stop_services()
        print("stopped PostgreSQL and Redis" if was else "nothing was running")
        return 0
    info = devservices.status()  # URLs come back redacted (S2)
    running = info["postgres_pid"] and info["redis_pid"]
    print(f"data folder  {info['data_dir']}")
    print(f"PostgreSQL   {info['postgres_version']}  "
          f"{'pid ' + str(info['postgres_pid']) if info['postgres_pid'] else 'stopped'}")
    print(f"Redis        {info['redis_version']}  "
          f"{'pid ' + str(info['redis_pid']) if info['redis_pid'] else 'stopped'}")
    if info.get("database_url"):
        print(f"DATABASE_URL {info['database_url']}")
        print(f"REDIS_URL    {info['redis_url']}")
    print(f"kept by      {'`services up`' if info['pinned'] else ''} "
          f"{'owners ' + ','.join(map(str, info['owners'])) if info['owners'] else ''}".rstrip())
    env = Settings.from_env()
    if env.database_url or env.redis_url:
        print("note: DATABASE_URL/REDIS_URL are set; the product uses those, not these.")
    return 0 if running else 1


# ---------------------------------------------------------------- db, seed

def cmd_db(args: argparse.Namespace) -> int:
    from teamdesk.db.migrate import upgrade

    settings = _settings()
    upgrade(settings.database_url)
    print("database is at the latest schema")
    return 0


async def _seed(settings: Settings, team_id: str, tickets: int, seed: int) -> str:
    from sqlalchemy import select

    from teamdesk.db.engine import create_engine, session_factory
    from teamdesk.db.models import Team
    from teamdesk.seed import seed_demo

    engine = create_engine(settings.database_url)
    try:
        sessions = session_factory(engine)
        async with sessions() as session:
            if await session.scalar(select(Team).where(Team.id == team_id)) is not None:
                return f"team {team_id!r} already exists; nothing seeded"
        async with sessions() as session:
            summary = await seed_demo(session, team_id=team_id, tickets=tickets, seed=seed)
        return (f"seeded team {summary.team_id!r}: {summary.members} members, "
                f"{summary.tickets} tickets")
    finally:
        await engine.dispose()


def cmd_seed(args: argparse.Namespace) -> int:
    from teamdesk.db.migrate import upgrade

    settings = _settings()
    upgrade(settings.database_url)
    print(asyncio.run(_seed(settings, args.team, args.tickets, args.seed)))
    return 0


# ---------------------------------------------------------------- tasks table

async def _task_rows(settings: Settings, limit: int) -> list[dict]:
    """Ledger rows next to their queue job's state (D4's view): `-` = no job record,
    `?` = Redis did not answer (the ledger is still shown)."""
    import contextlib

    from redis.exceptions import RedisError
    from sqlalchemy import select

    from teamdesk.db.engine import create_engine, session_factory
    from teamdesk.db.models import BackgroundTask
    from teamdesk.tasks.queue import create_task_queue, task_job_id

    engine = create_engine(settings.database_url)
    queue = create_task_queue(settings)
    try:
        async with session_factory(engine)() as session:
            tasks = (await session.scalars(
                select(BackgroundTask).order_by(BackgroundTask.created_at.desc()).limit(limit)
            )).all()

        async def queue_state(job_id: str) -> str:
            job = await queue.getJob(job_id)
            return "-" if job is None else await job.getState()

        try:
            states = [await asyncio.wait_for(queue_state(task_job_id(t.id, t.run)),
                                             settings.redis_timeout_s) for t in tasks]
        except (RedisError, OSError, TimeoutError):
            states = ["?"] * len(tasks)
        return [
            {"id": t.id, "type": t.type.value, "run": t.run, "status": t.status.value,
             "attempts": t.attempts, "progress": t.progress,
             # D9: stale recoveries of this run (the third one fails it).
             "stalls": t.stale_recoveries,
             "execution": (t.execution_id or "")[:8],
             "dispatched_at": t.dispatched_at.strftime("%H:%M:%S") if t.dispatched_at else "",
             "job_id": task_job_id(t.id, t.run), "queue": state}
            for t, state in zip(tasks, states, strict=True)
        ]
    finally:
        with contextlib.suppress(Exception):
            await queue.close()
        await engine.dispose()


def print_table(rows: list[dict]) -> None:
    """A plain text table; the same words as the ledger's columns."""
    if not rows:
        print("(no tasks)")
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))


def cmd_tasks(args: argparse.Namespace) -> int:
    settings = _settings()
    print_table(asyncio.run(_task_rows(settings, args.limit)))
    return 0


# ---------------------------------------------------------------- worker, demo

def _configure_logging(level: str) -> None:
    import logging

    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")


def cmd_worker(args: argparse.Namespace, *, on_worker: WorkerHook | None = None) -> int:
    """`teamdesk worker`; `on_worker` goes to `run_worker_process` (`runner.WorkerHook`)."""
    from redis.exceptions import RedisError

    from teamdesk.tasks.runner import run_worker_process

    # W4: a SIGTERM/SIGINT while we are still starting (services, imports, connections)
    # is a request to stop, not a reason to die by the default action: remember it, and
    # the worker drains (nothing to drain yet) and exits 0. The loop's handlers are
    # `run_worker_process`'s; until they are in, this one also sets the loop's `stop`, so
    # no signal falls between the two.
    early: list[int] = []
    stop: asyncio.Event | None = None

    def on_early_signal(signum: int, frame: object) -> None:
        early.append(signum)
        if stop is not None:
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_early_signal)

    async def run(settings: Settings) -> int:
        nonlocal stop
        stop = asyncio.Event()
        if early:
            stop.set()
        return await run_worker_process(settings, name=args.name, stop=stop,
                                        on_worker=on_worker)

    _configure_logging(args.log_level)
    settings = None
    held = devservices.registered_owner()
    try:
        settings = _settings()
        changes: dict[str, object] = {}
        if args.concurrency is not None:
            changes["worker_concurrency"] = args.concurrency
        if args.drain_timeout is not None:
            changes["drain_timeout_s"] = args.drain_timeout
        settings = settings.replace(**changes)
        if early:
            print("teamdesk: stop requested while starting; the worker did not start",
                  file=sys.stderr)
            return 0
        return asyncio.run(run(settings))
    except (RedisError, OSError) as err:
        # A supervisor restarts us; the operator gets one line, not a traceback (S2:
        # the URL and the driver's text are redacted).
        where = redact(settings.redis_url) if settings else "(not resolved)"
        print(f"teamdesk: cannot start the worker, Redis at {where} is not "
              f"reachable ({type(err).__name__}: {redact_text(str(err))})", file=sys.stderr)
        return 2
    finally:
        _release_claim(held)


def cmd_demo(args: argparse.Namespace) -> int:
    from teamdesk.demo import run_race_demo

    _configure_logging("warning")
    held = devservices.registered_owner()
    settings = _settings()
    try:
        return asyncio.run(run_race_demo(settings, pause=args.pause))
    finally:
        _release_claim(held)


# ---------------------------------------------------------------- lab

def _project_dir() -> Path:
    """The lab's root: the checkout, so every file a notebook cites (`RULES.md`,
    `teamdesk/tasks/queries.sql`, `labs/scenes/…`) is one click away in the file browser."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "notebooks").is_dir() else Path.cwd()


#: The notebook a learner's browser opens on, relative to the lab's root.
START_NOTEBOOK = "notebooks/00-start-here.ipynb"


#: JupyterLab settings the lab ships: `labconfig/default_setting_overrides.json` there turns
#: off the "Would you like to receive official Jupyter news?" prompt and the update check
#: (jupyterlab_server layers such files from every Jupyter config dir over the defaults).
LAB_CONFIG_DIR = Path(__file__).resolve().parent / "jupyter"

#: Files of the nbval harness that live in `notebooks/` but are not for learners, and build
#: output. Dot-folders (`.venv`, `.teamdesk`, caches) are hidden by Jupyter already.
LAB_HIDDEN_FILES: tuple[str, ...] = ("conftest.py", "sanitize.cfg", "*.egg-info", "build")


def lab_hide_globs() -> list[str]:
    """Jupyter's own hidden-file globs (`__pycache__`, `*.pyc`, …) plus the harness files.
    Extended, not replaced: setting the trait drops its defaults."""
    from jupyter_server.services.contents.manager import ContentsManager

    defaults = list(ContentsManager.class_traits()["hide_globs"].default())
    return [*defaults, *(g for g in LAB_HIDDEN_FILES if g not in defaults)]


def lab_ui_args() -> list[str]:
    """What a learner first sees: 00-start-here open, the harness files not listed."""
    return [f"--LabApp.default_url=/lab/tree/{START_NOTEBOOK}",
            *(f"--ContentsManager.hide_globs={g}" for g in lab_hide_globs())]


def use_lab_settings(environ: MutableMapping[str, str]) -> None:
    """Put `LAB_CONFIG_DIR` first on `JUPYTER_CONFIG_PATH`, so JupyterLab (our child)
    applies our settings overrides, and no news prompt appears. A path the user already
    set is kept after ours; nothing is written outside the project."""
    paths = [str(LAB_CONFIG_DIR), *filter(None, environ.get(
        "JUPYTER_CONFIG_PATH", "").split(os.pathsep))]
    environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(dict.fromkeys(paths))


def cmd_lab(args: argparse.Namespace) -> int:
    from teamdesk.db.migrate import upgrade

    print("starting services (embedded PostgreSQL + Redis unless DATABASE_URL/REDIS_URL set)…")
    held = devservices.registered_owner()
    settings = _settings()
    upgrade(settings.database_url)
    print(asyncio.run(_seed(settings, "acme", 300, 23)))
    root = _project_dir()
    port = str(args.port or os.environ.get("TEAMDESK_LAB_PORT") or 8888)
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    cmd = [jupyter, "lab", f"--ServerApp.root_dir={root}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", *lab_ui_args()]
    use_lab_settings(os.environ)
    if args.no_browser or not os.environ.get("DISPLAY"):
        cmd.append("--no-browser")
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    # S1: the token goes through the environment (JUPYTER_TOKEN), not argv, which `ps`
    # shows to every local account.
    token = secrets.token_hex(16)
    print(f"lab root {root} (the chapters are in notebooks/)")
    print(f"open http://127.0.0.1:{port}/lab/tree/{START_NOTEBOOK}?token={token}")
    print("Ctrl-C stops JupyterLab and releases the services")

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGINT even if our parent started us with it ignored; SIGTERM from a supervisor.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    # Own session: Ctrl-C reaches only us, and we stop Jupyter without its y/n prompt.
    proc = subprocess.Popen(cmd, start_new_session=True,
                            env={**os.environ, "JUPYTER_TOKEN": token})
    try:
        return proc.wait()
    except KeyboardInterrupt:
        print("\nstopping JupyterLab…")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0
    finally:
        _release_claim(held)


# ---------------------------------------------------------------- rules

def cmd_rules(args: argparse.Namespace) -> int:
    """The rules of RULES.md with their places, computed from the sources (no services
    needed). Exit 1 names the rules no test cites: a rule nobody proves is a gap."""
    from teamdesk import rules

    root = Path(args.root).resolve() if args.root else rules.PROJECT_ROOT
    reports = rules.index(root)
    chosen = rules.select(args.ids, reports) if args.ids else list(reports.values())
    if args.ids:
        print("\n\n".join(r.text() for r in chosen))
    else:
        print_table(rules.table(chosen))
    missing = rules.untested({r.rule.id: r for r in chosen})
    if missing:
        print(f"\nno test cites {len(missing)} rule(s): {', '.join(missing)}")
        return 1
    if not args.ids:
        print(f"\nevery one of the {len(chosen)} rules is cited by at least one test")
    return 0


# ---------------------------------------------------------------- main

def _number(kind: type, low: float, what: str, high: float | None = None):
    """An argparse `type=`: a bad value is a one-line usage error and exit 2, at parse time,
    before any service starts or anything is written."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value != value or value in (float("inf"), float("-inf")) or value < low or (
                high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


_POSITIVE_INT = _number(int, 1, "a whole number of at least 1")
_COUNT = _number(int, 0, "a whole number of 0 or more")
_SECONDS = _number(float, 0, "a number of seconds, 0 or more")
_PORT = _number(int, 1, "a port number (1-65535)", 65535)


def _name(text: str) -> str:
    if not text or any(c.isspace() or c == ":" for c in text) or len(text) > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a name (no spaces or ':', 1-100 "
                                         "characters)")
    return text


def _team_id(text: str) -> str:
    from teamdesk.services.teams import _ID

    if not _ID.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a team id (1-40 characters of "
                                         "a-z, 0-9, '_', '.', '-')")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="teamdesk", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("services", help="embedded PostgreSQL + Redis")
    s.add_argument("action", choices=["up", "down", "status"])
    s.set_defaults(func=cmd_services)

    d = sub.add_parser("db", help="schema migrations")
    d.add_argument("action", choices=["upgrade"])
    d.set_defaults(func=cmd_db)

    sd = sub.add_parser("seed", help="deterministic demo data")
    sd.add_argument("--team", type=_team_id, default="acme")
    sd.add_argument("--tickets", type=_COUNT, default=300)
    sd.add_argument("--seed", type=int, default=23)
    sd.set_defaults(func=cmd_seed)

    lab = sub.add_parser("lab", help="open the notebooks in JupyterLab")
    lab.add_argument("--port", type=_PORT, help="default $TEAMDESK_LAB_PORT or 8888")
    lab.add_argument("--no-browser", action="store_true")
    lab.set_defaults(func=cmd_lab)

    w = sub.add_parser("worker", help="run a worker process (task worker + dispatch tick)")
    w.add_argument("--name", type=_name,
                   help="worker name (default host-pid); names the heartbeat key")
    w.add_argument("--concurrency", type=_POSITIVE_INT, help="jobs at once (default 1)")
    w.add_argument("--drain-timeout", type=_SECONDS,
                   help="seconds a running job gets after SIGTERM (default 30)")
    w.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    w.set_defaults(func=cmd_worker)

    dm = sub.add_parser("demo", help="live demos for a class")
    dm.add_argument("which", choices=["race"])
    dm.add_argument("--pause", action="store_true",
                    help="wait for Enter between steps (for narrating live)")
    dm.set_defaults(func=cmd_demo)

    t = sub.add_parser("tasks", help="the task ledger as a table")
    t.add_argument("--limit", type=_POSITIVE_INT, default=20)
    t.set_defaults(func=cmd_tasks)

    r = sub.add_parser("rules", help="the contract's rules: where each lives, proven, shown")
    r.add_argument("ids", nargs="*", metavar="ID", help="rule ids (default: a table of all)")
    r.add_argument("--root", help="project checkout to scan (default: this package's)")
    r.set_defaults(func=cmd_rules)
    return p


def main(argv: Sequence[str] | None = None, *, on_worker: WorkerHook | None = None) -> int:
    """The `teamdesk` command. `on_worker` applies to `worker` only: a hook that sees the
    process's task worker before it starts (`teamdesk.tasks.runner.WorkerHook`); a lab's
    entry point (`labs.counterexample_worker`) passes one, the command line never does."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "pause", False) and not sys.stdin.isatty():
        # It waits for Enter between steps: without a terminal that is an EOFError later.
        parser.error("--pause needs a terminal on stdin (it waits for Enter between steps)")
    func = args.func
    if on_worker is not None:
        if func is not cmd_worker:
            parser.error("on_worker applies to the `worker` command only")
        func = functools.partial(cmd_worker, on_worker=on_worker)
    try:
        return func(args)
    except (TeamDeskError, devservices.ServiceError, ValueError) as err:
        print(f"teamdesk: {redact_text(str(err))}", file=sys.stderr)  # S2
        return 2
    except Exception as err:
        if not _unreachable(err):
            raise
        # A server that is down or refuses our credentials: one line, redacted (S2).
        first = redact_text(str(err)).strip().splitlines()[0] if str(err).strip() else ""
        print(f"teamdesk: cannot reach the database or Redis ({type(err).__name__}: {first})",
              file=sys.stderr)
        return 2


def _unreachable(err: BaseException) -> bool:
    """A connection-level failure of PostgreSQL or Redis (not a bug of ours)."""
    import psycopg
    import redis
    from sqlalchemy.exc import OperationalError

    return isinstance(err, OperationalError | psycopg.OperationalError | redis.ConnectionError)


if __name__ == "__main__":
    sys.exit(main())
