"""The live board in a real kernel: it updates its one output in place
while a worker moves the task, and no update lands in a later cell's output."""

from __future__ import annotations

import queue
import time

import pytest
from jupyter_client.manager import start_new_async_kernel

SETUP = """
import asyncio
from labs import tables
from labs.board import live
from labs.lab import Lab

lab = await Lab.open("live-board-test", tickets=30)
task = await lab.request_export({"status": ["OPEN"]})
gate = lab.gate("export.after_read")
await lab.start_worker("W")
await lab.dispatch()
await gate.reached(8)


async def board():
    return tables.show((await tables.ledger_vs_queue(lab))[["status", "state", "verdict"]])
"""
SHOW = """
asyncio.get_running_loop().call_later(1.0, gate.release)  # the worker moves after the cell
await live(lab, board)
"""


async def _run(kc, code: str) -> str:
    msg_id = kc.execute(code)
    reply = await kc.get_shell_msg(timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    return msg_id


async def _iopub(kc, seconds: float, until=lambda msgs: False) -> list[dict]:
    """The kernel's messages for `seconds`, or until `until(messages)` holds (then the
    bound only detects an update that never came)."""
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end and not until(out):
        try:
            out.append(await kc.get_iopub_msg(timeout=max(0.05, end - time.monotonic())))
        except (TimeoutError, queue.Empty):
            break
    return out


def _completed(msgs: list[dict]) -> bool:
    return any(m["msg_type"] == "update_display_data"
               and "COMPLETED" in m["content"]["data"].get("text/plain", "") for m in msgs)


@pytest.mark.integration
async def test_live_board_updates_in_place_and_stops_at_the_next_cell():
    km, kc = await start_new_async_kernel(kernel_name="python3")
    try:
        await _run(kc, SETUP)
        shown = await _run(kc, SHOW)
        msgs = await _iopub(kc, 30, until=_completed)
        updates = [m for m in msgs if m["msg_type"] == "update_display_data"]
        assert updates, "the board never updated while the worker finished the export"
        assert all(m["parent_header"]["msg_id"] == shown for m in updates)
        assert "COMPLETED" in updates[-1]["content"]["data"]["text/plain"]
        later = await _run(kc, "await lab.close()")
        msgs = await _iopub(kc, 1.5)
        assert not [m for m in msgs if m["msg_type"] == "update_display_data"
                    and m["parent_header"].get("msg_id") == later]
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
