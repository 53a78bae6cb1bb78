"""The benchmarks' process helpers now live in `labs.procs` (the chaos notebook uses them
too, and `labs` is importable from a notebook while `benchmarks` is not); re-exported here
so `from benchmarks._procs import …` keeps working."""

from labs.procs import (
    WorkerProc,
    World,
    clear_prefix,
    stop_all,
    wait_heartbeats,
    wait_until,
    worker_env,
)

__all__ = ["WorkerProc", "World", "clear_prefix", "stop_all", "wait_heartbeats", "wait_until",
           "worker_env"]
