"""The instructor's kit in 中文 (`docs/teaching/zh/`) keeps step with the English pages it
translates. A 中文 page is written for Chinese instructors, not word for word, but what an
instructor acts on must be the same in both: every table with the same rows, and in each
row (and on the page) the same code and path references — backticked names, rule ids
(`P3`, `D6`), sections (`§4.1`), minutes, core / optional — and the book's Chinese titles
verbatim. Edit an English page and forget its 中文 page, and these tests name the table,
the row and the references that differ."""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from pathlib import Path

import pytest

from devkit.i18n import HAN
from devkit.notebook_cells import FENCE

ROOT = Path(__file__).resolve().parents[2]
TEACHING = ROOT / "docs" / "teaching"
ZH = TEACHING / "zh"
#: The translated pages: every page of `docs/teaching/zh/` but its own README, which is a
#: short guide to the 中文 kit, not a translation.
TRANSLATED = sorted(p.name for p in ZH.glob("*.md") if p.name != "README.md")
#: References only a 中文 page makes: the 中文 edition's own folders and files, named beside
#: the English ones (a 中文 instructor opens `notebooks/zh/`, and `--lang zh` picks it).
ZH_EDITION = frozenset({"notebooks/zh/", "my-notebooks/zh/", "--lang zh", "RULES.zh-CN.md"})
#: A cell that says only "core" or "optional" says it in 中文 with these words.
CELL_WORDS = {"core": "必讲", "optional": "选讲"}

SPAN = re.compile(r"`([^`]+)`")
RULE = re.compile(r"(?<![A-Za-z0-9_])[DIMOPQRSWX]\d{1,2}(?![A-Za-z0-9_])")
SECTION = re.compile(r"§\d+(?:\.\d+)*")
#: A run of Chinese: an ideograph, then ideographs and CJK punctuation.
CJK = re.compile(f"[{HAN}][\u3000-\u303f{HAN}\uff00-\uffef]*")
MINUTES = re.compile(r"\d+(?:\s*[–-]\s*\d+)?")


def spans(text: str) -> set[str]:
    """Backticked references outside code blocks, whitespace normalised (a span may wrap)."""
    return {" ".join(s.split()) for s in SPAN.findall(FENCE.sub("", text))}


def rules(text: str) -> set[str]:
    return set(RULE.findall(text))


def tables(text: str) -> list[tuple[str, list[list[str]]]]:
    """Each table outside code blocks: (the heading above it, its rows as cell lists; the
    header row included, the |---| line not)."""
    out: list[tuple[str, list[list[str]]]] = []
    heading, current = "(top)", None
    for line in FENCE.sub("", text).splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|"):
            if current is None:
                current = []
                out.append((heading, current))
            if not set(line) <= set("|-: "):
                current.append([c.strip() for c in line.strip().strip("|").split("|")])
        else:
            current = None
    return out


def _label(row: list[str]) -> str:
    text = " | ".join(row[:2])
    return text if len(text) <= 60 else text[:57] + "…"


def _refs(row: list[str]) -> tuple[frozenset[str], ...]:
    text = " | ".join(row)
    return (frozenset(spans(text) - ZH_EDITION), frozenset(rules(text)),
            frozenset(SECTION.findall(text)))


def _key(row: list[str]) -> tuple:
    """What a row is recognised by in either edition: its references and its numbers."""
    return (*_refs(row), tuple(c.replace(" ", "") for c in row if MINUTES.fullmatch(c)))


