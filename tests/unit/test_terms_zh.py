"""The 中文 edition speaks with one term base (`notebooks/i18n/terms-zh.md`): no catalogue
uses a variant the term base forbids (the calques a first draft falls into, e.g. 世界 for a
lab world), and the term base itself is whole — every forbidden variant has the term to
use instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TERMS = ROOT / "notebooks" / "i18n" / "terms-zh.md"
#: Where the 中文 edition's words live: the notebooks' catalogues, the harness's own, and
#: the instructor's kit in 中文.
CATALOGUES = [*sorted((ROOT / "notebooks" / "i18n" / "zh").glob("[0-9]*.md")),
              ROOT / "labs" / "i18n" / "zh.md", ROOT / "devkit" / "i18n" / "zh.md",
              *sorted((ROOT / "docs" / "teaching" / "zh").glob("*.md"))]


def forbidden(text: str) -> dict[str, str]:
    """variant → the row it is forbidden in, from the term base's tables: the last column
    of a term table (不用), or the first column of the phrasings table."""
    out: dict[str, str] = {}
    phrasings = False
    for line in text.splitlines():
        if line.startswith("## "):
            phrasings = "phrasings" in line
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("中文", "不用（禁用）"):
            continue
        bad = cells[0] if phrasings else cells[-1]
        for variant in filter(None, re.split(r"[、,，]\s*", bad)):
            out[variant] = line
    return out


def test_the_term_base_forbids_variants_and_names_the_term_to_use() -> None:
    bad = forbidden(TERMS.read_text(encoding="utf-8"))
    assert {"世界", "实验世界", "彼此诚实", "管道活", "闸门"} <= set(bad)
    # every forbidden variant sits in a row that also names what to write
    for variant, row in bad.items():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert any(c and c != variant and variant not in c for c in cells), row


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_catalogue_uses_a_forbidden_variant(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = {v: text.count(v) for v in forbidden(TERMS.read_text(encoding="utf-8"))
             if v in text}
    assert not found, f"{path.relative_to(ROOT)} uses variants the term base forbids: {found}"


def test_a_forbidden_variant_is_found() -> None:
    bad = forbidden("## 本实验的词\n| 中文 | English | code | 不用（禁用） |\n|---|---|---|---|\n"
                    "| 实验环境 | a lab world | `Lab` | 世界、实验世界 |\n")
    assert set(bad) == {"世界", "实验世界"}
