"""The learner's own copies of the notebooks: spoiler-free, theirs to edit, and kept up to
date with the course where the learner has not written anything of their own.

The repository's `notebooks/*.ipynb` are CI's regression source: nbval compares every
cell with its stored output, so they carry the answers of every prediction. A learner
works in `my-notebooks/` instead (git-ignored), made on first use from `notebooks/`:

- every output and execution count cleared, so no answer is on screen before its cell
  runs (a `predict` cell is followed by a scene whose result the learner has not seen);
- cells tagged `presenter` (the instructor's notes) left out;
- everything else kept: sources (hidden ones too), tags, cell and notebook metadata.

**When a notebook is updated** (a `git pull`, a new image on the hub), each copy follows
nbgitpuller's rule — refresh what the learner has not modified, keep what they have —
with "modified" meaning *their work*: a cell's type, source or tags changed, a cell added
or deleted (`work_fingerprint`). Running cells only adds outputs and execution counts,
which a refresh makes again on the next run; an edited cell or an answered prediction is
the learner's and is never overwritten. So:

- a copy the learner has not modified is made again from the updated notebook;
- a modified copy is kept as it is, and the updated notebook is put beside it as
  `26b-takeover-race.updated.ipynb` (one such file per copy, replaced when the notebook
  changes again), with a one-line notice in the report (`describe`).

What each copy was made from is recorded in `my-notebooks/[zh/].copies.json`
(`MANIFEST`). A copy without a record (made before records were kept, or the record
lost) is not known to be unmodified: it is kept unless it already equals the copy the
current notebook makes, and the current notebook goes beside it. The same rule runs on a
laptop (`teamdesk lab`) and on a hub (`ensure_copies(root, lang)` before the learner's
server starts).

`teamdesk lab --fresh 26b` (or `--fresh all`) puts the old copy aside in
`my-notebooks/.replaced/` and makes a new one. Nothing here writes into `notebooks/` (the
lab also opens those read-only: `devkit.contents`), and every file is written whole or
not at all (a temporary file, then a rename).

One folder per edition (`devkit.editions`): the English copies in `my-notebooks/`, the
中文 ones in `my-notebooks/zh/`, made from `notebooks/zh/` (a notebook whose 中文 edition
is not written yet is copied from the English one, so the course is whole in both).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit import i18n, notebook_cells

#: The learner's folder, beside `notebooks/` (same depth, so relative paths still work).
LEARNER_DIR = "my-notebooks"
#: Where a copy goes when the learner asks for a fresh one.
REPLACED_DIR = ".replaced"
#: Cells with this tag are the instructor's notes: in the repository, not in a copy.
PRESENTER_TAG = "presenter"
#: The record of what each copy of a learner folder was made from (hidden, like
#: `.replaced/`): `{"format": 1, "copies": {file name: {"version": …, "written": …,
#: "updated": {"version": …, "written": …}}}}`. `version` is the `version_fingerprint` of
#: the copy made, `written` its `work_fingerprint` (both `null` for a copy found without a
#: record), `updated` the same two of the updated notebook put beside a modified copy.
MANIFEST = ".copies.json"
MANIFEST_FORMAT = 1
#: Between a chapter's stem and `.ipynb` in the name of an updated notebook put beside a
#: modified copy. A chapter notebook's stem has no dot (`26b-takeover-race`), and chapters
#: are only ever read from `notebooks/` (`source_notebooks`), so it is never taken for one.
UPDATED_SUFFIX = ".updated"


@dataclass(frozen=True)
class Beside:
    """An updated notebook put beside a copy that was kept."""

    #: The learner's copy, kept as it is.
    copy: str
    #: The updated notebook's file, in the same folder.
    file: str
    #: True: the learner changed the copy. False: the copy has no record of what it was
    #: made from (made before records were kept) and differs from the current notebook.
    changed: bool = True


@dataclass
class CopyReport:
    """What `ensure_copies` / `fresh_copies` did, by notebook file name."""

    created: list[str] = field(default_factory=list)
    #: Copies the learner had not modified, made again from their updated notebook.
    refreshed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: Updated notebooks put beside a kept copy, this time (not again on later runs).
    beside: list[Beside] = field(default_factory=list)
    #: Old copies put aside, as paths relative to the learner folder.
    replaced: list[str] = field(default_factory=list)


def source_notebooks(project: Path, lang: str = "en") -> list[Path]:
    """The chapter notebooks of edition `lang`, in course order (00, 23, …, 90)."""
    english = sorted((project / "notebooks").glob("[0-9]*.ipynb"))
    if lang == "en":
        return english
    return [e if not (project / "notebooks" / lang / e.name).exists()
            else project / "notebooks" / lang / e.name for e in english]


def learner_dir(project: Path, lang: str = "en") -> Path:
    """The learner's folder of edition `lang`: `my-notebooks/`, `my-notebooks/zh/`."""
    return project / LEARNER_DIR if lang == "en" else project / LEARNER_DIR / lang


