"""Errors a caller can act on. Each has a readable message and writes nothing (the service
that raises it rolls its transaction back)."""

from __future__ import annotations


class TeamDeskError(Exception):
    """Base of every error the services raise on bad input or missing rights."""


class NotFound(TeamDeskError):
    """No such team, ticket or task visible to the caller (another team's ids included)."""


class PermissionDenied(TeamDeskError):
    """The caller is not a member, or their role/scope does not allow the action."""


class OwnerAccessLost(PermissionDenied):
    """A team-wide export's owner (its creator) is no longer staff of the team — demoted
    or gone — so a retry would only be rejected again by the executor (R1, R4)."""


class InvalidFilters(TeamDeskError):
    """Export filters of the wrong type, unknown keys, an inverted date range, oversized text."""


class InvalidInput(TeamDeskError):
    """A field other than filters is malformed (empty title, unknown role, …)."""


class ExportTooLarge(TeamDeskError):
    """The filters match more tickets than the export limit; narrow them (R4)."""


class NotRetryable(TeamDeskError):
    """Only a FAILED task can be retried (R1)."""


class ExportNotReady(TeamDeskError):
    """The export has not completed (yet): "accepted" is not "done" (O4, R3)."""


class ExportExpired(TeamDeskError):
    """The export's 24 h lifetime is over; checked at download even before the purge (X2, D7)."""
