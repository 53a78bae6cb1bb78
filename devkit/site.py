"""The course as a static website, both editions: `python3 tasklab.py site`.

What a class reads without a kernel — on a phone, ahead of a class, or from a link an
instructor sends to a section: every chapter notebook with a finished run's outputs, the
rules (`RULES.md` / `RULES.zh-CN.md`) and the instructor's kit (`docs/teaching/`, the
course map among it), once in English (`_site/en/`) and once in 中文 (`_site/zh/`), each
page with a link to its twin in the other edition. `_site/index.html` lets a reader choose.
The output is plain files that work from disk or any static host; nothing here deploys it.

**The builder: Sphinx with myst-nb and sphinx-book-theme** (the `site` extra). All three
install from PyPI and build with no network: the theme ships its fonts, icons and scripts,
and the pages load nothing from another host (the site's test checks every page). Jupyter
Book 2 (MyST) was the other candidate; it installs from PyPI too but fetches its site
template from the web at build time, so it cannot build on a machine without internet.

**Where the outputs come from.** The English pages show the stored outputs of
`notebooks/*.ipynb` — the run nbval checks — and nothing executes them here (myst-nb's
`nb_execution_mode = "off"`, `docs/site/conf.py`). The 中文 notebooks (`notebooks/zh/`,
`devkit.editions`) carry no outputs, so the build runs each one once, top to bottom, in a
kernel started in `notebooks/zh/`, which speaks 中文 as a 中文 learner's does
(`devkit.i18n.lang`; TEAMDESK_LANG is left unset, as the product would note it in the
first output as a setting it does not know). They run on embedded servers of the build's
own (`.teamdesk-site0/`, `-site1/`, …: the notebooks stop and restart their servers, which
must never be an open lab's), `LANES` at a time, each lane on its own servers, longest
first. A run is kept in `.site-build/zh-run/` under a key made of its notebook and the
code it runs (`RUN_INPUTS`), so the next build reruns only what changed.

Why run rather than store a 中文 run: a stored run is a second copy of every chapter's
outputs, to regenerate whenever an English notebook changes (its 中文 edition is rebuilt
from it) and to check against a fresh run, and it lags visibly behind the code it shows.
A run at build time is always the current code's, in the current 中文 text. It costs what
the notebooks take to run, split over the lanes; so the suite's test builds the site with
one 中文 notebook run (the other 中文 pages from their sources) and checks its structure,
and the whole build is a step of `.ci/run`, after the tests.

Presenter notes (cells tagged `presenter`) are left out, as in the learners' copies
(`devkit.copies`); a hidden solution is shown behind a toggle.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import posixpath
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from devkit import notebook_cells, services
from devkit.copies import PRESENTER_TAG, resolve_names, source_notebooks, write_whole
from devkit.i18n import CJK, LOCALES
from devkit.notebook_cells import FENCE
from teamdesk.config import Settings
from teamdesk.redaction import redact_text

ROOT = Path(__file__).resolve().parent.parent
#: Where the site goes (git-ignored): `index.html`, `en/`, `zh/`.
OUT = ROOT / "_site"
#: The build's own files (git-ignored): staged sources, Sphinx's caches, the 中文 runs.
WORK = ROOT / ".site-build"
#: Sphinx's configuration, templates and landing pages, shared by both editions, and the
#: site's own front page (`root.html`: the two editions, nothing loaded from elsewhere).
CONF = ROOT / "docs" / "site"
NOTEBOOKS = ROOT / "notebooks"
#: A cell that runs longer has hung (as nbval's bound in `tasklab.NBVAL_ARGS`).
CELL_TIMEOUT_S = 120
#: 中文 notebooks run at once, each on its own servers: they mostly wait on servers,
#: worker processes and gates, so three keep two cores busy (as the suite's six workers).
LANES = 3
#: What a 中文 run depends on besides its notebook: a change here runs it again.
RUN_INPUTS = ("teamdesk", "labs", "devkit", "constraints.txt")
_THIS = Path(__file__).resolve()


class SiteError(Exception):
    """The build cannot go on: `problem` and the `fix`, each said in one line."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