def updated_name(name: str) -> str:
    """The file an updated notebook is put in beside the copy `name`
    (`26b-takeover-race.ipynb` → `26b-takeover-race.updated.ipynb`)."""
    return name.removesuffix(".ipynb") + UPDATED_SUFFIX + ".ipynb"


def learner_copy(nb: dict[str, Any]) -> dict[str, Any]:
    """A learner's copy of notebook JSON `nb`: outputs and execution counts cleared,
    presenter cells left out, everything else as it is."""
    cells = []
    for cell in nb.get("cells", []):
        if PRESENTER_TAG in notebook_cells.tags(cell):
            continue
        cell = dict(cell)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
            meta = dict(cell.get("metadata", {}))
            meta.pop("execution", None)  # timings of the stored run
            cell["metadata"] = meta
        cells.append(cell)
    return {**nb, "cells": cells}


def _digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def work_fingerprint(nb: dict[str, Any]) -> str:
    """What a learner reads and writes in notebook `nb`: each cell's type, source and
    tags, in order. Not outputs, execution counts or the metadata Jupyter keeps (a cell
    collapsed, scrolled, timed): running a copy leaves this fingerprint as it was."""
    return _digest([[c.get("cell_type"), notebook_cells.source(c), notebook_cells.tags(c)]
                    for c in nb.get("cells", [])])


def version_fingerprint(copy: dict[str, Any]) -> str:
    """Everything learner copy `copy` carries (sources, tags, hidden sources, notebook
    metadata) but what changes when a notebook is run again with nothing else changed:
    cell ids and the kernel's `language_info`. Whether a notebook was updated."""
    meta = {k: v for k, v in copy.get("metadata", {}).items() if k != "language_info"}
    cells = [{k: v for k, v in c.items() if k != "id"} for c in copy.get("cells", [])]
    return _digest({**copy, "metadata": meta, "cells": cells})


