"""`teamdesk slides` (`devkit.slides`): each notebook with slide metadata becomes one HTML
deck from its stored run that a browser shows with no network — the slides its metadata
asks for, no solution, the presenter's cells as speaker notes, nothing fetched from
outside the file."""

from __future__ import annotations

import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from devkit import cli, notebook_cells, slides

ROOT = Path(__file__).resolve().parents[2]


class _Deck(HTMLParser):
    """What a built deck holds: its sections by depth, its speaker notes' text, and all
    the text a viewer can see."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.sections = [0, 0]  # slides across, pages (sections inside them)
        self.in_notes = 0
        self.notes: list[str] = []
        self.note_pages: list[int] = []  # the page each note is shown with
        self.text: list[str] = []
        self.pages: list[str] = [""]  # each page's text (notes included), from page 1

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.depth += 1
            self.sections[min(self.depth, 2) - 1] += 1
            if self.depth == 2:
                self.pages.append("")
        if tag == "aside" and ("class", "notes") in attrs:
            self.in_notes += 1
            self.notes.append("")
            self.note_pages.append(len(self.pages) - 1)

    def handle_endtag(self, tag):
        if tag == "section":
            self.depth -= 1
        if tag == "aside" and self.in_notes:
            self.in_notes -= 1

    def handle_data(self, data):
        if self.in_notes:
            self.notes[-1] += data
        self.text.append(data)
        self.pages[-1] += data


def _read(html: Path) -> _Deck:
    deck = _Deck()
    deck.feed(html.read_text(encoding="utf-8"))
    return deck


def _cells(name: str, lang: str = "en") -> list[dict]:
    folder = ROOT / "notebooks" / ("zh" if lang == "zh" else "")
    path = next(folder.glob(f"{name}-*.ipynb"))
    return notebook_cells.cells(path)


def _kind(cell: dict) -> str:
    return cell["metadata"].get("slideshow", {}).get("slide_type", "-")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _fetched_from_outside(html: str) -> list[str]:
    """This test's own reading of "works offline": every `src`, every `href` but an
    anchor's, every CSS `url(…)` and `@import`, and any ES module import, that names a
    URL with a scheme or a protocol-relative one (`//host`) other than `data:`."""
    found = []
    for tag in re.finditer(r"<(\w+)\b[^>]*>", html):
        if tag.group(1).lower() == "a":
            continue
        found += re.findall(r"""\b(?:src|href|data|poster)\s*=\s*["']?([^"'\s>]+)""",
                            tag.group(0), flags=re.I)
    found += re.findall(r"""url\(\s*["']?([^"')\s]+)""", html)
    found += re.findall(r"""@import\s+(?:url\()?["']?([^"')\s;]+)""", html)
    found += re.findall(r"""\bimport\s+[\w{}\s,*]*from\s+["']([^"']+)""", html)
    return [u for u in found if re.match(r"(?i)([a-z][a-z0-9+.-]*:|//)", u)
            and not u.lower().startswith("data:")]


@pytest.fixture(scope="module")
def deck_26b(tmp_path_factory) -> slides.Deck:
    return slides.build(ROOT, ROOT / "notebooks" / "26b-takeover-race.ipynb",
                        tmp_path_factory.mktemp("slides"))


def test_the_vendored_revealjs_is_the_npm_packages(tmp_path):
    """Each inlined file has the digest recorded for reveal.js's published package (also
    in devkit/reveal/README.md), and its licence ships beside it."""
    readme = (slides.REVEAL_DIR / "README.md").read_text(encoding="utf-8")
    assert f"**{slides.REVEAL_VERSION}**" in readme
    for name, digest in slides.REVEAL_FILES.items():
        assert hashlib.sha256((slides.REVEAL_DIR / name).read_bytes()).hexdigest() == digest
        assert f"`{name}`" in readme and digest in readme
    assert "Permission is hereby granted" in (slides.REVEAL_DIR / "LICENSE").read_text()


def test_the_deck_has_the_slides_its_metadata_asks_for(deck_26b):
    """Slides across and pages in all, counted from the notebook's metadata (the first
    shown cell opens a slide; each later `slide` another; each `subslide` a page below)."""
    shown = [c for c in _cells("26b") if "solution" not in notebook_cells.tags(c)]
    visible = [c for c in shown if _kind(c) not in ("notes", "skip")]
    across = 1 + sum(_kind(c) == "slide" for c in visible[1:])
    pages = 1 + sum(_kind(c) in ("slide", "subslide") for c in visible[1:])
    deck = _read(deck_26b.html)
    assert deck.sections == [across, pages] and (deck_26b.slides, deck_26b.pages) == (
        across, pages)
    assert across > 10 and pages > across  # 26b is a real deck, with pages below slides
    # Every "What it proved" is a fragment, and so is each scene that answers a prediction:
    # the answer shows on a key press after the question.
    held = sum(1 for i, c in enumerate(shown) if "predict" in notebook_cells.tags(c)
               and next(_kind(d) for d in shown[i + 1:] if _kind(d) not in ("notes", "skip"))
               == "-")
    fragments = sum(_kind(c) == "fragment" for c in visible)
    assert held > 0
    assert deck_26b.html.read_text(encoding="utf-8").count('class="fragment"') == (
        fragments + held)
    assert deck_26b.outputs and deck_26b.html.name == "26b-takeover-race.html"
    assert 'class="jp-OutputArea-child' in deck_26b.html.read_text(encoding="utf-8")


