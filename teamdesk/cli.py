"""The product's commands: what an operator of `teamdesk` runs, with no dev tooling.

    teamdesk db upgrade                 migrate the database to the latest schema
    teamdesk seed                       demo team, members, tickets (deterministic)
    teamdesk tasks                      the task ledger as a table
    teamdesk worker                     the worker process: task worker + dispatch tick

On its own (`python -m teamdesk.cli`) it uses the servers `DATABASE_URL` and `REDIS_URL`
name, and says so in one line when they are unset. The full `teamdesk` command of the dev
environment (`devkit.cli`) adds `services`, `lab`, `demo` and `rules`, and passes its
embedded default as `resolve_settings`: the product never imports the dev environment.

Errors a user can act on are printed as one line and exit 2; no stack traces.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Callable, Sequence

from teamdesk.config import Settings
from teamdesk.errors import TeamDeskError
from teamdesk.redaction import redact_text

#: How a command gets its settings with both URLs filled in. The product's own reads the
#: environment (`settings_from_env`); the dev environment passes one that starts, or
#: reuses, its embedded servers and keeps them alive while this process lives.
SettingsResolver = Callable[[], Settings]

#: A command: its parsed arguments and the resolver; returns the exit code.
Command = Callable[[argparse.Namespace, SettingsResolver], int]

#: Adds one subcommand to the `teamdesk` parser (`build_parser(commands=...)`).
AddCommand = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


class MissingServers(ValueError):
    """`DATABASE_URL` / `REDIS_URL` are unset and nothing here starts servers for them."""


def settings_from_env() -> Settings:
    """The product on its own: both URLs from the environment (production, CI,
    docker-compose), or `MissingServers` naming the unset ones in one line."""
    settings = Settings.from_env()
    missing = [name for name, value in (("DATABASE_URL", settings.database_url),
                                        ("REDIS_URL", settings.redis_url)) if not value]
    if missing:
        raise MissingServers(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: point "
            "them at your PostgreSQL and Redis (the dev environment's `teamdesk` command, "
            "`python -m devkit.cli`, starts embedded ones instead)")
    return settings


# ---------------------------------------------------------------- db, seed

def cmd_db(args: argparse.Namespace, resolve: SettingsResolver) -> int:
    from teamdesk.db.migrate import upgrade

    settings = resolve()
    upgrade(settings.database_url)
    print("database is at the latest schema")
    return 0


async def seed_team(settings: Settings, team_id: str, tickets: int, seed: int) -> str:
    """Seed the demo team unless it exists; returns the one line to print."""
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


def cmd_seed(args: argparse.Namespace, resolve: SettingsResolver) -> int:
    from teamdesk.db.migrate import upgrade

    settings = resolve()
    upgrade(settings.database_url)
    print(asyncio.run(seed_team(settings, args.team, args.tickets, args.seed)))
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
    from teamdesk.tasks.queue import create_task_queue, job_states, task_job_id

    engine = create_engine(settings.database_url)
    queue = create_task_queue(settings)
    try:
        async with session_factory(engine)() as session:
            tasks = (await session.scalars(
                select(BackgroundTask).order_by(BackgroundTask.created_at.desc()).limit(limit)
            )).all()

        try:
            # Every state in one round trip (D4's bulk read), not getJob + getState per row.
            found = await asyncio.wait_for(
                job_states(queue, [task_job_id(t.id, t.run) for t in tasks]),
                settings.redis_timeout_s)
            states = ["-" if state is None else state for state in found]
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


def cmd_tasks(args: argparse.Namespace, resolve: SettingsResolver) -> int:
    settings = resolve()
    print_table(asyncio.run(_task_rows(settings, args.limit)))
    return 0



# ---------------------------------------------------------------- worker

def configure_logging(level: str) -> None:
    """One log line format for the commands: time, level, the structured message."""
    import logging

    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")


def worker_settings(args: argparse.Namespace, resolve: SettingsResolver) -> Settings:
    """The settings `teamdesk worker` runs with: the resolved ones, with `--concurrency` and
    `--drain-timeout` applied."""
    changes: dict[str, object] = {}
    if args.concurrency is not None:
        changes["worker_concurrency"] = args.concurrency
    if args.drain_timeout is not None:
        changes["drain_timeout_s"] = args.drain_timeout
    return resolve().replace(**changes)


def cmd_worker(args: argparse.Namespace, resolve: SettingsResolver) -> int:
    """`teamdesk worker`: the product's worker process (`runner.worker_main`, W4)."""
    from teamdesk.tasks.runner import worker_main

    configure_logging(args.log_level)
    return worker_main(functools.partial(worker_settings, args, resolve), name=args.name)


# ---------------------------------------------------------------- the parser

def number(kind: type, low: float, what: str,
           high: float | None = None) -> Callable[[str], int | float]:
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


POSITIVE_INT = number(int, 1, "a whole number of at least 1")
COUNT = number(int, 0, "a whole number of 0 or more")
SECONDS = number(float, 0, "a number of seconds, 0 or more")
PORT = number(int, 1, "a port number (1-65535)", 65535)


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



def add_db(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("db", help="schema migrations")
    d.add_argument("action", choices=["upgrade"])
    d.set_defaults(func=cmd_db)


def add_seed(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sd = sub.add_parser("seed", help="deterministic demo data")
    sd.add_argument("--team", type=_team_id, default="acme")
    sd.add_argument("--tickets", type=COUNT, default=300)
    sd.add_argument("--seed", type=int, default=23)
    sd.set_defaults(func=cmd_seed)


def add_worker(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    w = sub.add_parser("worker", help="run a worker process (task worker + dispatch tick)")
    w.add_argument("--name", type=_name,
                   help="worker name (default host-pid); names the heartbeat key")
    w.add_argument("--concurrency", type=POSITIVE_INT, help="jobs at once (default 1)")
    w.add_argument("--drain-timeout", type=SECONDS,
                   help="seconds a running job gets after SIGTERM (default 30)")
    w.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    w.set_defaults(func=cmd_worker)


def add_tasks(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("tasks", help="the task ledger as a table")
    t.add_argument("--limit", type=POSITIVE_INT, default=20)
    t.set_defaults(func=cmd_tasks)


#: The product's commands, in the order `--help` lists them.
PRODUCT_COMMANDS: tuple[AddCommand, ...] = (add_db, add_seed, add_worker, add_tasks)


def build_parser(commands: Sequence[AddCommand] = PRODUCT_COMMANDS, *,
                 description: str | None = None) -> argparse.ArgumentParser:
    """The `teamdesk` parser with `commands` (the product's by default; the dev
    environment passes its own among them). A subcommand may set `check=` in its defaults:
    `check(parser, args)` runs at parse time, before anything starts."""
    p = argparse.ArgumentParser(prog="teamdesk",
                                description=description or __doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for add in commands:
        add(sub)
    return p


def main(argv: Sequence[str] | None = None, *, commands: Sequence[AddCommand] | None = None,
         description: str | None = None, resolve_settings: SettingsResolver | None = None,
         ) -> int:
    """The `teamdesk` command. `commands` and `description` make its parser
    (`build_parser`); `resolve_settings` gives each command its servers (default: the
    environment's URLs, `settings_from_env`). Everything else is on the command line: a
    worker with parts other than the product's is a lab's entry point, which calls
    `runner.worker_main` itself (`labs.worker_entry`)."""
    parser = build_parser(commands or PRODUCT_COMMANDS, description=description)
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)
    if check is not None:
        check(parser, args)
    func = args.func
    try:
        return func(args, resolve_settings or settings_from_env)
    except (TeamDeskError, ValueError) as err:
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
