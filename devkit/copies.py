"""The learner's own copies of the notebooks: spoiler-free, theirs to edit, never overwritten.

The repository's `notebooks/*.ipynb` are CI's regression source: nbval compares every
cell with its stored output, so they carry the answers of every prediction. A learner
works in `my-notebooks/` instead (git-ignored), made on first use from `notebooks/`:

- every output and execution count cleared, so no answer is on screen before its cell
  runs (a `predict` cell is followed by a scene whose result the learner has not seen);
- cells tagged `presenter` (the instructor's notes) left out;
- everything else kept: sources (hidden ones too), tags, cell and notebook metadata.

An existing copy is never written again; `teamdesk lab --fresh 26b` (or `--fresh all`)
puts the old one aside in `my-notebooks/.replaced/` and makes a new copy. Nothing here
writes into `notebooks/` (the lab also opens those read-only: `devkit.contents`).

One folder per edition (`devkit.editions`): the English copies in `my-notebooks/`, the
中文 ones in `my-notebooks/zh/`, made from `notebooks/zh/` (a notebook whose 中文 edition
is not written yet is copied from the English one, so the course is whole in both).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit import i18n

#: The learner's folder, beside `notebooks/` (same depth, so relative paths still work).
LEARNER_DIR = "my-notebooks"
#: Where a copy goes when the learner asks for a fresh one.
REPLACED_DIR = ".replaced"
#: Cells with this tag are the instructor's notes: in the repository, not in a copy.
PRESENTER_TAG = "presenter"


@dataclass
class CopyReport:
    """What `ensure_copies` / `fresh_copies` did, by notebook file name."""

    created: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
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


def learner_copy(nb: dict[str, Any]) -> dict[str, Any]:
    """A learner's copy of notebook JSON `nb`: outputs and execution counts cleared,
    presenter cells left out, everything else as it is."""
    cells = []
    for cell in nb.get("cells", []):
        if PRESENTER_TAG in cell.get("metadata", {}).get("tags", []):
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


def write_notebook(path: Path, nb: dict[str, Any]) -> None:
    """Write notebook JSON `nb` in nbformat's own layout (indent 1, sorted keys, a final
    newline), atomically: Jupyter's next save of it, and a tool's edit of a repository
    notebook, change nothing but what was meant."""
    tmp = path.with_suffix(".ipynb.tmp")
    text = json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)


def _make(source: Path, target: Path) -> None:
    write_notebook(target, learner_copy(json.loads(source.read_text(encoding="utf-8"))))


def ensure_copies(project: Path, lang: str = "en") -> CopyReport:
    """Make the copies of edition `lang` that do not exist yet; never touch one that does
    (it may hold the learner's work)."""
    target_dir = learner_dir(project, lang)
    target_dir.mkdir(parents=True, exist_ok=True)
    report = CopyReport()
    for source in source_notebooks(project, lang):
        target = target_dir / source.name
        if target.exists():
            report.kept.append(source.name)
        else:
            _make(source, target)
            report.created.append(source.name)
    return report


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
    target_dir = learner_dir(project, lang)
    target_dir.mkdir(parents=True, exist_ok=True)
    report = CopyReport()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for source in sources:
        target = target_dir / source.name
        if target.exists():
            aside = target_dir / REPLACED_DIR / f"{source.stem}.{stamp}.ipynb"
            aside.parent.mkdir(exist_ok=True)
            target.replace(aside)
            report.replaced.append(str(aside.relative_to(target_dir)))
        _make(source, target)
        report.created.append(source.name)
    return report


def fresh(*names: str) -> None:
    """From a notebook cell: `fresh("26b")` (or `fresh("all")`) replaces your copy with a
    fresh one, keeping the old one in `my-notebooks/.replaced/`. Close the notebook's tab
    and open it again to see the fresh copy. The edition is the cell's (`devkit.i18n`)."""
    project = Path(__file__).resolve().parents[1]
    lang = i18n.lang()
    print(describe(fresh_copies(project, names or ("all",), lang), project, lang))
    print("close the notebook's tab and open it again from the file browser")


def describe(report: CopyReport, project: Path, lang: str = "en") -> str:
    """One or two lines for the lab command's output."""
    where = learner_dir(project, lang)
    parts = []
    if report.created:
        parts.append(f"made {len(report.created)} fresh learner cop"
                     f"{'y' if len(report.created) == 1 else 'ies'} in {where}")
    if report.kept:
        parts.append(f"kept your {len(report.kept)} existing cop"
                     f"{'y' if len(report.kept) == 1 else 'ies'}")
    lines = ["; ".join(parts) or f"no notebooks found under {project / 'notebooks'}"]
    if report.replaced:
        lines.append(f"old copies put aside in {where / REPLACED_DIR}: "
                     + ", ".join(Path(r).name for r in report.replaced))
    return "\n".join(lines)