@dataclass(frozen=True)
class Edition:
    """One language of the site: where its sources are, and what Sphinx calls it."""

    #: The edition's folder in the site, and its id in `devkit.editions`.
    lang: str
    #: Sphinx's `language` (the theme's own words: search, contents, …).
    sphinx_language: str
    #: What the language switch on the other edition's pages says.
    label: str
    #: The notebooks of this edition.
    notebooks: Path
    #: Markdown pages: the page's name in the site (its docname) → the file in the checkout.
    pages: dict[str, Path] = field(default_factory=dict)


def editions(root: Path = ROOT) -> dict[str, Edition]:
    """Both editions, with the pages each one has; a page only in English (the workshop,
    the class servers) is linked from the 中文 pages to the English site."""
    teaching = root / "docs" / "teaching"
    en = {"RULES": root / "RULES.md",
          **{f"teaching/{p.stem}": p for p in sorted(teaching.glob("*.md"))},
          "classroom": root / "docs" / "classroom.md"}
    zh = {"RULES": root / "RULES.zh-CN.md",
          **{f"teaching/{p.stem}": p for p in sorted((teaching / "zh").glob("*.md"))}}
    return {"en": Edition("en", LOCALES["en"], "English", root / "notebooks", en),
            "zh": Edition("zh", LOCALES["zh"], "中文", root / "notebooks" / "zh", zh)}


def chapters(root: Path = ROOT) -> list[str]:
    """The chapter notebooks' names (`23-outbox`, …), in the course's order."""
    return [p.stem for p in source_notebooks(root)]


# --- Staging: each edition's sources, laid out as its site --------------------------------


def site_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`nb` as the site shows it: without presenter notes, hidden sources behind a toggle."""
    nb = nbformat.from_dict(nb)
    nb.cells = [c for c in nb.cells if PRESENTER_TAG not in notebook_cells.tags(c)]
    for cell in nb.cells:
        hidden = cell.metadata.get("jupyter", {})
        tags = list(notebook_cells.tags(cell))  # a copy: the page adds to it
        for flag, tag in (("source_hidden", "hide-input"), ("outputs_hidden", "hide-output")):
            if hidden.get(flag) and tag not in tags:
                tags.append(tag)
        if tags:
            cell.metadata["tags"] = tags
    return nb


_LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(([^)\s]+)\)")


def relink(text: str, source: Path, lang: str, where: dict[Path, tuple[str, str]],
           docname: str) -> str:
    """Markdown `text` from `source` with its links to other pages of the course pointing
    at those pages in the site: within the edition to the staged file (Sphinx checks it),
    to the other edition as a relative URL of the built page. `where` maps a checkout
    file to (edition, docname); other links are left as they are."""

    def one(match: re.Match[str]) -> str:
        label, target = match.groups()
        path, _, anchor = target.partition("#")
        if not path or re.match(r"^[a-z][a-z0-9+.-]*:", path):
            return match.group(0)
        found = where.get((source.parent / path).resolve())
        if found is None:
            return match.group(0)
        edition, page = found
        suffix = f"#{anchor}" if anchor else ""
        if edition == lang:
            target_file = page + (".ipynb" if page.startswith("notebooks/") else ".md")
            rel = posixpath.relpath(target_file, posixpath.dirname(docname) or ".")
            return f"[{label}]({rel}{suffix})"
        up = "../" * (docname.count("/") + 1)
        scheme = "edition-anchor" if anchor else "edition"  # docs/site/conf.py
        return f"[{label}]({scheme}:{up}{edition}/{page}.html{suffix})"

    return _LINK.sub(one, text)


_CJK_BREAK = re.compile(f"(?<=[{CJK}\u201c\u201d])\n[ \t]*(?=[{CJK}\u201c])")


def join_cjk_lines(text: str) -> str:
    """Markdown `text` without the line breaks that fall between two Chinese characters:
    a browser shows such a break as a space (`待投递箱、 把任务`), where the source only
    wrapped a long line. Fenced code is left as it is."""
    parts, last = [], 0
    for fence in FENCE.finditer(text):
        parts += [_CJK_BREAK.sub("", text[last:fence.start()]), fence.group(0)]
        last = fence.end()
    return "".join([*parts, _CJK_BREAK.sub("", text[last:])])


def _write_if_changed(path: Path, data: bytes) -> None:
    """Write `path` unless it already holds `data`, so Sphinx rereads only what changed."""
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def stage(edition: Edition, notebooks: dict[str, nbformat.NotebookNode], srcdir: Path,
          where: dict[Path, tuple[str, str]]) -> set[str]:
    """Lay out one edition's sources in `srcdir`; returns its docnames."""
    prose = join_cjk_lines if edition.lang == "zh" else (lambda text: text)
    landing = (CONF / edition.lang / "index.md").read_text(encoding="utf-8")
    files: dict[str, bytes] = {"index.md": prose(landing).encode()}
    for name, nb in notebooks.items():
        files[f"notebooks/{name}.ipynb"] = nbformat.writes(site_notebook(nb)).encode()
    for docname, path in edition.pages.items():
        text = relink(path.read_text(encoding="utf-8"), path, edition.lang, where, docname)
        files[f"{docname}.md"] = prose(text).encode()
    for rel, data in files.items():
        _write_if_changed(srcdir / rel, data)
    for old in srcdir.rglob("*"):  # a page that is gone must not stay in the site
        if old.is_file() and old.relative_to(srcdir).as_posix() not in files:
            old.unlink()
    return {rel.rsplit(".", 1)[0] for rel in files}