def _row_differences(en: list[str], zh: list[str]) -> list[str]:
    out = []
    for kind, a, b in zip(("references", "rule ids", "sections"), _refs(en), _refs(zh),
                          strict=True):
        if a != b:
            out.append(f"{kind} only in English {sorted(a - b)}, only in 中文 {sorted(b - a)}")
    zh_text = " | ".join(zh)
    missing = [run for run in CJK.findall(" | ".join(en)) if run not in zh_text]
    if missing:
        out.append(f"the book's Chinese words missing in 中文: {missing}")
    if len(en) != len(zh):
        out.append(f"{len(en)} cells in English, {len(zh)} in 中文")
        return out
    for i, (a, b) in enumerate(zip(en, zh, strict=True)):
        if MINUTES.fullmatch(a) and a.replace(" ", "") != b.replace(" ", ""):
            out.append(f"cell {i + 1}: {a!r} in English, {b!r} in 中文")
        elif a in CELL_WORDS and b != CELL_WORDS[a]:
            out.append(f"cell {i + 1}: {a!r} in English, {b!r} in 中文 "
                       f"(write {CELL_WORDS[a]!r})")
    return out


def differences(en_text: str, zh_text: str) -> list[str]:
    """What a 中文 page lacks or adds against its English page; empty when in step."""
    out: list[str] = []
    en_tables, zh_tables = tables(en_text), tables(zh_text)
    if len(en_tables) != len(zh_tables):
        out.append(f"{len(en_tables)} tables in English, {len(zh_tables)} in 中文")
    pairs = zip(en_tables, zh_tables, strict=False)  # a lost table is named above
    for n, ((heading, en_rows), (_, zh_rows)) in enumerate(pairs, 1):
        where = f"table {n} (under {heading!r})"
        if len(en_rows) != len(zh_rows):
            out.append(f"{where}: {len(en_rows)} rows in English, {len(zh_rows)} in 中文")
        # rows aligned by what they reference, so a row added or lost is named as such
        match = SequenceMatcher(None, [_key(r) for r in en_rows], [_key(r) for r in zh_rows],
                                autojunk=False)
        for op, i1, i2, j1, j2 in match.get_opcodes():
            if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1):
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                    out += [f"{where}, row {i} {_label(en_rows[i])!r}: {d}"
                            for d in _row_differences(en_rows[i], zh_rows[j])]
                continue
            out += [f"{where}: English row {i} not in 中文: {_label(en_rows[i])!r}"
                    for i in range(i1, i2)]
            out += [f"{where}: 中文 row {j} not in English: {_label(zh_rows[j])!r}"
                    for j in range(j1, j2)]
    en_spans, zh_spans = spans(en_text), spans(zh_text)
    if en_spans - zh_spans:
        out.append(f"references only in English: {sorted(en_spans - zh_spans)}")
    if zh_spans - en_spans - ZH_EDITION:
        out.append(f"references only in 中文: {sorted(zh_spans - en_spans - ZH_EDITION)}")
    if rules(en_text) != rules(zh_text):
        out.append(f"rule ids only in English {sorted(rules(en_text) - rules(zh_text))}, "
                   f"only in 中文 {sorted(rules(zh_text) - rules(en_text))}")
    missing = sorted({run for run in CJK.findall(en_text) if run not in zh_text})
    if missing:
        out.append(f"the book's Chinese words missing in 中文: {missing}")
    blocks = (len(FENCE.findall(en_text)), len(FENCE.findall(zh_text)))
    if blocks[0] != blocks[1]:
        out.append(f"{blocks[0]} code blocks in English, {blocks[1]} in 中文")
    return out


def test_the_course_map_and_the_90_minute_class_are_translated() -> None:
    assert {"course-map.md", "class-90min.md"} <= set(TRANSLATED)
    for name in TRANSLATED:
        assert (TEACHING / name).is_file(), f"docs/teaching/zh/{name} translates no English page"


@pytest.mark.parametrize("name", TRANSLATED)
def test_the_zh_page_keeps_step_with_the_english_one(name: str) -> None:
    diffs = differences((TEACHING / name).read_text(encoding="utf-8"),
                        (ZH / name).read_text(encoding="utf-8"))
    assert not diffs, (f"docs/teaching/zh/{name} is out of step with docs/teaching/{name}:\n"
                       + "\n".join(diffs))


def _desync(path: Path, edits: list[tuple[str, str]]) -> Path:
    text = path.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    copy = path.parent / f"desync-{path.name}"
    copy.write_text(text, encoding="utf-8")
    return copy


