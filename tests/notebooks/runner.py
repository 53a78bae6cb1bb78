"""Execute a notebook's code cells in any order, in one kernel, the way a presenter does.

    python -m tests.notebooks.runner notebooks/26b-takeover-race.ipynb twice
    python -m tests.notebooks.runner notebooks/26b-takeover-race.ipynb 1,3,3,5,3,reset,5,7

`twice` runs every code cell twice in a row, then Run All again (the re-run test);
otherwise the order is a comma-separated list of code-cell numbers (0 = the first code
cell) or names: `reset` is the notebook's "start over" cell (tagged `start-over`), `all`
a full Run All; any other string is the source of a cell of the caller's own, run there.
A cell tagged `raises-exception` may raise (as nbval allows); any other error stops the
run with a one-line `CellFailed` naming the cell and the step order.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

CELL_TIMEOUT_S = 120


class CellFailed(AssertionError):
    """A code cell raised although it is not tagged `raises-exception`."""


@dataclass
class Run:
    path: Path
    #: (code-cell number, seconds) of every execution, in order.
    executed: list[tuple[int, float]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.executed)


def _code_cells(nb: nbformat.NotebookNode) -> list[tuple[int, nbformat.NotebookNode]]:
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def twice_then_all(n: int) -> list[int | str]:
    """Every code cell twice in a row, then Run All again."""
    return [k for k in range(n) for _ in range(2)] + ["all"]


def _expand(order: list[int | str], cells: list[tuple[int, nbformat.NotebookNode]]
            ) -> list[int | str]:
    out: list[int | str] = []
    for step in order:
        if step == "all":
            out.extend(range(len(cells)))
        elif step == "reset":
            tagged = [k for k, (_, c) in enumerate(cells)
                      if "start-over" in c.metadata.get("tags", [])]
            if not tagged:
                raise ValueError("this notebook has no cell tagged 'start-over'")
            out.append(tagged[0])
        elif isinstance(step, str) and not step.isdigit():
            out.append(step)  # a cell of the test's own: its source
        else:
            out.append(int(step))
    return out


async def run_notebook(path: str | Path, order: list[int | str] | None = None,
                       *, echo: bool = False) -> Run:
    """Run `path`'s code cells in `order` (default: `twice_then_all`) in one fresh kernel."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    cells = _code_cells(nb)
    steps = _expand(order or twice_then_all(len(cells)), cells)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    run = Run(path)
    async with client.async_setup_kernel():
        for n, k in enumerate(steps):
            if isinstance(k, str):  # the test's own cell, run like a typed-in cell
                nb.cells.append(nbformat.v4.new_code_cell(k))
                index, cell = len(nb.cells) - 1, nb.cells[-1]
            else:
                index, cell = cells[k]
            started = time.monotonic()
            try:
                await client.async_execute_cell(cell, index)
            except CellExecutionError as err:
                first = str(err).strip().splitlines()
                tail = next((line for line in reversed(first) if line.strip()), "")
                raise CellFailed(
                    f"{path.name}: code cell {k} (notebook cell {index}, execution {n + 1} of "
                    f"order {steps[:n + 1]}) raised: {tail}") from None
            run.executed.append((k, time.monotonic() - started))
            if echo:
                print(f"{path.name} cell {k:>2} ({index:>2}) {run.executed[-1][1]:6.2f} s",
                      flush=True)
    return run


def _parse(arg: str, n: int) -> list[int | str]:
    if arg == "twice":
        return twice_then_all(n)
    return [s if s in ("reset", "all") else int(s) for s in arg.split(",")]


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    nb = nbformat.read(path, as_version=4)
    order = _parse(argv[1] if len(argv) > 1 else "twice", len(_code_cells(nb)))
    try:
        run = asyncio.run(run_notebook(path, order, echo=True))
    except CellFailed as err:
        print(f"CellFailed: {err}")
        return 1
    print(f"{path.name}: {len(run.executed)} executions, {run.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
