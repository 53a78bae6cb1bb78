"""The course website (`devkit.site`, `python3 tasklab.py site`), built for real: Sphinx,
myst-nb and sphinx-book-theme, and a 中文 notebook run in a real kernel on real servers.

One build for the module: the English pages from the stored outputs, the 中文 pages from
their sources, with one notebook (`00-start-here`) run on this worker's servers. The whole
build, every 中文 notebook run, is a step of `.ci/run` (it takes what the notebooks take);
what it adds over this one is more runs of the same code path.

The build itself fails on any Sphinx warning (a link to a page that is not in the site, a
page in no table of contents); the tests read the HTML it made.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from devkit import services, site

pytestmark = pytest.mark.integration

#: The 中文 notebook this build runs (the shortest chapter).
RUN = "00-start-here"
#: Tags whose `src`/`href` the browser loads on its own (an asset, not a link to follow).
ASSETS = {"script": "src", "link": "href", "img": "src", "iframe": "src", "source": "src",
          "video": "src", "audio": "src", "embed": "src", "object": "data"}
CJK = re.compile(r"[\u4e00-\u9fff]")


class Page(HTMLParser):
    """One built page: its links, its assets, its ids, the switch and its outputs' text."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.links: list[str] = []
        self.assets: list[str] = []
        self.ids: set[str] = set()
        self.switch: str | None = None
        self.output_text: list[str] = []
        self._in_output = 0
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag in ASSETS and a.get(ASSETS[tag]):
            self.assets.append(a[ASSETS[tag]])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
            if "edition-switch" in a.get("class", "").split():
                self.switch = a["href"]
        classes = a.get("class", "").split()
        if self._in_output or "cell_output" in classes:
            self._in_output += tag not in ("br", "img", "input", "meta", "link", "hr")

    def handle_endtag(self, tag: str) -> None:
        if self._in_output and tag not in ("br", "img", "input", "meta", "link", "hr"):
            self._in_output -= 1

    def handle_data(self, data: str) -> None:
        if self._in_output:
            self.output_text.append(data)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> site.Built:
    root = tmp_path_factory.mktemp("site")
    return site.build(out=root / "_site", work=root / "work", run=[RUN],
                      lanes=[services.data_dir()])


@pytest.fixture(scope="module")
def pages(built: site.Built) -> dict[Path, Page]:
    return {p: Page(p) for p in sorted(built.out.rglob("*.html"))}


def _local(href: str) -> bool:
    """A path in the site (not `#anchor` alone, not elsewhere)."""
    return not (_remote(href) or href.startswith("#"))


def _remote(href: str) -> bool:
    parts = urlsplit(href)
    return bool((parts.scheme and parts.scheme != "data") or parts.netloc
                or href.startswith("//"))


def test_every_chapter_has_a_page_in_both_editions(built: site.Built) -> None:
    names = site.chapters()
    assert len(names) >= 10
    for lang in ("en", "zh"):
        for name in names:
            assert (built.out / lang / "notebooks" / f"{name}.html").is_file(), (lang, name)
        for page in ("index", "RULES", "teaching/README", "teaching/course-map",
                     "teaching/class-90min"):
            assert (built.out / lang / f"{page}.html").is_file(), (lang, page)
    assert built.unrun == [n for n in names if n != RUN]


def test_every_link_between_pages_resolves(pages: dict[Path, Page]) -> None:
    """Every relative link and asset of every page names a file of the site, and a link
    with an anchor names an id on that page (the switch, the relinked docs, the nav)."""
    broken = []
    for path, page in pages.items():
        for href in page.links + page.assets:
            if not _local(href):
                continue
            parts = urlsplit(href)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not target.exists():
                broken.append(f"{path.name}: {href}")
            elif parts.fragment and target.suffix == ".html" and target in pages and (
                    unquote(parts.fragment) not in pages[target].ids):
                broken.append(f"{path.name}: {href} (no such anchor)")
    assert not broken, broken


def test_each_page_links_to_its_twin(built: site.Built, pages: dict[Path, Page]) -> None:
    """English page ↔ its 中文 twin; a page one edition lacks links to the other's home."""
    for lang, other in (("en", "zh"), ("zh", "en")):
        for docname in built.pages[lang]:
            path = built.out / lang / f"{docname}.html"
            switch = pages[path].switch
            assert switch, f"{lang}/{docname} has no language switch"
            twin = docname if docname in built.pages[other] else "index"
            assert (path.parent / switch).resolve() == built.out / other / f"{twin}.html"
    assert "teaching/workshop-half-day" not in built.pages["zh"]  # the English-only page


def test_the_chinese_run_shows_chinese_outputs(built: site.Built, pages: dict[Path, Page]) -> None:
    """The lab's own words (a reveal, the board's columns) in 中文: not only the 中文 text
    of the notebook's code, which an English-speaking harness would print as well."""
    zh = "".join(pages[built.out / "zh" / "notebooks" / f"{RUN}.html"].output_text)
    en = "".join(pages[built.out / "en" / "notebooks" / f"{RUN}.html"].output_text)
    assert "What happened:" in en and not CJK.search(en)
    assert "实际发生的是" in zh and "What happened:" not in zh
    assert "判定" in zh and "verdict" in en  # the board's column
    assert "unknown setting" not in zh
    # A notebook that was not run shows its code, and no outputs.
    unrun = pages[built.out / "zh" / "notebooks" / f"{built.unrun[0]}.html"]
    assert not "".join(unrun.output_text).strip()


def test_nothing_is_loaded_from_another_host(built: site.Built, pages: dict[Path, Page]) -> None:
    """Offline: no page loads a script, stylesheet, font or image from elsewhere, and no
    stylesheet imports one (a theme's fonts from a CDN would be there)."""
    remote = [f"{p.relative_to(built.out)}: {a}" for p, page in pages.items()
              for a in page.assets if _remote(a)]
    assert sum(len(page.assets) for page in pages.values()) > 500  # the parser saw them
    assert not remote, remote[:10]
    for css in built.out.rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        assert not re.search(r"(url\(|@import)\s*['\"]?(https?:)?//", text), css


def test_presenter_notes_are_left_out_and_solutions_folded(built: site.Built) -> None:
    """As in the learners' copies: the instructor's notes stay in the repository."""
    for lang, word in (("en", "Presenter:"), ("zh", "讲者提示")):
        text = (built.out / lang / "notebooks" / "26b-takeover-race.html").read_text()
        assert word not in text, lang
        assert "solution_where" in text and "tag_hide-input" in text, lang


def test_the_root_page_offers_both_editions(pages: dict[Path, Page], built: site.Built) -> None:
    root = pages[built.out / "index.html"]
    assert {"en/index.html", "zh/index.html"} <= set(root.links)
