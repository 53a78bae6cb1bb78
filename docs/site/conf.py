"""Sphinx's configuration of the course website, shared by both editions.

`devkit.site` stages each edition's sources (the notebooks, the rules, the instructor's
kit and its landing page from `en/` or `zh/` here) and builds it with this configuration,
overriding `language` and giving the other edition's pages in `html_context`
(`site_edition`), from which each page gets the link to its twin.
"""

from __future__ import annotations

project = "TeamDesk Task Lab"
author = "TeamDesk Task Lab contributors"
copyright = "TeamDesk Task Lab contributors"

extensions = ["myst_nb"]

# The English pages show the stored outputs nbval checks, and the 中文 ones the run
# devkit.site made: myst-nb executes nothing.
nb_execution_mode = "off"
# Widgets would load require.js and the widget manager from a CDN; the notebooks have none.
nb_ipywidgets_js: dict[str, dict[str, str]] = {}
nb_merge_streams = True
# `## Heading` anchors, so a link to a section (`page.md#how-to-present`) resolves.
myst_heading_anchors = 3
# Links from one edition to a page of the other: `edition:../zh/teaching/README.html`
# becomes that relative URL (devkit.site.relink writes them; `edition-anchor:` keeps the
# `#section`, which a template without {{fragment}} drops and one with it leaves as `#`).
myst_url_schemes = {
    "http": None, "https": None, "mailto": None,
    "edition": "{{path}}",
    "edition-anchor": "{{path}}#{{fragment}}",
}

html_theme = "sphinx_book_theme"
html_title = "TeamDesk Task Lab"
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["site.css"]
# The pages are the product: no copies of their sources, no "built with" line.
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "article_header_end": ["edition-switch.html", "article-header-buttons.html"],
}


def _twin(app, pagename, templatename, context, doctree) -> None:
    """The link to this page in the other edition, or to its home page if it has none."""
    edition = context.get("site_edition")
    if not edition:
        return
    same = pagename in edition["pages"] or pagename in ("search", "genindex")
    up = "../" * (pagename.count("/") + 1)
    context["twin_url"] = f"{up}{edition['other']}/{pagename if same else 'index'}.html"
    context["twin_lang"] = edition["other"]
    context["twin_label"] = edition["label"]


def setup(app):
    app.connect("html-page-context", _twin)
