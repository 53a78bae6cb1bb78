"""A `teamdesk worker` process whose shutdown is a learner's drain — notebook 30's
exercise, for one judged run only.

    python -m labs.drain_worker <drain.py> worker --name w1 ...

`<drain.py>` defines the drain (`async def …(stopping) -> int`, a
`teamdesk.tasks.runner.Drain`) and names it `DRAIN = …`; `EXIT_DRAIN_TIMEOUT` is already
bound for it. This entry point runs the ordinary `teamdesk` command line with the remaining
arguments and passes the drain through the product's seam (`teamdesk.cli.main(argv,
drain=...)` → `run_worker_process`, W4): nothing of the product is rebound, and every
other step of the process is the product's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from teamdesk.tasks.runner import EXIT_DRAIN_TIMEOUT, Drain


def load_drain(path: Path) -> Drain:
    """The drain `DRAIN` that the file at `path` defines."""
    namespace: dict[str, object] = {"EXIT_DRAIN_TIMEOUT": EXIT_DRAIN_TIMEOUT}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    drain = namespace.get("DRAIN")
    if not callable(drain):
        raise ValueError(f"{path} defines no DRAIN")
    return drain  # type: ignore[return-value]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "worker":
        print("usage: python -m labs.drain_worker <drain.py> worker [teamdesk worker options]",
              file=sys.stderr)
        return 2
    from teamdesk.cli import main as teamdesk_main

    return teamdesk_main(argv[1:], drain=load_drain(Path(argv[0])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
