"""A live board: one notebook output that updates in place while workers run.

    await board.live(lab, render)     # the last line of a step cell

shows `await render()` (e.g. the ledger next to the queue with its verdict column,
`labs.tables.ledger_vs_queue`) as one output with an IPython display id, then refreshes
that same output about twice a second, so an instructor can narrate while the race moves.
It stops — leaving its last state as the cell's output — when:

- the next cell starts running (IPython's `pre_run_cell`), or the next step begins;
- the lab closes, or it has no worker left to watch;
- `MAX_S` seconds passed (a forgotten board never runs forever).

Why it stops at the next cell: a display update sent from the background while another
cell runs is attributed by the kernel to *that* cell, so a headless run (nbval, nbclient)
would store it in the wrong output. Stopping before the next cell's code runs (and never
updating once the kernel's current request changed) keeps stored outputs deterministic:
a cell's output is the board as the step left it. Outside IPython `live` just returns the
table.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labs.lab import Lab

#: Seconds between two refreshes, and the longest a board keeps refreshing.
INTERVAL_S = 0.5
MAX_S = 300.0

_LIVE: list[_Board] = []
_HOOKED: set[int] = set()


class _Board:
    def __init__(self, lab: Lab, render: Callable[[], Awaitable[Any]], shell: Any) -> None:
        self.lab, self.render, self.shell = lab, render, shell
        self.parent = getattr(shell, "parent_header", None)
        self.handle: Any = None
        self.task: asyncio.Task[None] | None = None
        self.text = ""

    def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self in _LIVE:
            _LIVE.remove(self)

    def _current(self) -> bool:
        """Still the kernel request this board was shown in (no later cell started)."""
        return getattr(self.shell, "parent_header", None) is self.parent

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + MAX_S
        try:
            while loop.time() < end and not self.lab.closed and self.lab.workers:
                await asyncio.sleep(INTERVAL_S)
                if self.lab.closed or not self._current():
                    return
                frame = await _call(self.render)
                if not self._current() or self.lab.closed:
                    return
                text = repr(frame)
                if text != self.text:  # only send what changed
                    self.text = text
                    self.handle.update(frame)
        except asyncio.CancelledError:
            pass
        except Exception:  # a failed refresh (Redis gone mid-outage) just ends the board
            return
        finally:
            if self in _LIVE:
                _LIVE.remove(self)


async def _call(render: Callable[[], Any]) -> Any:
    value = render()
    return await value if inspect.isawaitable(value) else value


def stop_all() -> None:
    """Stop every live board (the next cell or step starts)."""
    for board in tuple(_LIVE):
        board.stop()


def _hook(shell: Any) -> None:
    if id(shell) in _HOOKED:
        return
    _HOOKED.add(id(shell))
    shell.events.register("pre_run_cell", lambda *_: stop_all())


async def live(lab: Lab, render: Callable[[], Awaitable[Any]]) -> Any:
    """Show `await render()` as a live board of `lab` (see the module docstring).
    Returns None in a kernel (the board is already displayed), else the table."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover
        return await _call(render)
    shell = get_ipython()
    if shell is None:
        return await _call(render)
    _hook(shell)
    stop_all()
    board = _Board(lab, render, shell)
    frame = await _call(render)
    board.text = repr(frame)
    board.handle = display(frame, display_id=True)
    if lab.workers:
        _LIVE.append(board)
        hooks = getattr(getattr(lab, "stage", None), "on_begin", None)
        if hooks is not None and stop_all not in hooks:
            hooks.append(stop_all)
        board.task = asyncio.ensure_future(board._loop())
    return None
