"""The `teamdesk` command.

    teamdesk services up|down|status   the embedded PostgreSQL + Redis
    teamdesk db upgrade                 migrate the database to the latest schema
    teamdesk seed                       demo team, members, tickets (deterministic)
    teamdesk lab                        services + schema + demo data, then JupyterLab
    teamdesk copies [--lang] [--fresh]  your own copies of the notebooks, no JupyterLab
    teamdesk tasks                      the task ledger as a table
    teamdesk worker                     the worker process: task worker + dispatch tick
    teamdesk rules [ID ...] [--lang]    the contract's rules: code, tests, notebooks
    teamdesk slides [NOTEBOOK ...]      a notebook's slides, offline, from its stored run
    teamdesk classroom add|remove|cleanup|list   learners on shared class servers

The product's own commands (`db`, `seed`, `tasks`, `worker`) are `teamdesk.cli`'s; this
module adds the dev environment's (`services`, `lab`, `copies`, `rules`, `editions`,
`slides`, `classroom`) and gives every command the embedded default: with `DATABASE_URL`/`REDIS_URL`
unset, the servers are started (or reused) and kept alive while the command runs. The
`teamdesk` console script is composed one room up, where the lab's commands are visible too
(`labs.command`: `demo`, `preflight`).

Errors a user can act on are printed as one line and exit 2; no stack traces.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from devkit import i18n, services
from devkit.lab import add_copies, add_lab
from teamdesk import cli as product
from teamdesk.config import Settings
from teamdesk.redaction import redact, redact_text


def embedded_settings() -> Settings:
    """Resolved settings; with the embedded default this process becomes an owner."""
    return services.resolve_settings(owner_pid=os.getpid())


# ---------------------------------------------------------------- services

def cmd_services(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """`teamdesk services up|down|status`: exit 1 from `status` when they are not running."""
    if args.action == "up":
        env = Settings.from_env()
        if env.database_url and env.redis_url:
            print("DATABASE_URL and REDIS_URL are set: using those servers, starting nothing.")
            return 0
        urls = services.ensure_services(keep=True)
        root = services.data_dir()
        # S2: never print a password; it is in the data folder, readable by you alone (S1).
        print(f"PostgreSQL  {redact(urls.database_url)}")
        print(f"Redis       {redact(urls.redis_url)}")
        print(f"data folder {root}  (passwords: pg_password, redis_password)")
        print("They keep running until `teamdesk services down`.")
        return 0
    if args.action == "down":
        was = services.stop_services()
        print("stopped PostgreSQL and Redis" if was else "nothing was running")
        return 0
    info = services.status()  # URLs come back redacted (S2)
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


def add_services(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("services", help="embedded PostgreSQL + Redis")
    s.add_argument("action", choices=["up", "down", "status"])
    s.set_defaults(func=cmd_services)


# ---------------------------------------------------------------- rules

def cmd_rules(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """The rules of RULES.md with their places, computed from the sources (no services
    needed), in `--lang`'s texts and words (default: the edition's, `devkit.i18n.lang()`;
    `zh` reads RULES.zh-CN.md). Exit 1 names the rules no test cites: a rule nobody proves
    is a gap."""
    from devkit import rules

    lang = args.lang or i18n.lang()
    root = Path(args.root).resolve() if args.root else rules.PROJECT_ROOT
    reports = rules.index(root, lang)
    chosen = rules.select(args.ids, reports, lang) if args.ids else list(reports.values())
    if args.ids:
        print("\n\n".join(r.text() for r in chosen))
    else:
        print(rules.table_text(rules.table(chosen, lang)))
    missing = rules.untested({r.rule.id: r for r in chosen})
    if missing:
        print("\n" + i18n.say("cli.rules.untested", "no test cites {count} rule(s): {ids}",
                              count=len(missing), ids=i18n.listing(missing, lang=lang),
                              lang=lang))
        return 1
    if not args.ids:
        print("\n" + i18n.say("cli.rules.all-tested", "every one of the {count} rules is cited "
                              "by at least one test", count=len(chosen), lang=lang))
    return 0


def add_rules(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("rules", help="the contract's rules: where each lives, proven, shown")
    r.add_argument("ids", nargs="*", metavar="ID", help="rule ids (default: a table of all)")
    r.add_argument("--root", help="project checkout to scan (default: this package's)")
    r.add_argument("--lang", choices=["zh", "en"],
                   help="zh: the texts of RULES.zh-CN.md and Chinese words; en: RULES.md "
                        "(default: the edition's — TEAMDESK_LANG, else a folder named zh, "
                        "else en)")
    r.set_defaults(func=cmd_rules)


# ---------------------------------------------------------------- editions

def cmd_editions(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """`teamdesk editions`: build the 中文 edition (`notebooks/zh/`) from the notebooks and
    their catalogues (`devkit.editions`); `--draft NAME` writes a catalogue to translate.
    Exit 1 when an edition is not whole (a cell untranslated, stale or changing code)."""
    from devkit import editions
    from devkit.lab import project_dir

    root = project_dir()
    if args.draft:
        print(f"wrote {editions.draft(root, args.draft).relative_to(root)}")
        return 0
    builds = editions.build_all(root)
    for name, built in builds.items():
        print(f"notebooks/zh/{name}.ipynb" + ("" if not built.problems else
              "  ✗ " + "; ".join(built.problems)))
    return 1 if any(b.problems for b in builds.values()) else 0


def add_editions(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = sub.add_parser("editions", help="build the 中文 edition of the notebooks")
    e.add_argument("--draft", metavar="NAME", help="write NAME's catalogue for a translator")
    e.set_defaults(func=cmd_editions)


# ---------------------------------------------------------------- slides

def cmd_slides(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """`teamdesk slides [NAME ...]`: each notebook's slides from its stored run, one HTML
    file that works offline (`devkit.slides`); no services needed."""
    import time

    from devkit import slides
    from devkit.lab import project_dir

    root = Path(args.root).resolve() if args.root else project_dir()
    out = Path(args.out).resolve() if args.out else None
    for notebook in slides.resolve(root, args.names, args.lang):
        print(f"building {notebook.relative_to(root)} …", flush=True)
        started = time.monotonic()
        deck = slides.build(root, notebook, out)
        where = deck.html.relative_to(root) if deck.html.is_relative_to(root) else deck.html
        print(f"✓ {where}  {deck.slides} slides, {deck.pages} pages, {deck.notes} speaker "
              f"notes (key S); {deck.html.stat().st_size / 1e6:.1f} MB, self-contained, "
              f"{time.monotonic() - started:.1f} s")
        if not deck.outputs:
            print("  this edition stores no run: prose and code without outputs (the "
                  "English deck, `--lang en`, shows the stored run)")
    print("open a deck in any browser, offline too: arrows move, S opens the speaker "
          "notes, F goes full screen")
    return 0


def add_slides(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("slides", help="slides of a notebook's stored run: one HTML file that "
                       "works offline (the fallback when live servers fail)")
    s.add_argument("names", nargs="*", metavar="NOTEBOOK",
                   help="e.g. 26b (default: every notebook with slides: 26b, 26c, 26d)")
    s.add_argument("--lang", choices=i18n.LANGS, default="en",
                   help="the edition (default en, whose notebooks store the run; zh: prose "
                        "and code of the 中文 edition, no outputs)")
    s.add_argument("--out", help="folder for the decks (default build/slides/[zh/])")
    s.add_argument("--root", help="project checkout (default: this package's)")
    s.set_defaults(func=cmd_slides)


# ---------------------------------------------------------------- classroom

def _admin_urls(args: argparse.Namespace) -> tuple[str, str]:
    db = args.admin_database_url or os.environ.get("TEAMDESK_ADMIN_DATABASE_URL")
    rd = args.admin_redis_url or os.environ.get("TEAMDESK_ADMIN_REDIS_URL")
    missing = [name for name, value in (("--admin-database-url / TEAMDESK_ADMIN_DATABASE_URL",
                                         db), ("--admin-redis-url / TEAMDESK_ADMIN_REDIS_URL",
                                               rd)) if not value]
    if missing:
        raise ValueError(f"the class servers' administrator URLs are needed: "
                         f"{' and '.join(missing)}")
    return db, rd  # type: ignore[return-value]


def cmd_classroom(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """`teamdesk classroom …`: learners on shared class servers (`devkit.classroom`). Never
    the embedded servers: the administrator's URLs are given."""
    from devkit import classroom

    db, rd = _admin_urls(args)
    if args.action == "add":
        made = classroom.provision(db, rd, args.names, connection_limit=args.connection_limit)
        for one in made:  # S2: passwords never on the terminal
            print(f"{one.name:<16} {redact(one.database_url)}  {redact(one.redis_url)}  "
                  f"TEAMDESK_QUEUE_PREFIX={one.queue_prefix}")
        if args.env_dir:
            folder = Path(args.env_dir)
            services.make_private_dir(folder)
            for one in made:
                services.write_private(folder / f"{one.name}.env", "".join(
                    f"{k}={v}\n" for k, v in one.environment().items()))
            print(f"each learner's variables: {folder}/<name>.env (readable by you alone)")
        else:
            print(f"passwords are derived from the class secret ({classroom.secret_file()}); "
                  "--env-dir DIR writes each learner's variables to DIR/<name>.env")
        return 0
    if args.action == "list":
        rows = classroom.states(db, rd)
        print(f"{'learner':<16} {'conn/limit':>10} {'lab dbs':>8} {'keys':>6}  redis user")
        for r in rows:
            print(f"{r.name:<16} {f'{r.connections}/{r.connection_limit}':>10} "
                  f"{r.lab_databases:>8} {r.keys:>6}  {'yes' if r.redis_user else 'no'}")
        print(f"{len(rows)} learner(s)")
        return 0
    if args.action == "remove" and not args.names:
        raise ValueError("name the learners to remove (`teamdesk classroom remove NAME…`)")
    act = classroom.remove if args.action == "remove" else classroom.cleanup
    report = act(db, rd, args.names or None)
    for r in report:
        print(r.text())
    print(f"{args.action}: {len(report)} learner(s), "
          f"{sum(len(r.databases) for r in report)} database(s), "
          f"{sum(r.keys for r in report)} key(s)")
    return 0


