"""The lab's worker processes: `teamdesk worker` with parts of the lab's own (`Seams`).

    python -m labs.counterexample_worker lease-less-export worker --name w1 ...
    python -m labs.drain_worker my_drain.py worker --name w1 ...
    python -m labs.chaos.worker --inflight DIR --as w1 worker --name w1 ...

Each of those entry points reads its own arguments and hands the rest here: the product's
own `worker` options, parsed by the product's parser, its settings (`DATABASE_URL`,
`REDIS_URL`, `TEAMDESK_*` in the environment) and its logging, then
`teamdesk.tasks.runner.worker_main` with the lab's `Seams`. Nothing of the product is
rebound, and the product's command line offers none of it (`teamdesk.cli`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from teamdesk import cli
from teamdesk.tasks.runner import Seams, worker_main


def run_worker(argv: Sequence[str], seams: Seams, *, prog: str) -> int:
    """Run `worker [options]` (the rest of an entry point's arguments) with `seams`; any
    other command is a usage error naming `prog`."""
    parser = cli.build_parser((cli.add_worker,), description=f"{prog}: teamdesk worker")
    parser.prog = prog
    args = parser.parse_args(argv)
    cli.configure_logging(args.log_level)
    return worker_main(functools.partial(cli.worker_settings, args, cli.settings_from_env),
                       name=args.name, seams=seams)