def checkout_map(eds: dict[str, Edition], names: Iterable[str]) -> dict[Path, tuple[str, str]]:
    """Every checkout file the site shows → (edition, docname)."""
    where: dict[Path, tuple[str, str]] = {}
    for ed in eds.values():
        for docname, path in ed.pages.items():
            where[path.resolve()] = (ed.lang, docname)
        for name in names:
            where[(ed.notebooks / f"{name}.ipynb").resolve()] = (ed.lang, f"notebooks/{name}")
    return where


# --- The 中文 runs -------------------------------------------------------------------------


def run_inputs_digest(root: Path = ROOT) -> str:
    """A digest of the code a notebook's run depends on (`RUN_INPUTS`)."""
    digest = hashlib.sha256()
    for entry in RUN_INPUTS:
        path = root / entry
        found = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in found:
            # Not this module: how pages are laid out does not change what a run prints.
            if file.is_file() and "__pycache__" not in file.parts and file != _THIS:
                digest.update(file.relative_to(root).as_posix().encode() + b"\0")
                digest.update(file.read_bytes())
    return digest.hexdigest()


def run_key(source: Path, inputs: str) -> str:
    """What a kept 中文 run was made from: its notebook and the code it ran."""
    return hashlib.sha256(source.read_bytes() + inputs.encode()).hexdigest()[:16]


def kept_run(path: Path, key: str) -> nbformat.NotebookNode | None:
    """The run kept at `path` when it was made from `key`, else None."""
    if not path.exists():
        return None
    nb = nbformat.read(path, as_version=4)
    return nb if nb.metadata.get("teamdesk_site", {}).get("key") == key else None


def _failure(name: str, err: BaseException) -> SiteError:
    """One line for a 中文 run that failed: which notebook, which cell (its first line, as
    nbclient quotes it), what it raised; a URL's password masked (S2)."""
    text = redact_text(re.sub(r"\x1b\[[0-9;]*m", "", str(err))).strip().splitlines()
    error = next((line for line in reversed(text) if re.match(r"^\w*(Error|Exception)", line)),
                 text[-1] if text else type(err).__name__)
    rules = [k for k, line in enumerate(text) if set(line) == {"-"}]
    cell = f" at the cell `{text[rules[0] + 1][:60]}`" if len(rules) >= 2 else ""
    return SiteError(f"the 中文 run of notebooks/zh/{name}.ipynb failed{cell}: {error[:300]}",
                     f"run it under nbval for the whole traceback: python3 tasklab.py test "
                     f"notebooks/{name}.ipynb")