def test_a_desynchronised_copy_is_caught(tmp_path: Path) -> None:
    """A 中文 copy that lost a row, renamed a reference and changed a minute; an English copy
    with a new row and a renamed prediction: each difference is named."""
    zh_text = (ZH / "course-map.md").read_text(encoding="utf-8")
    row_g = next(line for line in zh_text.splitlines() if "`26c` 练习 G" in line)
    row_1 = next(line for line in zh_text.splitlines() if line.startswith("| 1 | 先画出"))
    (tmp_path / "zh").mkdir()
    zh_copy = tmp_path / "zh" / "course-map.md"
    zh_copy.write_text(zh_text, encoding="utf-8")
    zh_copy = _desync(zh_copy, [(row_g + "\n", ""), ("`dispatch_batch_size`", "`batch_size`"),
                                (row_1, row_1.replace("| 15 |", "| 20 |"))])
    diffs = "\n".join(differences((TEACHING / "course-map.md").read_text(encoding="utf-8"),
                                  zh_copy.read_text(encoding="utf-8")))
    assert "22 rows in English, 21 in 中文" in diffs, diffs
    assert "not in 中文: '5 | (same section) the commit gate" in diffs, diffs
    assert diffs.count("not in 中文") == 1 and "not in English" not in diffs, diffs
    assert "'dispatch_batch_size'" in diffs and "'batch_size'" in diffs, diffs
    assert "'15' in English, '20' in 中文" in diffs, diffs

    en_copy = tmp_path / "class-90min.md"
    en_copy.write_text((TEACHING / "class-90min.md").read_text(encoding="utf-8"),
                       encoding="utf-8")
    en_copy = _desync(en_copy, [
        ("(`guess_kept`)", "(`guess_keep`)"),
        ("| 84–90 |", "| 84–86 | The exit quiz (`quiz`, P5) | — | — | — |\n| 86–90 |")])
    diffs = "\n".join(differences(en_copy.read_text(encoding="utf-8"),
                                  (ZH / "class-90min.md").read_text(encoding="utf-8")))
    assert "15 rows in English, 14 in 中文" in diffs, diffs
    assert "not in 中文: '84–86 | The exit quiz" in diffs, diffs
    assert "'guess_keep'" in diffs and "'guess_kept'" in diffs and "'P5'" in diffs, diffs


def test_in_step_pages_have_no_differences() -> None:
    en = "# T\n\n| § | 书中标题 | min | |\n|---|---|---|---|\n| 1 | 先画出 · *x* | 15 | core |\n"
    zh = "# 标题\n\n| § | 书中标题 | 分钟 | |\n|---|---|---|---|\n| 1 | 先画出 | 15 | 必讲 |\n"
    assert differences(en, zh) == []
    assert differences(en, zh.replace("必讲", "选讲")) == [
        "table 1 (under 'T'), row 1 '1 | 先画出 · *x*': cell 4: 'core' in English, "
        "'选讲' in 中文 (write '必讲')"]


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", ["zh/README.md", *[f"zh/{n}" for n in TRANSLATED],
                                  "README.md"])
def test_every_relative_link_of_the_kit_resolves(page: str) -> None:
    path = TEACHING / page
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if not target.startswith(("http://", "https://")):
            assert (path.parent / target).exists(), f"docs/teaching/{page}: {target}"


def test_the_zh_readme_points_to_every_page_in_its_edition() -> None:
    """Each page of the kit is linked from the 中文 README: the 中文 page where there is one,
    the English page where there is not; and the English README links the 中文 pages."""
    zh_links = set(LINK.findall((ZH / "README.md").read_text(encoding="utf-8")))
    for page in sorted(p.name for p in TEACHING.glob("*.md") if p.name != "README.md"):
        want = page if page in TRANSLATED else f"../{page}"
        assert want in zh_links, f"docs/teaching/zh/README.md does not link {want}"
    en_links = set(LINK.findall((TEACHING / "README.md").read_text(encoding="utf-8")))
    assert {"zh/README.md", *(f"zh/{n}" for n in TRANSLATED)} <= en_links
