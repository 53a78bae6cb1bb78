"""`teamdesk slides`: a notebook's slides from its stored run, one HTML file that works
offline — the class's fallback when the live servers fail.

A deck is built from a notebook that carries slide metadata (26b, 26c, 26d: the kit's rule
in `docs/teaching/README.md`, checked by `tests/unit/test_notebook_structure.py`) with
nbconvert's slides exporter and its reveal.js template for the cells:

- a `slide` / `subslide` cell opens a slide / a slide below it, a `fragment` appears on
  the next key press, `skip` is left out (the assert-only checkpoints);
- the presenter's cells (`slide_type: notes`) become speaker notes (key **S**), shown with
  the page they introduce (`notes_with_their_page`);
- solutions (cells tagged `solution`) are left out whatever their slide type;
- the outputs are the stored run's: the finished race, shown as it ran in CI; the scene
  after each `predict` cell appears on the next key press (`hold_answers`), so the
  question is on screen before its answer, as in the live class.

Offline: nbconvert's own template loads reveal.js, require.js, jQuery and MathJax from
CDNs. Ours (`devkit/reveal/nbconvert/teamdesk-slides/`) inlines reveal.js, vendored in
`devkit/reveal/` (MIT, the npm package's own files; their digests in `REVEAL_FILES`), and
loads nothing else; a deck that would still fetch something (a markdown image on the web)
is refused with the reference named (`external_resources`).

The 中文 edition (`notebooks/zh/`) stores no run, so its deck shows prose and code without
outputs, and says so (`Deck.outputs`); the English deck carries the run. Decks go to
`build/slides/` (git-ignored), `build/slides/zh/` for 中文.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from devkit import copies, notebook_cells

#: The vendored reveal.js (`devkit/reveal/README.md`).
REVEAL_DIR = Path(__file__).resolve().parent / "reveal"
REVEAL_VERSION = "6.0.2"
#: Each vendored file with the sha256 of the npm package's copy: what is inlined.
REVEAL_FILES = {
    "dist/reveal.js": "aa1bbbf2617b23a623b23612cb3c5bdb63de512e652bf20fcfa832b045d37844",
    "dist/reveal.css": "615ee850cbbb98a0f688b60ed37b21819a3f54c9f3e6f20e33e63693ab74a0c0",
    "dist/theme/simple.css": "b6c8df9a191c2f25acebf0075d748134773f916385a359303a509a52851551c2",
    "dist/plugin/notes.js": "447c42f365876e41853de81453d0c53c580c5b2099132e8f61200de4a0ba2af3",
}
#: The nbconvert template of the decks, found under this folder by name.
TEMPLATES_DIR = REVEAL_DIR / "nbconvert"
TEMPLATE = "teamdesk-slides"
#: Where decks go, under the project (git-ignored), per edition.
OUT_DIR = "build/slides"
#: Cells with this tag hold an exercise's answer: never on a slide.
SOLUTION_TAG = "solution"
#: The slide size reveal.js scales to the screen (16:10, room for the board's tables).
WIDTH, HEIGHT = 1280, 800

# A web font or stylesheet a theme imports: the deck falls back to sans-serif instead.
_REMOTE_IMPORT = re.compile(r"""@import\s+(?:url\()?["']?https?://[^;]*;""")


@dataclass(frozen=True)
class Deck:
    """One built deck."""

    #: The HTML file written.
    html: Path
    #: Slides across (reveal.js's horizontal sections) and pages in all (with the ones below).
    slides: int
    pages: int
    #: Speaker notes (the presenter's cells).
    notes: int
    #: Whether the notebook stores a run (the 中文 edition does not).
    outputs: bool


def _slide_type(cell: dict[str, Any]) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def shown_cells(cells: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells a deck is made of: all but the solutions."""
    return [c for c in cells if SOLUTION_TAG not in notebook_cells.tags(c)]


def notes_with_their_page(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The presenter's notes right before a cell that opens a page (a `slide` or
    `subslide`) moved to just after it: a note is written before what it introduces (the
    question it asks, the section it frames), and reveal.js shows a note with the page
    that holds it."""
    out: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for cell in cells:
        if _slide_type(cell) == "notes":
            waiting.append(cell)
            continue
        out.extend([cell, *waiting] if _slide_type(cell) in ("slide", "subslide")
                   else [*waiting, cell])
        waiting = []
    return out + waiting


def hold_answers(cells: list[dict[str, Any]]) -> None:
    """Make the cell after each `predict` cell (the scene that answers it, when it shares
    the question's page) a fragment: the stored answer shows on the next key press, not
    with the question."""
    waiting = False
    for cell in cells:
        kind = _slide_type(cell)
        if "predict" in notebook_cells.tags(cell):
            waiting = True
        elif waiting and kind not in ("notes", "skip"):
            if kind == "-":
                cell.setdefault("metadata", {}).setdefault("slideshow", {})[
                    "slide_type"] = "fragment"
            waiting = False


def outline(cells: Iterable[dict[str, Any]]) -> tuple[int, int, int]:
    """(slides, pages, notes) of a deck of `cells`, from their slide metadata alone: the
    first shown cell opens a slide whatever its type (as nbconvert's reveal preprocessor
    does), each later `slide` another, each `subslide` a page below."""
    slides = pages = notes = 0
    for cell in shown_cells(cells):
        kind = _slide_type(cell)
        if kind == "notes":
            notes += 1
        elif kind != "skip" and not pages:
            slides = pages = 1
        elif kind == "slide":
            slides, pages = slides + 1, pages + 1
        elif kind == "subslide":
            pages += 1
    return slides, pages, notes


def is_deck(cells: Iterable[dict[str, Any]]) -> bool:
    """Whether a notebook carries slides (not only speaker notes)."""
    return any(_slide_type(c) in ("slide", "subslide") for c in cells)


def deck_notebooks(project: Path, lang: str = "en") -> list[Path]:
    """The notebooks of edition `lang` that carry slides, in course order."""
    return [p for p in copies.source_notebooks(project, lang) if is_deck(notebook_cells.cells(p))]


def resolve(project: Path, names: Iterable[str], lang: str = "en") -> list[Path]:
    """The decks `names` ask for (`26b`, a file name, or `all`; none: all). A notebook
    without slides or an unknown name → `ValueError` naming the choices."""
    names = list(names)
    decks = deck_notebooks(project, lang)
    if not names or "all" in names:
        return decks
    choices = ", ".join(p.stem.split("-", 1)[0] for p in decks)
    chosen = copies.resolve_names(project, names, lang)
    if not_decks := [p.stem.split("-", 1)[0] for p in chosen if p not in decks]:
        raise ValueError(f"{', '.join(not_decks)} carries no slides; slides are built "
                         f"for {choices}")
    return chosen


def _check_vendored() -> None:
    for name, digest in REVEAL_FILES.items():
        if hashlib.sha256((REVEAL_DIR / name).read_bytes()).hexdigest() != digest:
            raise ValueError(f"devkit/reveal/{name} is not reveal.js {REVEAL_VERSION}'s "
                             "(see devkit/reveal/README.md to update it)")


def _inline_js(path: Path) -> str:
    # A `</script` inside the code would end the inline <script> early.
    return path.read_text(encoding="utf-8").replace("</script", "<\\/script")


def reveal_assets() -> dict[str, str]:
    """The vendored reveal.js, ready to inline: its CSS, the theme without web-font
    imports, the framework and the notes plugin."""
    _check_vendored()
    theme = (REVEAL_DIR / "dist/theme/simple.css").read_text(encoding="utf-8")
    return {"version": REVEAL_VERSION,
            "reveal_css": (REVEAL_DIR / "dist/reveal.css").read_text(encoding="utf-8"),
            "theme_css": _REMOTE_IMPORT.sub("", theme),
            "reveal_js": _inline_js(REVEAL_DIR / "dist/reveal.js"),
            "notes_js": _inline_js(REVEAL_DIR / "dist/plugin/notes.js")}


class _Resources(HTMLParser):
    """The URLs a page would fetch by itself: scripts, style sheets, images, frames,
    media, and `url()`/`@import` in its CSS. Links a reader may follow (`<a href>`) are
    not fetched, so not counted."""

    FETCHED: ClassVar[set[tuple[str, str]]] = {
        ("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"),
        ("source", "src"), ("video", "src"), ("audio", "src"), ("embed", "src"),
        ("object", "data"), ("video", "poster"), ("input", "src")}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if (tag, name) in self.FETCHED and value:
                self.urls.append(value)
            elif name == "style" and value:
                self.urls.extend(_css_urls(value))
            elif name == "srcset" and value:
                self.urls.extend(part.split()[0] for part in value.split(",") if part.strip())
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls.extend(_css_urls(data))


def _css_urls(css: str) -> list[str]:
    found = re.findall(r"""url\(\s*["']?([^"')\s]+)""", css)
    return found + re.findall(r"""@import\s+["']([^"']+)""", css)


def external_resources(html: str) -> list[str]:
    """What the page would fetch from outside itself: every fetched URL (`_Resources`)
    that is not a `data:` URI or an in-page `#fragment`."""
    parser = _Resources()
    parser.feed(html)
    return [u for u in parser.urls if not u.startswith(("data:", "#"))]


def build(project: Path, notebook: Path, out_dir: Path | None = None) -> Deck:
    """Build `notebook`'s deck into `out_dir` (default: `build/slides/`, `…/zh/` for a
    notebook of the 中文 edition). A deck that would fetch anything from outside itself is
    not written: `ValueError` names what."""
    import nbformat
    from nbconvert import SlidesExporter

    nb = nbformat.read(notebook, as_version=4)
    nb.cells = notes_with_their_page(shown_cells(nb.cells))
    hold_answers(nb.cells)
    lang = "zh" if notebook.parent.name == "zh" else "en"
    title = str(nb.cells[0].source).splitlines()[0].lstrip("# ").strip() if nb.cells else ""
    exporter = SlidesExporter(template_name=TEMPLATE,
                              extra_template_basedirs=[str(TEMPLATES_DIR)],
                              exclude_input_prompt=True, exclude_output_prompt=True,
                              language_code=lang)  # ISO 639-1, the page's `lang`
    resources = {"metadata": {"name": notebook.stem},
                 "teamdesk_reveal": {**reveal_assets(), "title": title or notebook.stem,
                                     "transition": "slide", "width": WIDTH,
                                     "height": HEIGHT}}
    html, _ = exporter.from_notebook_node(nb, resources=resources)
    if outside := external_resources(html):
        raise ValueError(f"{notebook.name}: the slides would load from outside the file "
                         f"(not offline): {', '.join(sorted(set(outside))[:5])}")
    folder = out_dir or project / OUT_DIR / ("zh" if lang == "zh" else "")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{notebook.stem}.html"
    target.write_text(html, encoding="utf-8")
    slides, pages, notes = outline(nb.cells)
    stored = any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    return Deck(target, slides, pages, notes, stored)
