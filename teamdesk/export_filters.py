"""What an export's filters mean: checked once, and turned into the parameters of the one
ticket query (`_export_tickets` in `tasks/queries.sql`) (X1, P8, R4).

The request counts what its filters match, and the executor later exports the rows they
match, with the same parameters from `filter_params` and the same SQL: a request and its
execution cannot disagree on a filter (`tests/integration/test_export_filters.py` checks
it filter by filter). Filters that became invalid by execution time are a permanent
rejection there (P8).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from enum import Enum
from typing import Any

from teamdesk.db.models import Priority, Scope, TicketStatus
from teamdesk.errors import InvalidFilters

MAX_TEXT = 100
MAX_USER_ID = 40
KEYS = ("assignee_id", "created_from", "created_to", "priority", "status", "text")


def _names(key: str, enum_: type[Enum]) -> Callable[[Any], list[str]]:
    def check(values: Any) -> list[str]:
        if not isinstance(values, list) or not values:
            raise InvalidFilters(f"{key} must be a non-empty list of names")
        names = set()
        for v in values:
            try:
                names.add(enum_(v).value)
            except ValueError:
                raise InvalidFilters(
                    f"{key} {v!r} is not one of {', '.join(m.value for m in enum_)}"
                ) from None
        return sorted(names)
    return check


def _day(key: str) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if not isinstance(v, str):
            raise InvalidFilters(f"{key} must be an ISO date string like '2026-01-31'")
        try:
            return date.fromisoformat(v).isoformat()
        except ValueError:
            raise InvalidFilters(f"{key} {v!r} is not an ISO date like '2026-01-31'") from None
    return check


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise InvalidFilters("text must be a string")
    if len(v) > MAX_TEXT:
        raise InvalidFilters(f"text is {len(v)} characters; at most {MAX_TEXT}")
    return v.strip()


def _user_id(v: Any) -> str:
    if not isinstance(v, str) or not v or len(v) > MAX_USER_ID:
        raise InvalidFilters("assignee_id must be a user id string")
    return v


#: One checker per key, in the order the errors are reported.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "status": _names("status", TicketStatus), "priority": _names("priority", Priority),
    "created_from": _day("created_from"), "created_to": _day("created_to"),
    "text": _text, "assignee_id": _user_id,
}


def validate_filters(raw: Any) -> dict[str, Any]:
    """Check and normalise export filters; `InvalidFilters` says exactly what is wrong.

    Keys: `status` and `priority` (lists of names), `created_from` / `created_to`
    (ISO dates, inclusive), `text` (title substring, at most 100 characters; blank means
    no filter), `assignee_id`.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidFilters(f"filters must be an object, not {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS), key=str)
    if unknown:
        raise InvalidFilters(f"unknown filter keys: {', '.join(map(str, unknown))}; "
                             f"allowed: {', '.join(KEYS)}")
    out = {key: check(raw[key]) for key, check in _CHECKS.items() if key in raw}
    if out.get("text") == "":
        del out["text"]
    if "created_from" in out and "created_to" in out and out["created_from"] > out["created_to"]:
        raise InvalidFilters(
            f"created_from {out['created_from']} is after created_to {out['created_to']}")
    return out


def _midnight(day: str) -> datetime:
    return datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)


def like_pattern(text: str) -> str:
    """An ILIKE pattern matching `text` anywhere, its own `%`, `_` and `\\` taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def filter_params(team_id: str, owner_id: str, scope: Scope | str,
                  filters: dict[str, Any]) -> dict[str, Any]:
    """The parameters of the ticket query (`_export_tickets`) for validated `filters`:
    NULL for an unused filter, so the statement text never changes. `created_to` is
    inclusive: the query asks for `created_at` before the next midnight (UTC)."""
    created_to = filters.get("created_to")
    text = filters.get("text")
    return {
        "team_id": team_id,
        "owner_id": owner_id,
        "creator_id": owner_id if Scope(scope) is Scope.OWN else None,
        "statuses": filters.get("status"),
        "priorities": filters.get("priority"),
        "created_from": _midnight(filters["created_from"]) if "created_from" in filters
        else None,
        "created_before": _midnight(created_to) + timedelta(days=1) if created_to else None,
        "title_pattern": None if text is None else like_pattern(text),
        "assignee_id": filters.get("assignee_id"),
    }
