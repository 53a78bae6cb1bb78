"""Two editions from one source: the 中文 edition of a notebook is built from the English
notebook and a translation catalogue, so the two cannot drift.

- The **source** is `notebooks/NAME.ipynb` (the English edition, with stored outputs,
  checked by nbval).
- The **catalogue** is `notebooks/i18n/zh/NAME.md`: one block per translatable cell, in
  the notebook's order, each opened by a marker line naming the cell and a fingerprint of
  the English it translates:

      <!-- cell 3f2a9c1e en 5d41402a -->
      ## 23 · 事务待投递箱
      …the cell's Chinese text…

  A markdown cell is translated whole. A code cell with comments or messages to the
  learner (the `why=` of `labs.learn.reveal`: `MESSAGE_KEYWORDS`) is given whole too,
  and must be the same code: its syntax tree with the messages' text blanked, and its
  `# step:` lines (read by `labs.stage`), equal the English cell's. The labels a cell
  prints are text too (`print_labels`: the string arguments of `print`, the literal
  parts of an f-string argument): a block may translate them, while its fields — every
  `{…}` with its format — stay the same set of code; a cell whose only text is printed
  labels needs no block, and one it is given is used. A marker ending in ` todo` is a
  draft.
- The **edition** is `notebooks/zh/NAME.ipynb`, written by `build_all`: the source's cells,
  ids, tags, metadata and order, with the translated sources, and no outputs (it is
  executed top to bottom by the test command, not compared). Committed, so it can be
  read anywhere; `tests/unit/test_editions.py` fails when it is not what the build makes.

When an English cell changes, its fingerprint no longer matches and the build reports the
translation stale: the Chinese edition can lag behind only visibly. `draft(name)` writes a
catalogue to translate: fresh translations kept, stale ones marked ` todo` under the new
fingerprint, missing ones filled with the English and marked ` todo`.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit import notebook_cells
from devkit.copies import write_notebook

EDITIONS = ("en", "zh")
#: The language of the source notebooks; every other edition is built.
SOURCE_LANG = "en"
_MARKER = re.compile(r"^<!-- cell (?P<id>[\w-]+) en (?P<fp>[0-9a-f]{8})(?P<todo> todo)? -->$",
                     re.MULTILINE)
_STEP = re.compile(r"^#\s*step:.*$", re.MULTILINE)


def fingerprint(source: str) -> str:
    """Eight hex digits of the English cell's SHA-1: what a translation was made from."""
    return hashlib.sha1(source.encode("utf-8")).hexdigest()[:8]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


#: Where a code cell speaks to the learner, so a translation may change the text: the
#: `why=` of `labs.learn.reveal` (the judged exercises speak through the harness catalogue).
MESSAGE_KEYWORDS = frozenset({"why"})
_MESSAGE = "<message>"


