"""Build the lab's fallback CJK font (`labs/fonts/TeamDeskLabSansSC-Regular.ttf`) from
Noto Sans SC (SIL Open Font License 1.1; Google Fonts' `ofl/notosanssc/NotoSansSC[wght].ttf`).

    python scripts/build_cjk_font.py path/to/NotoSansSC[wght].ttf

Why a subset of our own: matplotlib's default fonts have no CJK glyphs, and a whole CJK
font is 17 MB or more. The figures of the 中文 edition draw our own words, so the font
holds the 3,755 most common hanzi (GB 2312 level 1), CJK punctuation, ASCII, and every
CJK character written anywhere in `labs/` (its catalogue `labs/i18n/zh.md`), `notebooks/`,
`docs/` and `RULES*.md` today; `tests/labs/test_cjk_font.py` fails when a figure text needs
a glyph it lacks. It is instanced at weight 400 and renamed (a modified version keeps no
reserved font name; Noto's is "Source", ours is "TeamDesk Lab Sans SC"). Re-run after adding
Chinese text.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTFont
from fontTools.varLib import instancer

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "labs" / "fonts" / "TeamDeskLabSansSC-Regular.ttf"
FAMILY = "TeamDesk Lab Sans SC"
CJK = re.compile(r"[\u2e80-\u9fff\u3000-\u303f\uff00-\uffef\u2010-\u206f]")


def gb2312_level1() -> set[str]:
    """The 3,755 hanzi of GB 2312 level 1 (rows 16–55)."""
    chars = set()
    for hi in range(0xB0, 0xD8):
        for lo in range(0xA1, 0xFF):
            try:
                chars.add(bytes([hi, lo]).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    return chars


def repo_chars() -> set[str]:
    found: set[str] = set()
    for pattern in ("labs/**/*.py", "labs/**/*.md", "notebooks/*.ipynb", "docs/**/*.md",
                    "RULES*.md", "*.md"):
        for path in ROOT.glob(pattern):
            found |= set(CJK.findall(path.read_text(encoding="utf-8")))
    return found


def build(source: Path) -> None:
    font = TTFont(source)
    font = instancer.instantiateVariableFont(font, {"wght": 400})
    text = "".join(sorted(gb2312_level1() | repo_chars() | {chr(c) for c in range(0x20, 0x7F)}))
    options = subset.Options()
    options.layout_features = ["*"]
    options.name_IDs = ["*"]
    sub = subset.Subsetter(options)
    sub.populate(text=text)
    sub.subset(font)
    names = font["name"]
    for record in list(names.names):
        if record.nameID in (1, 4, 16):
            names.setName(FAMILY if record.nameID != 4 else f"{FAMILY} Regular",
                          record.nameID, record.platformID, record.platEncID, record.langID)
        elif record.nameID in (3, 6):
            names.setName("TeamDeskLabSansSC-Regular", record.nameID, record.platformID,
                          record.platEncID, record.langID)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    font.save(OUT)
    print(f"{OUT.relative_to(ROOT)}: {len(text)} characters, {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build(Path(sys.argv[1]))