def execute(nb: nbformat.NotebookNode, env: dict[str, str], cwd: Path, log: Path) -> None:
    """Run every cell of `nb` in a fresh kernel with `env`, outputs kept in `nb`; what the
    kernel process itself prints goes to `log`."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            record_timing=False, resources={"metadata": {"path": str(cwd)}})
    with open(log, "w", encoding="utf-8") as out:
        client.execute(env=env, stdout=out, stderr=out)


def _hold_servers(folder: Path) -> None:
    """Start (or reuse) the embedded servers in `folder`, kept while this process lives;
    none with DATABASE_URL and REDIS_URL set (the notebooks use those, as everything does)."""
    settings = Settings.from_env()
    if not (settings.database_url and settings.redis_url):
        services.ensure_services(owner_pid=os.getpid(), root=folder)


def _zh_sources(root: Path = ROOT) -> dict[str, Path]:
    """The 中文 notebooks by name; one not translated yet is run from its English text, the
    lab's own words in 中文 all the same."""
    return {p.stem: p for p in source_notebooks(root, "zh")}


def run_zh(names: Sequence[str], cache: Path, lanes: Sequence[Path], report: Callable[[str], None],
           executor: Callable[..., None] = execute, hold: Callable[[Path], None] = _hold_servers,
           only: Sequence[str] | None = None) -> dict[str, nbformat.NotebookNode]:
    """The 中文 notebooks `names`, run: kept runs where still current, the others run now
    (of those, only the ones in `only` when it is given), `len(lanes)` at a time, each lane
    on the servers of its folder (`hold` starts them)."""
    eds = editions()
    zh = _zh_sources()
    inputs = run_inputs_digest()
    done: dict[str, nbformat.NotebookNode] = {}
    todo: list[tuple[str, Path, str]] = []
    for name in names:
        source = zh[name]
        key = run_key(source, inputs)
        kept = kept_run(cache / f"{name}.ipynb", key)
        if kept is not None:
            done[name] = kept
        elif only is None or name in only:
            todo.append((name, source, key))
    if not todo:
        report(f"中文 runs: {len(done)} kept from the last build, none to run")
        return done
    report(f"中文 runs: {len(todo)} to run ({len(done)} kept), {min(len(lanes), len(todo))} at a "
        "time on embedded servers of the build's own")
    # Longest first (the last run's time, else the English notebook's size), so no lane
    # starts a long one while the other is nearly done.
    todo.sort(key=lambda t: -_expected_seconds(cache / f"{t[0]}.ipynb",
                                               NOTEBOOKS / f"{t[0]}.ipynb"))
    queue = list(todo)
    lock = threading.Lock()

    # The kernel speaks 中文 as a 中文 learner's does: it starts in `notebooks/zh/`
    # (devkit.i18n.lang), with no TEAMDESK_LANG to say otherwise. As in the suite, a pytest
    # run inside a notebook keeps the servers it was given (TEAMDESK_LAB_DATA_DIR set).
    base = {k: v for k, v in os.environ.items() if k != "TEAMDESK_LANG"}
    base.setdefault("TEAMDESK_LAB_DATA_DIR", str(services.data_dir()))
    base["PYTHONUNBUFFERED"] = "1"

    def stop_the_lanes() -> None:
        with lock:
            queue.clear()  # the other lanes stop after their current notebook

    def lane(folder: Path) -> None:
        try:
            hold(folder)
        except Exception:
            stop_the_lanes()
            raise  # the servers' own error: it names no notebook
        env = {**base, "TEAMDESK_DATA_DIR": str(folder)}
        while True:
            with lock:
                if not queue:
                    return
                name, source, key = queue.pop(0)
            started = time.monotonic()
            report(f"running 中文 {name} …")
            nb = nbformat.read(source, as_version=4)
            cache.mkdir(parents=True, exist_ok=True)
            try:
                executor(nb, env, eds["zh"].notebooks, cache / f"{name}.kernel.log")
            except Exception as err:
                stop_the_lanes()
                raise _failure(name, err) from None
            seconds = time.monotonic() - started
            nb.metadata["teamdesk_site"] = {"key": key, "seconds": round(seconds, 1)}
            # Whole or not at all: the next build reads it back (`kept_run`), and half a
            # file left by a cut write would stop that build there.
            write_whole(cache / f"{name}.ipynb", nbformat.writes(nb) + "\n")
            with lock:
                done[name] = nb
            report(f"中文 {name}: ran in {seconds:.0f} s ({len(done)}/{len(names)})")

    with ThreadPoolExecutor(max_workers=min(len(lanes), len(todo))) as pool:
        futures = [pool.submit(lane, folder) for folder in lanes[:len(todo)]]
        for future in futures:
            future.result()  # a lane's SiteError goes up as it is
    return done


