"""The harness's words: `say(key, english, **fields)`, with the Chinese of every message in
`labs/i18n/zh.md` (the catalogue format is `devkit.i18n`'s).

That catalogue is the only home of the harness's Chinese: no `labs/**/*.py` file holds a
CJK character (tests/unit/test_harness_catalogue.py). Where the English edition quotes the
book's own Chinese words (a fault's name, a test's title), the call asks for them with
`lang="zh"`, so they too live in the catalogue, beside the English they stand for.
"""

from __future__ import annotations

import re
from pathlib import Path

from devkit.i18n import Catalogue, listing
from devkit.i18n import lang as edition

CATALOGUE = Catalogue(Path(__file__).parent)
say = CATALOGUE.say


def made_key(prefix: str, english: str) -> str:
    """The catalogue key of a text whose key is made from it (a step's title, a word
    answer): `prefix`, a dot, the English in lower case with each run of other characters
    than letters and digits a dash."""
    return f"{prefix}." + re.sub(r"[^a-z0-9]+", "-", english.lower()).strip("-")


def quoted_at(path: Path, text: str) -> int:
    """The number of the first line of `path` that holds `text` (1 if none does): where a
    message whose key is made rather than written is shown to a translator."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next((n for n, line in enumerate(lines, 1) if text in line), 1)


def translated(key: str, lang: str | None = None) -> str | None:
    """The catalogue's text for `key` in the edition (or `lang`); None in English, or
    where the catalogue has none (a step a learner wrote into their copy)."""
    lang = lang or edition()
    found = CATALOGUE.messages(lang).get(key) if lang != "en" else None
    return found.text if found is not None else None


__all__ = ["CATALOGUE", "listing", "made_key", "quoted_at", "say", "translated"]