def write_whole(path: Path, text: str) -> None:
    """`text` into `path`, whole or not at all: a hidden temporary file beside it (its own
    name, so two writers never share one), then a rename; removed if anything fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("x", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_notebook(path: Path, nb: dict[str, Any]) -> None:
    """Write notebook JSON `nb` in nbformat's own layout (indent 1, sorted keys, a final
    newline), atomically: Jupyter's next save of it, and a tool's edit of a repository
    notebook, change nothing but what was meant."""
    write_whole(path, json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n")


def _work_of(path: Path) -> str | None:
    """`work_fingerprint` of the notebook in `path`; None if it is not one we can read
    (then it is the learner's, whatever it holds)."""
    try:
        nb = notebook_cells.read(path)
        return work_fingerprint(nb) if isinstance(nb, dict) else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _load_records(folder: Path) -> dict[str, dict[str, Any]]:
    """The manifest's records by copy name; none when it is missing or unreadable (every
    copy is then one without a record, which is never overwritten)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return {}
    found = manifest.get("copies")
    return {k: v for k, v in found.items() if isinstance(v, dict)} if isinstance(
        found, dict) else {}


def _save_records(folder: Path, records: dict[str, dict[str, Any]]) -> None:
    write_whole(folder / MANIFEST, json.dumps(
        {"format": MANIFEST_FORMAT, "copies": records}, indent=1, sort_keys=True) + "\n")


class _Folder:
    """One learner folder while its copies are brought up to date: the records, read
    once and saved once at the end (`with`), also when a write fails half-way, so what
    was written is recorded. A copy written without its record is still safe: it equals
    the copy its notebook makes, which is how a copy without a record is adopted."""

    def __init__(self, folder: Path) -> None:
        self.path = folder
        self.records: dict[str, dict[str, Any]] = {}
        self.loaded: dict[str, dict[str, Any]] = {}
        self.report = CopyReport()
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    def __enter__(self) -> _Folder:
        self.path.mkdir(parents=True, exist_ok=True)
        self.records = _load_records(self.path)
        self.loaded = json.loads(json.dumps(self.records))  # a deep copy, to compare
        return self

    def __exit__(self, *exc: object) -> None:
        if self.records != self.loaded:
            _save_records(self.path, self.records)

    def put_aside(self, path: Path) -> None:
        """Move `path` to `.replaced/<stem>.<time>.ipynb`, never over an earlier one."""
        aside_dir = self.path / REPLACED_DIR
        aside_dir.mkdir(exist_ok=True)
        aside, n = aside_dir / f"{path.stem}.{self.stamp}.ipynb", 1
        while aside.exists():
            n += 1
            aside = aside_dir / f"{path.stem}.{self.stamp}-{n}.ipynb"
        path.replace(aside)
        self.report.replaced.append(str(aside.relative_to(self.path)))

    def write_copy(self, name: str, copy: dict[str, Any]) -> None:
        """Copy `name` from `copy`, recorded; an updated notebook beside it is now out of
        date: removed if the learner has not modified it, else left to them."""
        write_notebook(self.path / name, copy)
        old = self.records.get(name, {}).get("updated")
        beside = self.path / updated_name(name)
        if old and beside.exists() and _work_of(beside) == old.get("written"):
            beside.unlink()
        self.records[name] = {"version": version_fingerprint(copy),
                              "written": work_fingerprint(copy)}

    def put_beside(self, name: str, copy: dict[str, Any], changed: bool) -> None:
        """The updated notebook `copy` beside the kept copy `name`, in place of an earlier
        one unless the learner modified that one (then it is put aside first)."""
        beside = self.path / updated_name(name)
        record = self.records.setdefault(name, {"version": None, "written": None})
        old = record.get("updated") or {}
        work = work_fingerprint(copy)
        if beside.exists() and _work_of(beside) not in (old.get("written"), work):
            self.put_aside(beside)
        write_notebook(beside, copy)
        record["updated"] = {"version": version_fingerprint(copy), "written": work}
        self.report.beside.append(Beside(name, beside.name, changed))

    def follow(self, source: Path) -> None:
        """Bring the copy of `source` up to date by the rule of the module's docstring."""
        name, target = source.name, self.path / source.name
        copy = learner_copy(notebook_cells.read(source))
        version, work = version_fingerprint(copy), work_fingerprint(copy)
        record = self.records.get(name)
        if not target.exists():
            self.write_copy(name, copy)
            self.report.created.append(name)
            return
        mine = _work_of(target)
        recorded = record.get("written") if record else None
        if mine is not None and mine == recorded:  # not modified since it was written
            if record and record.get("version") == version:
                self.report.kept.append(name)
            else:
                self.write_copy(name, copy)
                self.report.refreshed.append(name)
            return
        self.report.kept.append(name)
        if mine == work:  # already what the notebook makes now: recorded as such
            self.records[name] = {**(record or {}), "version": version, "written": work}
            return
        if recorded == work or ((record or {}).get("updated") or {}).get("version") == version:
            return  # nothing new since the copy was made, or already beside it
        self.put_beside(name, copy, changed=recorded is not None)


def ensure_copies(project: Path, lang: str = "en") -> CopyReport:
    """Bring the copies of edition `lang` up to date with `notebooks/`: make the missing
    ones, refresh those the learner has not modified whose notebook was updated, keep the
    others and put an updated notebook beside each (see the module's docstring)."""
    with _Folder(learner_dir(project, lang)) as folder:
        for source in source_notebooks(project, lang):
            folder.follow(source)
    return folder.report


def resolve_names(project: Path, names: Iterable[str], lang: str = "en") -> list[Path]:
    """The source notebooks `names` ask for: `all`, or a file name with or without
    `.ipynb`, or its prefix before the first dash (`26b`). Unknown → `ValueError` listing
    the choices."""
    sources = source_notebooks(project, lang)
    chosen: list[Path] = []
    for name in names:
        if name == "all":
            return sources
        stem = name.removesuffix(".ipynb")
        match = [s for s in sources if stem in (s.stem, s.stem.split("-", 1)[0])]
        if not match:
            choices = ", ".join(s.stem.split("-", 1)[0] for s in sources)
            raise ValueError(f"no notebook {name!r}; choose one of {choices}, or all")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def fresh_copies(project: Path, names: Iterable[str], lang: str = "en") -> CopyReport:
    """A fresh copy of each notebook `names` ask for (see `resolve_names`); an existing
    copy is moved to `my-notebooks/[zh/].replaced/<name>.<time>.ipynb` first, never
    deleted."""
    sources = resolve_names(project, names, lang)
    with _Folder(learner_dir(project, lang)) as folder:
        for source in sources:
            target = folder.path / source.name
            if target.exists():
                folder.put_aside(target)
            folder.write_copy(source.name, learner_copy(notebook_cells.read(source)))
            folder.report.created.append(source.name)
    return folder.report


def lab_root(start: Path | None = None) -> Path:
    """The lab root a kernel works in: the nearest folder at or above `start` (default: the
    kernel's working folder, the notebook's) that holds both `notebooks/` and the learner's
    folder. On a hub that is the learner's `~/teamdesk-lab/`, not the shared repository
    this module is installed from (read-only to them); elsewhere, the checkout."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "notebooks").is_dir() and (folder / LEARNER_DIR).is_dir():
            return folder
    return Path(__file__).resolve().parents[1]


def fresh(*names: str) -> None:
    """From a notebook cell: `fresh("26b")` (or `fresh("all")`) replaces your copy with a
    fresh one, keeping the old one in `my-notebooks/.replaced/`. Close the notebook's tab
    and open it again to see the fresh copy. The edition is the cell's (`devkit.i18n`)."""
    project = lab_root()
    lang = i18n.lang()
    print(describe(fresh_copies(project, names or ("all",), lang), project, lang))
    print(i18n.say("copies.reopen", "close the notebook's tab and open it again from the "
                   "file browser", lang=lang))


def _chapter(name: str) -> str:
    return name.split("-", 1)[0]  # 26b-takeover-race.ipynb → 26b, as --fresh takes it


def _chapters(names: Iterable[str], lang: str) -> str:
    return i18n.listing(map(_chapter, names), lang=lang)


def describe(report: CopyReport, project: Path, lang: str = "en") -> str:
    """The copy report for the lab's output, in edition `lang`: a line for the copies
    made, refreshed and kept, one for each updated notebook put beside a copy, one for
    copies put aside."""
    say, where = i18n.say, learner_dir(project, lang)
    lines = []
    if report.created:
        lines.append(say("copies.created", "copies made in {where}: {chapters}", where=where,
                         chapters=_chapters(report.created, lang), lang=lang))
    if report.refreshed:
        lines.append(say("copies.refreshed", "copies refreshed from their updated notebooks "
                         "(you had not changed them): {chapters}",
                         chapters=_chapters(report.refreshed, lang), lang=lang))
    if report.kept:
        lines.append(say("copies.kept", "your copies, kept as they are: {chapters}",
                         chapters=_chapters(report.kept, lang), lang=lang))
    for b in report.beside:
        if b.changed:
            lines.append(say("copies.beside.changed", "{chapter}: you changed your copy; "
                             "the updated notebook is beside it as {file}",
                             chapter=_chapter(b.copy), file=b.file, lang=lang))
        else:
            lines.append(say("copies.beside.untracked", "{chapter}: your copy dates from before "
                             "the lab followed updates and differs from the current notebook, "
                             "so it is kept; the current notebook is beside it as {file}",
                             chapter=_chapter(b.copy), file=b.file, lang=lang))
    if report.replaced:
        lines.append(say("copies.replaced", "old copies put aside in {where}: {files}",
                         where=where / REPLACED_DIR, lang=lang,
                         files=", ".join(Path(r).name for r in report.replaced)))
    return "\n".join(lines) or say("copies.none", "no notebooks found under {where}",
                                    where=project / "notebooks", lang=lang)
