"""Gates at probe points, as the lab uses them: the product's kit (`teamdesk.testing`)
speaking the learner's language when a wait runs out.

    gate = Gate("export.after_read", actor="A")      # installed at once
    ctx = await gate.reached()                        # A is now paused there
    ...                                               # B takes over, inspect the ledger
    gate.release()                                    # or gate.release(raising=OSError("late"))

Labs use a gate's `observer` to put its pauses into their history.
"""

from __future__ import annotations

from labs.i18n import say
from teamdesk import testing
from teamdesk.testing import DEFAULT_TIMEOUT_S, Fault, GateTimeout, Observer

__all__ = ["DEFAULT_TIMEOUT_S", "Fault", "Gate", "GateTimeout", "Observer"]


class Gate(testing.Gate):
    """`teamdesk.testing.Gate`, its timeouts worded in the edition's language."""

    def _timeout_message(self, event: str, bound: float) -> str:
        if event == "reached":
            return say("gates.timeout.never-reached", "{gate!r} was never reached within {bound:g} "
                       "s", gate=self, bound=bound)
        return say("gates.timeout.never-left", "{gate!r} was not left within {bound:g} s",
                   gate=self, bound=bound)
