"""English that is also a value of the run — a fault kind's action, a log count's label, what
a held lease became — written once, in the table that declares it, and said from there.

A `Words` table maps each such English to the last part of its catalogue key; `shown` looks
the English up and says it through the harness catalogue (`labs/i18n/zh.md`), and
`messages()` hands the same words to `labs.messages.made()`, so the catalogue test checks
their translations like those of any literal `say(...)`. These are, with `labs.cases`, the
harness's only calls of `say` without a literal key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkit.i18n import Call, placeholders
from labs.i18n import quoted_at, say


@dataclass(frozen=True)
class Words:
    """Some English values of one module, each said under `prefix`.`keys[english]`."""

    #: The keys' common first part, e.g. `chaos.logs`.
    prefix: str
    #: Each English value → the last part of its key.
    keys: Mapping[str, str]
    #: The module that declares the values (where a translator finds the English).
    path: str
    #: What follows the value in the said English, e.g. a field: `" {hold:.2f} s"`.
    suffix: str = ""

    def english(self, value: str) -> str:
        """The template said for `value`: the value, then the suffix."""
        return value + self.suffix

    def shown(self, value: str, **fields: Any) -> str:
        """`value` in the edition's words (a value the table does not hold as it is)."""
        key = self.keys.get(value)
        if key is None:
            return value
        return say(f"{self.prefix}.{key}", self.english(value), **fields)

    def messages(self) -> list[Call]:
        """The table as messages of the harness catalogue, each at the line of `path`
        that quotes its value."""
        found = []
        for value, key in self.keys.items():
            line = quoted_at(Path(self.path), f'"{value}"')
            english = self.english(value)
            found.append(Call(Path(self.path), line, f"{self.prefix}.{key}", english,
                              frozenset(placeholders(english))))
        return found
