"""Named checkpoints that executors announce; a no-op unless a lab or test installs a probe.

This is how races become deterministic without sleeps, and how the real code shows where
faults can strike (FoundationDB's BUGGIFY, made explicit). A probe handler is an async
callable `handler(point, context)`; it may wait (pause the executor at that point) or
raise (inject a fault there). `context` always carries `task_id` and `run`, and
`execution_id` once the lease is claimed.

Points announced (keep this list in step with the code; `POINTS` is checked by a test):

- `claim.before`                — about to run the claim UPDATE (P2).
- `claim.after`                 — the claim committed; `execution_id` is the new lease.
- `export.after_read`           — a batch of tickets read, before its progress write (P4).
- `export.after_progress`       — a batch's progress written to ledger and queue.
- `export.before_result`        — final authorization re-checked, before the result write (P5).
- `export.after_result`         — result committed, before `update_progress(100)` (P9).
- `reminder.after_lease_check`  — inside the team-locked transaction, eligibility read (P10).
- `reminder.after_event`        — notification, version and event written, before completion.
- `reminder.after_completion`   — the lease-conditioned completion UPDATE matched, inside
                                  the reminder's transaction, before commit (P10, P12).
- `error.before_write`          — an error is about to be reported with the lease (P7).
- `dispatch.before_add`         — the dispatcher is about to add a job (D2).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

ProbeHandler = Callable[[str, dict[str, Any]], Awaitable[None]]

POINTS: tuple[str, ...] = (
    "claim.before",
    "claim.after",
    "export.after_read",
    "export.after_progress",
    "export.before_result",
    "export.after_result",
    "reminder.after_lease_check",
    "reminder.after_event",
    "reminder.after_completion",
    "error.before_write",
    "dispatch.before_add",
)

_POINT_SET = frozenset(POINTS)

_handlers: list[ProbeHandler] = []


async def announce(point: str, **context: Any) -> None:
    """Called by the product at a checkpoint. Does nothing unless a probe is installed:
    with none (production), one set lookup and no copy of the handler list, so probes cost
    nothing on the hot path."""
    if point not in _POINT_SET:  # a typo would silently make a gate unreachable
        raise ValueError(f"unknown probe point {point!r}")
    if _handlers:
        for handler in tuple(_handlers):
            await handler(point, context)


def install(handler: ProbeHandler) -> Callable[[], None]:
    """Install a probe handler; returns the function that removes it."""
    _handlers.append(handler)

    def uninstall() -> None:
        with contextlib.suppress(ValueError):
            _handlers.remove(handler)

    return uninstall


@contextlib.contextmanager
def installed(handler: ProbeHandler) -> Iterator[None]:
    """`with probes.installed(handler): ...` — removed on exit, even on error."""
    uninstall = install(handler)
    try:
        yield
    finally:
        uninstall()


# ------------------------------------------------------------ holds across processes

HOLD_ENV = "TEAMDESK_PROBE_HOLD"


def install_hold_from_env(environ: dict[str, str] | None = None) -> Callable[[], None] | None:
    """Pause a *separate process* at a probe point: for tests and live demos of the worker
    process (SIGTERM during an export, kill -9 mid-export), where an in-process gate
    cannot reach.

    `TEAMDESK_PROBE_HOLD=<point>:<folder>` makes the first crossing of `<point>` create
    `<folder>/reached` (holding the probe context as text) and wait until
    `<folder>/release` exists. Returns the uninstall function, or None when unset.
    """
    import asyncio
    import json
    import os
    from pathlib import Path

    spec = (environ if environ is not None else os.environ).get(HOLD_ENV)
    if not spec:
        return None
    point, _, folder = spec.partition(":")
    if point not in POINTS or not folder:
        raise ValueError(f"{HOLD_ENV} must be '<point>:<folder>' with a known point, "
                         f"not {spec!r}")
    root = Path(folder)
    state = {"held": False}

    async def hold(crossed: str, context: dict[str, Any]) -> None:
        if crossed != point or state["held"]:
            return
        state["held"] = True
        # Tiny local file operations; the release comes from another process, so a file
        # poll is the sync point here (no Event can cross the process boundary).
        root.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
        # Whole or not at all: the other process polls for this file and reads it.
        tmp = root / "reached.tmp"
        tmp.write_text(json.dumps(context, default=str))
        os.replace(tmp, root / "reached")
        while not (root / "release").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    return install(hold)
