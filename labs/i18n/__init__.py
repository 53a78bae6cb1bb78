"""The harness's words: `say(key, english, **fields)`, with the Chinese of every message in
`labs/i18n/zh.md` (the catalogue format is `devkit.i18n`'s).

That catalogue is the only home of the harness's Chinese: no `labs/**/*.py` file holds a
CJK character (tests/unit/test_harness_catalogue.py). Where the English edition quotes the
book's own Chinese words (a fault's name, a test's title), the call asks for them with
`lang="zh"`, so they too live in the catalogue, beside the English they stand for.
"""

from __future__ import annotations

from pathlib import Path

from devkit.i18n import Catalogue, listing

CATALOGUE = Catalogue(Path(__file__).parent)
say = CATALOGUE.say

__all__ = ["CATALOGUE", "listing", "say"]
