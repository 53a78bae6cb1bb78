"""The chaos run's worker process: the product's `teamdesk worker`, with the lab's strike
holds and crossing history installed (`labs.chaos.holds`), and optionally one
counterexample (`labs.counterexample_worker`).

    python -m labs.chaos.worker --inflight DIR --as w1 [--counterexample NAME] \\
        worker --name w1 [teamdesk worker options]

Nothing of the product is changed or rebound: the holds and the history are a probe
handler installed through `teamdesk.probes.install` (a no-op API unless someone installs
one), and a counterexample reaches the worker through the worker process's seams
(`labs.worker_entry`, `Seams(on_worker=..., fence=...)`). Without `--counterexample` the
process runs the product's processor, listeners and fence unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labs import counterexample_worker
from labs.chaos import holds
from labs.worker_entry import run_worker


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.chaos.worker")
    parser.add_argument("--inflight", type=Path, required=True,
                        help="the run's folder of holds and crossing histories")
    parser.add_argument("--as", dest="name", required=True, help="this worker's name")
    parser.add_argument("--counterexample", choices=counterexample_worker.NAMES)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="`worker` and its `teamdesk worker` options")
    args = parser.parse_args(argv)
    if not args.command or args.command[0] != "worker":
        parser.error("the command after the options must be `worker …`")
    seams = counterexample_worker.seams_for(args.counterexample)
    holds.install(args.inflight, args.name)
    return run_worker(args.command, seams, prog="python -m labs.chaos.worker …")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
