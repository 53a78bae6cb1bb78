"""The `teamdesk` console script, composed in the top room, where every room is visible.

    teamdesk services up|down|status   the embedded PostgreSQL + Redis       (devkit)
    teamdesk db upgrade                 migrate the database to the latest schema
    teamdesk seed                       demo team, members, tickets (deterministic)
    teamdesk lab                        services + schema + demo data, then JupyterLab
    teamdesk copies [--lang] [--fresh]  your own copies of the notebooks, no JupyterLab
    teamdesk worker                     the worker process: task worker + dispatch tick
    teamdesk demo race                  the takeover race, narrated in the terminal (labs)
    teamdesk tasks                      the task ledger as a table
    teamdesk rules [ID ...] [--lang]    the contract's rules: code, tests, notebooks
    teamdesk editions [--draft NAME]    build the Chinese edition of the notebooks
    teamdesk messages                   rewrite the lab's message catalogues for a translator
    teamdesk slides [NOTEBOOK ...]      a notebook's slides, offline, from its stored run
    teamdesk preflight [--learners N]   the instructor's check the evening before (labs)
    teamdesk classroom add|remove|cleanup|list   learners on shared class servers (devkit)

The product's commands are `teamdesk.cli`'s, the dev environment's `devkit.cli`'s (with the
embedded default for every command); this module adds the lab's own, `demo`, which runs
the race the notebooks run (`labs.races`). So no lower room has to reach up: the demo is
no copy of the race with gates of its own. `preflight` is here for the same reason: it
runs that race once, and finds the figures' CJK font (`labs.fonts`). `messages` is here
because the harness's catalogue holds the words of the diagnosis cases (`labs.cases`) too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from devkit import cli as dev
from teamdesk import cli as product


def cmd_demo(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """`teamdesk demo race`: the takeover race narrated in the terminal (`labs.demo`)."""
    import logging

    from labs.demo import run_race_demo

    # The narration says what happened (with the log line that matters, from the lab's
    # log): the product's own log lines would interleave with it on the terminal.
    logging.getLogger().addHandler(logging.NullHandler())
    return asyncio.run(run_race_demo(resolve(), pause=args.pause))


def _pause_needs_a_terminal(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.pause and not sys.stdin.isatty():
        # It waits for Enter between steps: without a terminal that is an EOFError later.
        parser.error("--pause needs a terminal on stdin (it waits for Enter between steps)")


def add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dm = sub.add_parser("demo", help="live demos for a class")
    dm.add_argument("which", choices=["race"])
    dm.add_argument("--pause", action="store_true",
                    help="wait for Enter between steps (for narrating live)")
    dm.set_defaults(func=cmd_demo, check=_pause_needs_a_terminal)


def cmd_preflight(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """`teamdesk preflight`: the instructor's checklist the evening before
    (`labs.preflight`); exit 1 when any check fails."""
    import logging
    import time

    from devkit.jupyter_settings import lab_lang
    from labs import preflight

    # The race's own log lines would interleave with the checklist (as for `demo`).
    logging.getLogger().addHandler(logging.NullHandler())
    lang = args.lang or lab_lang(os.environ)
    print(f"teamdesk preflight: this machine, for {args.learners} learner(s), the "
          f"{'Chinese' if lang == 'zh' else 'English'} edition", flush=True)
    started = time.monotonic()
    checks = preflight.run(resolve, learners=args.learners, lang=lang, port=args.port,
                           emit=lambda line: print(line, flush=True))
    print(preflight.summary(checks, time.monotonic() - started))
    return 0 if all(c.ok for c in checks) else 1


#: `--learners`: the product's parser for a bounded number (a one-line usage error).
_LEARNERS = product.number(int, 1, "a number of learners from 1 to 1000", 1000)


def add_preflight(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from devkit import i18n

    pf = sub.add_parser("preflight", help="the instructor's check the evening before: "
                        "servers, kernel, fonts, port, the race, room for N learners")
    pf.add_argument("--learners", type=_LEARNERS, default=1, metavar="N",
                    help="size connections and memory for N learners (default 1: this "
                         "laptop alone)")
    pf.add_argument("--lang", choices=i18n.LANGS,
                    help="the edition the class uses (zh adds the browser's Chinese font); "
                         "default as for `teamdesk lab`")
    pf.add_argument("--port", type=product.PORT,
                    help="the lab's port, if you will pass one to `teamdesk lab`")
    pf.set_defaults(func=cmd_preflight)


def cmd_messages(args: argparse.Namespace, resolve: product.SettingsResolver) -> int:
    """`teamdesk messages`: rewrite `labs/i18n/zh.md` and `devkit/i18n/zh.md` from the
    sources (`devkit.i18n.draft`): fresh translations kept, new and changed English marked
    ` todo` for a translator, unused blocks dropped. Exit 1 while a block is a draft."""
    from devkit import i18n
    from devkit.lab import project_dir
    from labs.messages import made

    root = project_dir()
    drafts = 0
    for package, extra in (("labs", made()), ("devkit", [])):
        path = i18n.draft(root / package, extra)
        todo = [m.key for m in i18n.parse_catalogue(path.read_text(encoding="utf-8")).values()
                if m.todo]
        drafts += len(todo)
        print(f"wrote {path.relative_to(root)}" + (f"  ✗ to translate: {', '.join(todo)}"
                                                  if todo else ""))
    return 1 if drafts else 0


def add_messages(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("messages", help="rewrite the lab's message catalogues for a translator")
    m.set_defaults(func=cmd_messages)


#: Every command, in the order `--help` lists them: the lab's `demo` after `worker`, its
#: `messages` after `editions`, `preflight` after `slides`.
_AFTER = {product.add_worker: add_demo, dev.add_editions: add_messages,
          dev.add_slides: add_preflight}
COMMANDS: tuple[product.AddCommand, ...] = tuple(
    c for add in dev.COMMANDS for c in ((add, _AFTER[add]) if add in _AFTER else (add,)))


def main(argv: Sequence[str] | None = None) -> int:
    """The `teamdesk` command (the console script)."""
    return dev.main(argv, commands=COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
