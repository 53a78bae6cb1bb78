"""A `teamdesk worker` process whose shutdown is a learner's drain — notebook 30's
exercise, for one judged run only.

    python -m labs.drain_worker <drain.py> worker --name w1 ...

`<drain.py>` defines the drain (`async def …(stopping) -> int`, a
`teamdesk.tasks.runner.Drain`) and names it `DRAIN = …`; `EXIT_DRAIN_TIMEOUT` is already
bound for it. The remaining arguments are the product's `worker` options; the drain goes
through the worker process's seam (`Seams(drain=...)` → `run_worker_process`, W4, by
`labs.worker_entry`): nothing of the product is rebound, and every other step of the
process is the product's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from labs.worker_entry import run_worker
from teamdesk.tasks.runner import EXIT_DRAIN_TIMEOUT, Drain, Seams


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
    return run_worker(argv[1:], Seams(drain=load_drain(Path(argv[0]))),
                      prog="python -m labs.drain_worker <drain.py>")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
