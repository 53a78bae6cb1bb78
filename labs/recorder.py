"""Worker events, as the lab collects them: the product's kit (`teamdesk.testing.Recorder`)
speaking the learner's language when a wait runs out. A lab's error list and history
`subscribe` to it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.i18n import say
from teamdesk import testing

__all__ = ["Recorder"]


class Recorder(testing.Recorder):
    """`teamdesk.testing.Recorder`, its timeouts worded in the edition's language."""

    def _missing_message(self, kind: str, match: Mapping[str, Any], timeout: float,
                         seen: list[tuple[str, Any]]) -> str:
        match = dict(match)
        return say("recorder.timeout", "no {kind!r} event matching {match} within "
                   "{timeout:g} s; saw {seen}", kind=kind, match=match, timeout=timeout, seen=seen)