def _expected_seconds(kept: Path, english: Path) -> float:
    try:
        return float(nbformat.read(kept, as_version=4).metadata["teamdesk_site"]["seconds"])
    except (OSError, KeyError, ValueError, TypeError):
        return english.stat().st_size / 10_000


# --- Sphinx ------------------------------------------------------------------------------


def sphinx(edition: Edition, work: Path, twins: dict[str, Any]) -> Path:
    """Build one edition's HTML with Sphinx in `work/<lang>/` (sources in `src/`, pages in
    `html/`, myst-nb's files beside them); returns the pages' folder. Any warning (a link
    to a page the site lacks, a page in no table of contents) fails the build, with the
    first one in the message and all of them in `sphinx.log`."""
    try:
        from sphinx.application import Sphinx
        from sphinx.util.console import nocolor
        from sphinx.util.docutils import docutils_namespace, patch_docutils
    except ImportError:
        raise SiteError("Sphinx is not installed in this environment (the `site` extra)",
                        "run python3 tasklab.py site, which installs it into .venv/") from None
    import io

    home = work / edition.lang
    nocolor()  # plain text in the log and in the message
    problems = io.StringIO()
    log = home / "sphinx.log"
    # As sphinx-build does: each build registers its directives in a namespace of its own.
    # The extensions' notices of Sphinx APIs they will have to change are not the site's.
    with (open(log, "w", encoding="utf-8") as status, patch_docutils(CONF),
          docutils_namespace(), warnings.catch_warnings()):
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        app = Sphinx(str(home / "src"), str(CONF), str(home / "html"), str(home / "doctrees"),
                     "html", confoverrides={"language": edition.sphinx_language,
                                            "html_context": {"site_edition": twins}},
                     status=status, warning=problems, freshenv=False)
        app.build()
    found = [line for line in problems.getvalue().splitlines()
             if "WARNING" in line or "ERROR" in line]
    if found or app.statuscode:
        with open(log, "a", encoding="utf-8") as status:
            status.write(problems.getvalue())
        first = found[0] if found else f"exit {app.statuscode}"
        raise SiteError(f"the {edition.label} edition: {len(found)} Sphinx warning(s); the "
                        f"first: {first}", f"fix it in the source; all of them: {log}")
    return home / "html"


def _left_out(rel: Path) -> bool:
    """Built files the site does without: Sphinx's build stamp, the theme's source maps
    (half its size; a browser asks for them only with its developer tools open) and the
    theme's template macros it copies among its static files."""
    return (rel.name == ".buildinfo" or rel.suffix == ".map"
            or (rel.parts[0] == "_static" and rel.suffix == ".html"))


