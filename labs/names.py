"""Readable names for what a notebook talks about (machinery out of the
cells).

    names = Names()
    e1 = names("e1", await lab.request_export(...))   # a task (or ticket) by a short name
    names.lease(ctx["execution_id"])                  # "E1", "E2", … in claim order
    names.lease(execution_id, "E3 (retry)")           # or a label of your own
    names.of(task.id)                                 # "e1" (the id itself if unnamed)

Ids stay random in the data (uuids, sequence numbers); only what people read is renamed.
Leases are keyed by their first 8 characters, the form `labs.tables` shows.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


class Names:
    """Short names for tasks, tickets and leases of one notebook."""

    def __init__(self) -> None:
        self.ids: dict[Any, str] = {}
        self.leases: dict[str, str] = {}

    def __call__(self, name: str, obj: T) -> T:
        """Name `obj` (anything with an `id`) and return it unchanged."""
        self.ids[obj.id] = name  # type: ignore[attr-defined]
        return obj

    def of(self, key: Any) -> Any:
        """The name of a task or ticket id; the id itself when it has none."""
        return self.ids.get(key, key)

    def lease(self, execution_id: str, label: str | None = None) -> str:
        """The name of a lease: `label` if given (and remembered), else "E1", "E2", … in
        the order leases were first named."""
        key = execution_id[:8]
        if label is not None:
            self.leases[key] = label
            return label
        return self.leases.setdefault(key, f"E{len(self.leases) + 1}")

    def lease_of(self, execution: Any) -> Any:
        """For a table cell: the lease's name if it has one, the value itself otherwise
        (None and '' stay missing)."""
        if isinstance(execution, str) and execution:
            return self.leases.get(execution[:8], execution)
        return None

    def text(self, line: str) -> str:
        """`line` with every named lease (its 8 characters) replaced by its name, for
        log-like lines such as a counterexample's `effects`."""
        for key, name in self.leases.items():
            line = line.replace(key, name)
        return line

    def clear(self) -> None:
        """Forget every name (a race started over)."""
        self.ids.clear()
        self.leases.clear()
