"""Every scene of a race notebook entered directly, and gone back to: the exhaustive form
of `test_rewind.py`, too slow for every test run (each entry replays the steps before it),
so run by hand when a race notebook's steps change:

    .venv/bin/python -m tests.notebooks.rewind_all notebooks/26b-takeover-race.ipynb

Per step: a fresh kernel runs the set-up cells and then the step's scene (its predictions,
the step cell, its reveals and checks); then, in the same kernel, `go_to` the first step
and run its scene. Prints one line per step and exits 1 on the first failure.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from labs.rewind import MARKER
from tests.notebooks.runner import CellFailed, run_notebook
from tests.notebooks.test_rewind import _code_cells, _scene


async def main(path: Path) -> int:
    code = _code_cells(path)
    start = next(i for i, (_, tags) in enumerate(code) if "start-over" in tags)
    steps = [m["name"] for src, _ in code if (m := MARKER.match(src.split("\n", 1)[0]))]
    for step in steps:
        order = [*range(start + 1), *_scene(code, step),
                 f"assert lab.stage.is_done({step!r})",
                 f"await lab.stage.go_to({steps[0]!r})", *_scene(code, steps[0])]
        began = time.monotonic()
        try:
            await run_notebook(path, order)
        except CellFailed as err:
            print(f"FAILED {step}: {err}")
            return 1
        print(f"ok {time.monotonic() - began:5.1f} s  {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1]))))