def test_no_solution_appears_and_the_presenter_speaks_in_the_notes(deck_26b):
    cells = _cells("26b")
    deck = _read(deck_26b.html)
    text = _flat("".join(deck.text))
    solutions = [c for c in cells if "solution" in notebook_cells.tags(c)]
    assert len(solutions) == 2
    for cell in solutions:
        first = _flat(notebook_cells.source(cell).splitlines()[0])
        assert first not in text, first
    # The reading above does find code: the set-up cell's first line is there.
    setup = next(c for c in cells if c["cell_type"] == "code")
    assert _flat(notebook_cells.source(setup).splitlines()[0]) in text
    presenter = [c for c in cells if "presenter" in notebook_cells.tags(c)]
    assert len(deck.notes) == len(presenter) == deck_26b.notes > 0
    for cell, note in zip(presenter, deck.notes, strict=True):
        said = _flat(re.sub(r"[*`_\[\]]", "", notebook_cells.source(cell)))
        assert said.startswith("Presenter:") and _flat(note).startswith(said[:30]), (said, note)


def test_a_note_shows_with_the_page_it_introduces(deck_26b):
    """A presenter cell written right before a heading or a prediction speaks about that
    page: its speaker note is shown with it, not with the page before."""
    cells = _cells("26b")
    deck = _read(deck_26b.html)
    presenter = [c for c in cells if "presenter" in notebook_cells.tags(c)]
    introduced = 0
    for cell, page in zip(presenter, deck.note_pages, strict=True):
        after = next(c for c in cells[cells.index(cell) + 1:] if _kind(c) != "notes")
        if _kind(after) not in ("slide", "subslide"):
            continue
        first = _flat(notebook_cells.source(after).splitlines()[0].lstrip("#"))
        assert _flat(re.sub(r"[*`]", "", first))[:12] in _flat(deck.pages[page]), first
        introduced += 1
    assert introduced >= 10


def test_a_solution_is_left_out_by_its_tag_whatever_its_slide_type(tmp_path):
    """The kit marks solutions `skip`, but a solution that lost that metadata (or a new one
    not yet given it) still stays off the slides: the tag decides."""
    nb = json.loads((ROOT / "notebooks" / "26c-reminder-commit-gate.ipynb").read_text())
    solutions = [c for c in nb["cells"] if "solution" in notebook_cells.tags(c)]
    for cell in solutions:
        cell["metadata"].pop("slideshow", None)
    path = tmp_path / "notebooks" / "26c-reminder-commit-gate.ipynb"
    path.parent.mkdir()
    path.write_text(json.dumps(nb))
    text = _flat("".join(_read(slides.build(tmp_path, path, tmp_path / "out").html).text))
    assert len(solutions) == 2
    for cell in solutions:
        assert _flat(notebook_cells.source(cell).splitlines()[0]) not in text


def test_the_deck_works_offline(deck_26b):
    """Nothing is fetched from outside the file: reveal.js is inlined, no CDN remains."""
    html = deck_26b.html.read_text(encoding="utf-8")
    assert _fetched_from_outside(html) == [] and slides.external_resources(html) == []
    assert "<script src" not in html and "<link" not in html
    assert "Reveal.initialize(" in html and "RevealNotes" in html


def test_the_offline_reading_catches_nbconverts_cdn_deck(tmp_path):
    """Both readings of "offline" fail on what nbconvert builds by default (reveal.js and
    require.js from CDNs), so the test above can fail."""
    from nbconvert import SlidesExporter
    from nbformat.v4 import new_markdown_cell, new_notebook

    nb = new_notebook(cells=[new_markdown_cell("# one", metadata={
        "slideshow": {"slide_type": "slide"}})])
    html, _ = SlidesExporter().from_notebook_node(nb)
    outside = _fetched_from_outside(html)
    assert any("reveal.js" in u for u in outside), outside
    assert any("reveal.js" in u for u in slides.external_resources(html))


def test_a_deck_that_would_fetch_an_image_from_the_web_is_refused(tmp_path):
    nb = json.loads((ROOT / "notebooks" / "26c-reminder-commit-gate.ipynb").read_text())
    nb["cells"][1]["source"] = "![board](https://example.org/board.png)"
    broken = tmp_path / "notebooks" / "26c-reminder-commit-gate.ipynb"
    broken.parent.mkdir()
    broken.write_text(json.dumps(nb))
    with pytest.raises(ValueError, match=re.escape("https://example.org/board.png")):
        slides.build(tmp_path, broken, tmp_path / "out")
    assert not (tmp_path / "out" / "26c-reminder-commit-gate.html").exists()


def test_the_command_builds_every_deck_and_the_chinese_one_says_it_has_no_run(tmp_path,
                                                                              capsys):
    """`teamdesk slides --lang zh 26d`: the 中文 deck, same slides as the English one,
    Chinese on them, no outputs (the edition stores no run), and the command says so."""
    assert [p.stem.split("-")[0] for p in slides.resolve(ROOT, [])] == ["26b", "26c", "26d"]
    assert cli.main(["slides", "26d", "--lang", "zh", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    html = tmp_path / "26d-manual-retry-and-recovery.html"
    assert f"✓ {html}" in out and "stores no run" in out
    en = slides.outline(_cells("26d"))
    deck = _read(html)
    assert deck.sections == list(en[:2]) and len(deck.notes) == en[2]
    assert 'lang="zh"' in html.read_text(encoding="utf-8")[:200]
    title = _flat(notebook_cells.source(_cells("26d", "zh")[0]).splitlines()[0].lstrip("# "))
    assert title in _flat("".join(deck.text))
    assert 'class="jp-OutputArea-child' not in html.read_text(encoding="utf-8")


def test_a_notebook_without_slides_or_an_unknown_name_is_one_line(capsys):
    assert cli.main(["slides", "23"]) == 2
    assert "23 carries no slides; slides are built for 26b, 26c, 26d" in capsys.readouterr().err
    assert cli.main(["slides", "26z"]) == 2
    assert "no notebook '26z'" in capsys.readouterr().err