def _parse(source: str) -> ast.Module | None:
    """The cell as Python (top-level `await` allowed), or None for one Python cannot read
    (a `%magic` or `!shell` line)."""
    try:
        return compile(source, "<cell>", "exec",
                       flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return None


def _messages(tree: ast.AST) -> list[ast.expr]:
    """The expressions of `tree` that are messages to the learner (`MESSAGE_KEYWORDS`)."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in MESSAGE_KEYWORDS:
            found.append(node.value)
    return [n for n in found if isinstance(n, ast.Constant | ast.JoinedStr)
            and (not isinstance(n, ast.Constant) or isinstance(n.value, str))]


class _Blank(ast.NodeTransformer):
    def __init__(self, nodes: list[ast.expr]) -> None:
        self.ids = {id(n) for n in nodes}

    def visit(self, node: ast.AST) -> ast.AST:
        if id(node) in self.ids:
            return ast.Constant(_MESSAGE)
        return super().visit(node)


def print_labels(tree: ast.AST) -> list[ast.expr]:
    """The labels a cell prints: each string literal or f-string passed to `print(...)`
    (positionally; `sep=`/`end=` and anything computed stay code)."""
    return [arg for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            for arg in node.args if isinstance(arg, ast.JoinedStr)
            or (isinstance(arg, ast.Constant) and isinstance(arg.value, str))]


class _BlankLabels(ast.NodeTransformer):
    """A printed label without its words: a literal becomes `_MESSAGE`; an f-string
    becomes its fields, sorted (a translation may reorder them, not change one)."""

    def __init__(self, labels: list[ast.expr]) -> None:
        self.ids = {id(n) for n in labels}

    def visit(self, node: ast.AST) -> ast.AST:
        if id(node) not in self.ids:
            return super().visit(node)
        if isinstance(node, ast.JoinedStr):
            fields = sorted(ast.dump(v) for v in node.values if not isinstance(v, ast.Constant))
            return ast.Constant(f"{_MESSAGE}{fields}")
        return ast.Constant(_MESSAGE)


def code_skeleton(source: str) -> tuple[str, list[str]]:
    """The code of a cell without what a translation may change — its comments, the text
    of its messages (`MESSAGE_KEYWORDS`) and of its printed labels (`print_labels`) — and
    its `# step:` lines. For a cell Python cannot parse, its lines with `#…` cut."""
    steps = _STEP.findall(source)
    tree = _parse(source)
    if tree is None:
        return "\n".join(line.split("#", 1)[0].rstrip() for line in source.splitlines()), steps
    tree = _BlankLabels(print_labels(tree)).visit(tree)
    return ast.dump(_Blank(_messages(tree)).visit(tree)), steps


def _labelled(cell: dict[str, Any]) -> bool:
    """A code cell that prints a label (`print_labels`): a block may translate it."""
    tree = _parse(notebook_cells.source(cell)) if cell.get("cell_type") == "code" else None
    return tree is not None and bool(print_labels(tree))


def translatable(cell: dict[str, Any]) -> bool:
    """A markdown cell with text, or a code cell with a comment in prose (`_prose`) or a
    message to the learner (`_messages`)."""
    text = notebook_cells.source(cell)
    if cell.get("cell_type") == "markdown":
        return bool(text.strip())
    if cell.get("cell_type") != "code":
        return False
    tree = _parse(text)
    return _has_comment(text) or (tree is not None and bool(_messages(tree)))


def _prose(comment: str) -> bool:
    """A comment a reader reads: not a `# step:` line, not only rule ids (`# contract: O1`)."""
    if _STEP.match(comment):
        return False
    return bool(re.search(r"[A-Za-z]{2,}", re.sub(r"^#\s*contract:", "", comment)))


def _has_comment(text: str) -> bool:
    try:
        return any(t.type == tokenize.COMMENT and _prose(t.string)
                   for t in tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return any("#" in line and _prose(line[line.index("#"):]) for line in text.splitlines())


@dataclass
class Entry:
    """One block of a catalogue."""

    cell_id: str
    fp: str
    text: str
    todo: bool = False


def parse_catalogue(text: str) -> dict[str, Entry]:
    """The blocks of a catalogue, by cell id (text before the first marker is a header)."""
    entries: dict[str, Entry] = {}
    marks = list(_MARKER.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[mark.end():end].removeprefix("\n").rstrip("\n")
        cell_id = mark["id"]
        if cell_id in entries:
            raise ValueError(f"cell {cell_id} is translated twice")
        entries[cell_id] = Entry(cell_id, mark["fp"], body, bool(mark["todo"]))
    return entries


@dataclass
class Build:
    """An edition and what kept it from being whole."""

    notebook: dict[str, Any]
    missing: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    drafts: list[str] = field(default_factory=list)
    code_changed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        said = [("no translation", self.missing), ("English changed since translated",
                self.stale), ("draft (todo)", self.drafts),
                ("translation changes the code", self.code_changed),
                ("no such cell in the source", self.unknown)]
        return [f"{what}: {', '.join(ids)}" for what, ids in said if ids]


def build(source: dict[str, Any], catalogue: dict[str, Entry], lang: str = "zh") -> Build:
    """The `lang` edition of notebook JSON `source` with `catalogue`'s translations. An
    untranslated cell keeps its English (and is reported), so a partial edition runs."""
    cells, result = [], Build({})
    ids = set()
    for cell in source.get("cells", []):
        cell = json.loads(json.dumps(cell))
        cell_id = cell.get("id", "")
        ids.add(cell_id)
        english = notebook_cells.source(cell)
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
            cell.get("metadata", {}).pop("execution", None)
        entry = catalogue.get(cell_id)
        if translatable(cell) or (entry is not None and _labelled(cell)):
            if entry is None:
                result.missing.append(cell_id)
            elif entry.todo:
                result.drafts.append(cell_id)
            elif entry.fp != fingerprint(english):
                result.stale.append(cell_id)
            if entry is not None and not entry.todo:
                if (cell["cell_type"] == "code"
                        and code_skeleton(entry.text) != code_skeleton(english)):
                    result.code_changed.append(cell_id)
                else:
                    cell["source"] = _lines(entry.text)
        cells.append(cell)
    result.unknown = [i for i in catalogue if i not in ids]
    meta = json.loads(json.dumps(source.get("metadata", {})))
    meta["teamdesk"] = {**meta.get("teamdesk", {}), "edition": lang}
    result.notebook = {**source, "cells": cells, "metadata": meta}
    return result


def _paths(project: Path, name: str, lang: str) -> tuple[Path, Path, Path]:
    nb = project / "notebooks"
    return nb / f"{name}.ipynb", nb / "i18n" / lang / f"{name}.md", nb / lang / f"{name}.ipynb"


def catalogued(project: Path, lang: str = "zh") -> list[str]:
    """The notebooks that have a `lang` catalogue, by name, in course order."""
    return sorted(p.stem for p in (project / "notebooks" / "i18n" / lang).glob("*.md"))


def build_one(project: Path, name: str, lang: str = "zh") -> Build:
    source, catalogue, _ = _paths(project, name, lang)
    return build(notebook_cells.read(source),
                 parse_catalogue(catalogue.read_text(encoding="utf-8")), lang)


def build_all(project: Path, lang: str = "zh") -> dict[str, Build]:
    """Write `notebooks/<lang>/NAME.ipynb` for every catalogued notebook; the builds."""
    builds = {}
    (project / "notebooks" / lang).mkdir(exist_ok=True)
    for name in catalogued(project, lang):
        builds[name] = build_one(project, name, lang)
        write_notebook(_paths(project, name, lang)[2], builds[name].notebook)
    return builds


def draft(project: Path, name: str, lang: str = "zh") -> Path:
    """Write the catalogue of `name` for a translator (see the module docstring)."""
    source, path, _ = _paths(project, name, lang)
    old = parse_catalogue(path.read_text(encoding="utf-8")) if path.exists() else {}
    blocks = [f"<!-- {name} · {lang} catalogue (devkit/editions.py): one block per "
              "translatable cell, in order; remove ' todo' once translated -->\n"]
    for cell in notebook_cells.cells(source):
        if not translatable(cell) and not (cell.get("id") in old and _labelled(cell)):
            continue
        english, cell_id = notebook_cells.source(cell), cell["id"]
        entry = old.get(cell_id)
        fresh = entry is not None and not entry.todo and entry.fp == fingerprint(english)
        text = entry.text if entry is not None else english.rstrip("\n")
        todo = "" if fresh else " todo"
        blocks.append(f"<!-- cell {cell_id} en {fingerprint(english)}{todo} -->\n{text}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(blocks), encoding="utf-8")
    return path