def mirror(pages: Path, dest: Path) -> None:
    """Make `dest` hold what `pages` holds (less `_left_out`), copying only what changed."""
    wanted = set()
    for path in pages.rglob("*"):
        rel = path.relative_to(pages)
        if path.is_dir() or _left_out(rel):
            continue
        wanted.add(rel)
        _write_if_changed(dest / rel, path.read_bytes())
    for path in sorted(dest.rglob("*"), reverse=True):
        if path.is_file() and path.relative_to(dest) not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


# --- The build ---------------------------------------------------------------------------


@dataclass
class Built:
    """What a build made, for its last line and for the tests."""

    out: Path
    #: Pages per edition (Sphinx docnames).
    pages: dict[str, set[str]]
    #: 中文 notebooks shown without outputs (a partial build's; none in a full one).
    unrun: list[str]

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.out.rglob("*") if p.is_file())


def build(out: Path = OUT, work: Path = WORK, run: Sequence[str] | None = None,
          lanes: Sequence[Path] | None = None,
          report: Callable[[str], None] | None = None) -> Built:
    """Build the site into `out`. `run`: the 中文 notebooks to run if their kept run is not
    current (default: all; the others show a kept run, or their code without outputs);
    `lanes`: the data folders of the servers they run on (default: `LANES` folders of the
    build's own)."""
    start = time.monotonic()
    report = report or (lambda msg: None)

    def progress(msg: str) -> None:
        report(f"{time.monotonic() - start:5.0f} s  {msg}")

    names = chapters()
    eds = editions()
    zh = _zh_sources()
    if lanes is None:
        lanes = [Path(f"{services.data_dir()}-site{k}") for k in range(LANES)]
    zh_runs = run_zh(names, work / "zh-run", lanes, progress, only=run)
    sources = {
        "en": {n: nbformat.read(eds["en"].notebooks / f"{n}.ipynb", as_version=4) for n in names},
        "zh": {n: zh_runs.get(n) or nbformat.read(zh[n], as_version=4)
               for n in names},
    }
    where = checkout_map(eds, names)
    docs = {lang: stage(ed, sources[lang], work / lang / "src", where)
            for lang, ed in eds.items()}
    for lang, ed in eds.items():
        other = next(o for o in eds.values() if o.lang != lang)
        twins = {"other": other.lang, "label": other.label, "pages": sorted(docs[other.lang])}
        progress(f"building the {ed.label} pages (Sphinx) …")
        mirror(sphinx(ed, work, twins), out / lang)
    _write_if_changed(out / "index.html", (CONF / "root.html").read_bytes())
    built = Built(out, docs, [n for n in names if n not in zh_runs])
    progress(f"site ready: {out / 'index.html'} ({built.size() / 1e6:.1f} MB)")
    return built




def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tasklab.py site", description="Build the course website, both editions, into "
        "_site/ (the 中文 notebooks are run; a second build reruns only what changed).")
    parser.add_argument("--out", type=Path, default=OUT, help="where the site goes (_site/)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run only these 中文 notebooks (23-outbox, or 23); the other "
                             "中文 pages show their last run if it is still current, else "
                             "their code without outputs")
    args = parser.parse_args(argv)

    def report(msg: str) -> None:
        print(f"[site] {msg}", flush=True)

    try:
        try:
            only = None if args.only is None else [
                p.stem for p in resolve_names(ROOT, args.only)]
        except ValueError as unknown:
            problem, _, fix = str(unknown).partition("; ")
            raise SiteError(problem, fix) from None
        built = build(out=args.out.resolve(), run=only, report=report)
    except SiteError as err:
        print(f"[site] error: {err.problem}\n[site] fix: {err.fix}", file=sys.stderr)
        return 1
    except services.ServiceError as err:
        print(f"[site] error: the embedded servers for the 中文 runs: {redact_text(str(err))}",
              file=sys.stderr)  # S2
        return 1
    except KeyboardInterrupt:
        print("[site] interrupted; the runs that finished are kept for the next build",
              file=sys.stderr)
        return 130
    if built.unrun:
        report(f"中文 pages without outputs (not run): {' '.join(built.unrun)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