def add_classroom(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from devkit.classroom import CONNECTION_LIMIT

    c = sub.add_parser("classroom", help="learners on shared class servers (an instructor's)")
    c.add_argument("action", choices=["add", "remove", "cleanup", "list"],
                   help="add: provision (again) each learner's role, database, template and "
                        "Redis user; remove: drop them whole; cleanup: drop their lab "
                        "databases and keys (default: every learner); list: the learners")
    c.add_argument("names", nargs="*", metavar="NAME", help="learner names")
    c.add_argument("--admin-database-url", help="a PostgreSQL superuser's URL "
                   "(default: TEAMDESK_ADMIN_DATABASE_URL)")
    c.add_argument("--admin-redis-url", help="a Redis URL allowed ACL, SCAN and UNLINK "
                   "(default: TEAMDESK_ADMIN_REDIS_URL)")
    c.add_argument("--connection-limit", type=int, default=CONNECTION_LIMIT,
                   help=f"PostgreSQL connections per learner (default {CONNECTION_LIMIT})")
    c.add_argument("--env-dir", help="add: write each learner's DATABASE_URL, REDIS_URL and "
                   "TEAMDESK_QUEUE_PREFIX to DIR/<name>.env (0600)")
    c.set_defaults(func=cmd_classroom, check=_names_for_add)


def _names_for_add(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.action == "add" and not args.names:
        parser.error("classroom add needs at least one NAME")


# ---------------------------------------------------------------- main

#: The dev environment's commands with the product's, in the order `--help` lists them.
COMMANDS: tuple[product.AddCommand, ...] = (
    add_services, product.add_db, product.add_seed, add_lab, add_copies, product.add_worker,
    product.add_tasks, add_rules, add_editions, add_slides, add_classroom)


def main(argv: Sequence[str] | None = None, *,
         commands: Sequence[product.AddCommand] = COMMANDS) -> int:
    """The dev environment's `teamdesk` (`python -m devkit.cli`); the console script passes
    more `commands` (`labs.command`). A command ends the owner claim it made on the
    embedded services — not one this process held before it ran (a program that calls
    `main` in-process keeps its own)."""
    held = services.registered_owner()
    try:
        return product.main(argv, commands=commands, description=__doc__.split("\n\n")[0],
                            resolve_settings=embedded_settings)
    except services.ServiceError as err:
        print(f"teamdesk: {redact_text(str(err))}", file=sys.stderr)  # S2
        return 2
    finally:
        if not held:
            services.release_owner()


if __name__ == "__main__":
    sys.exit(main())
