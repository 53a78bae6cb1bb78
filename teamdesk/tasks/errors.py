"""Errors of task execution and the fixed, readable `last_error` texts (P7, P8).

`last_error` never carries a stack trace or raw driver text: it is one of the fixed texts
below, which tell a permanent rejection (waiting will not fix it: create a new task) from
a retryable failure (the queue will try again, or a manual retry may).
"""

from __future__ import annotations

import enum


class RejectReason(enum.StrEnum):
    #: The stored filters no longer validate.
    INVALID_FILTERS = "invalid_filters"
    #: The owner left the team, or lost the staff role a team-wide export needs.
    ACCESS_LOST = "access_lost"
    #: The filters now match more tickets than the export limit.
    TOO_LARGE = "too_large"
    #: The task's type has no executor (`processor.EXECUTORS`) in this worker.
    UNKNOWN_TYPE = "unknown_type"


_REJECT_TEXT = {
    RejectReason.INVALID_FILTERS: "Rejected: the export's filters are no longer valid. "
                                  "Create a new export with valid filters.",
    RejectReason.ACCESS_LOST: "Rejected: the requester no longer has access to these tickets. "
                              "Retrying will not help.",
    RejectReason.TOO_LARGE: "Rejected: the export matches more tickets than the export limit. "
                            "Create a new, narrower export.",
    RejectReason.UNKNOWN_TYPE: "Rejected: this kind of task has no executor in this worker. "
                               "Retrying will not help.",
}


class TaskRejected(Exception):
    """A condition that waiting will not fix: permission change, invalid filters, export
    over the limit, a task type with no executor (P8). The processor writes FAILED and ends
    the job for good."""

    def __init__(self, reason: RejectReason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail

    @property
    def last_error(self) -> str:
        return _REJECT_TEXT[self.reason]


def retryable_error_text(attempt: int, max_attempts: int, final: bool) -> str:
    """The fixed text for an ordinary error: same-run retry coming, or attempts used up."""
    if final:
        return (f"Failed {attempt} of {max_attempts} attempts with a temporary error. "
                "Use Retry to start a new round.")
    return (f"Attempt {attempt} of {max_attempts} failed with a temporary error; "
            "retrying automatically.")
