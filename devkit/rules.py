"""The contract's rules inside the project: their texts, and where each one lives.

`RULES.md` at the project root is the one source of the rule texts (id, title, statement,
why it matters), and `RULES.zh-CN.md` its 中文 companion: the same ids in the same order with
the same tags, read for `lang="zh"`. The language is the edition's (`devkit.i18n.lang()`:
`TEAMDESK_LANG`, else a notebook folder named `zh`, else English) unless `lang=` says
otherwise; it chooses the texts and the report's own words, never the places. Everything
else here is *computed* from the sources, never hand-kept:

- code places — functions/classes in `teamdesk/**/*.py` (the product) and `devkit/**/*.py`
  (the dev environment: S1–S3 live there) whose docstring or comments cite the id, as
  `module:function` (`module:<module>` for a module docstring or a comment
  outside any function);
- test places — test functions in `tests/**/*.py` whose name, docstring or comments cite
  the id, as `path::test_name` (`path::<module>` when a test module's docstring cites it
  for all its tests);
- notebook places — cells of `notebooks/*.ipynb` citing the id in a `# contract:` comment
  (code cells) or anywhere in their text (markdown cells), as `path#cell-index` (0-based,
  the order of the cells in the file) with the section heading above the cell.

A citation is a whole word: `P1` does not match `P12` or `P1x`. A range such as `D1–D4`
(en dash or hyphen) cites every id in it, as the product's module docstrings use them.

    from devkit import rules
    rules.explain("P3")             # in a notebook it renders as markdown
    rules.explain("P3", lang="zh")  # the 中文 text, the same places
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from devkit import i18n, notebook_cells
from devkit.i18n import columns, listing, say

#: The checkout this module belongs to (it sits at `<root>/devkit/rules.py`), so the
#: command works from any working directory of the checkout.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
RULES_FILE = "RULES.md"
#: The rule texts of each edition's language; every one has RULES.md's ids, order and tags.
RULES_FILES = {"en": RULES_FILE, "zh": "RULES.zh-CN.md"}

#: `*Why:*` in English, `*为什么：*` in 中文 (either is accepted in either file).
_ENTRY = re.compile(
    r"^- \*\*(?P<id>[A-Z]\d{1,2})\*\* \*(?P<title>[^*]+)\*"
    r"(?P<tags>(?: \((?:ours|inferred)\))*) — (?P<statement>.+?) \*(?:Why:|为什么：)\* "
    r"(?P<why>.+)$")
_GROUP = re.compile(r"^## (?P<name>.+)$")
#: A candidate id: an upper-case letter and one or two digits, not inside a longer word.
_WORD = re.compile(r"(?<![A-Za-z0-9_])([A-Z]\d{1,2})(?![A-Za-z0-9_])")
_RANGE = re.compile(
    r"(?<![A-Za-z0-9_])([A-Z])(\d{1,2})\s*[–-]\s*(?:\1)?(\d{1,2})(?![A-Za-z0-9_])")
_CONTRACT_COMMENT = re.compile(r"#\s*contract:(?P<ids>.*)$", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$", re.MULTILINE)


class UnknownRule(ValueError):
    """An id that is not in RULES.md; the message lists the valid ones."""


def _lang(lang: str | None) -> str:
    """`lang` when given (`zh` or `en`), else the edition's language now."""
    if lang is None:
        return i18n.lang()
    chosen = lang.strip().lower()
    if chosen not in i18n.LANGS:
        raise ValueError(f"unknown language {lang!r}; one of: {', '.join(i18n.LANGS)}")
    return chosen


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    statement: str
    why: str
    group: str
    #: "ours" (beyond the book) and/or "inferred" (the chapter's code is not in the text).
    tags: tuple[str, ...] = ()


@dataclass
class RuleReport:
    """A rule with the places computed for it; prints as text, renders as markdown."""

    rule: Rule
    code: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    notebooks: list[str] = field(default_factory=list)
    #: The language of the texts and of the report's own words ("en" or "zh").
    lang: str = "en"

    def _title(self) -> str:
        tags = "".join(f" ({t})" for t in self.rule.tags)
        return f"{self.rule.id} — {self.rule.title}{tags}"

    def _kinds(self) -> tuple[tuple[str, list[str]], ...]:
        return ((say("rules.kind.code", "code", lang=self.lang), self.code),
                (say("rules.kind.tests", "tests", lang=self.lang), self.tests),
                (say("rules.kind.notebooks", "notebooks", lang=self.lang), self.notebooks))

    def text(self) -> str:
        r = self.rule
        lines = [self._title(), f"  {r.statement}",
                 "  " + say("rules.why", "Why: {why}", why=r.why, lang=self.lang)]
        for label, places in self._kinds():
            lines.append(f"  {label} ({len(places)}):" + (
                "" if places else " " + say("rules.none", "none", lang=self.lang)))
            lines.extend(f"    {p}" for p in places)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_markdown_(self) -> str:
        r = self.rule
        out = [f"**{self._title()}**", "", r.statement, "",
               say("rules.why.markdown", "*Why:* {why}", why=r.why, lang=self.lang), ""]
        for label, places in self._kinds():
            out.append(f"- {label} ({len(places)}): " + (
                ", ".join(f"`{p}`" for p in places) if places
                else say("rules.none", "none", lang=self.lang)))
        return "\n".join(out)


# ---------------------------------------------------------------- the texts


def rules_path(root: Path | None = None, lang: str | None = None) -> Path:
    """The rule texts of `lang` (default: the edition's) under `root`: `RULES.zh-CN.md` for
    `zh`, `RULES.md` otherwise — and `RULES.md` too in a tree without the translation (a
    checkout of its own, such as a test's), so a rule is never lost for want of one."""
    root = root or PROJECT_ROOT
    path = root / RULES_FILES[_lang(lang)]
    return path if path.is_file() else root / RULES_FILE


def load_rules(root: Path | None = None, lang: str | None = None) -> dict[str, Rule]:
    """The rules of `<root>/RULES.md` (`RULES.zh-CN.md` for `lang="zh"`; default: the
    edition's language), in file order. A line that starts like an entry but does not
    parse, or an id given twice, is an error rather than a silently lost rule."""
    path = rules_path(root, lang)
    if not path.is_file():
        raise FileNotFoundError(f"no {RULES_FILE} at {path.parent}: the rule texts live there")
    name = path.name
    rules: dict[str, Rule] = {}
    group = ""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if m := _GROUP.match(line):
            group = m["name"].strip()
            continue
        if not line.startswith("- **"):
            continue
        m = _ENTRY.match(line)
        if m is None:
            raise ValueError(f"{name}:{n}: not a rule entry "
                             "(expected `- **ID** *title* (tags) — statement *Why:* reason`)")
        if m["id"] in rules:
            raise ValueError(f"{name}:{n}: rule {m['id']} is defined twice")
        tags = tuple(re.findall(r"\((ours|inferred)\)", m["tags"]))
        rules[m["id"]] = Rule(m["id"], m["title"].strip(), m["statement"].strip(),
                              m["why"].strip(), group, tags)
    return rules


# ---------------------------------------------------------------- citations


def cited_ids(text: str, known: Iterable[str]) -> set[str]:
    """The known ids `text` cites: whole words (`P1` is not in `P12`), and every id of a
    range such as `D1–D4` or `P10-P13`."""
    known = set(known)
    found = {m for m in _WORD.findall(text) if m in known}
    for letter, lo, hi in _RANGE.findall(text):
        first, last = int(lo), int(hi)
        if first < last and f"{letter}{first}" in known and f"{letter}{last}" in known:
            found.update(i for i in (f"{letter}{k}" for k in range(first, last + 1))
                         if i in known)
    return found


def _name_ids(name: str, known: set[str]) -> set[str]:
    """Ids spelled as parts of a test name: `test_d9_third_stall` cites D9."""
    return {part.upper() for part in name.split("_")} & known


def _comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment token; a file that does not tokenize has none."""
    try:
        return [(tok.start[0], tok.string)
                for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return []


@dataclass
class _Def:
    qualname: str
    node: ast.AST
    start: int
    end: int


def _defs(tree: ast.Module) -> list[_Def]:
    """Every function and class, with its dotted name inside the module."""
    out: list[_Def] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                out.append(_Def(name, child, child.lineno, child.end_lineno or child.lineno))
                walk(child, f"{name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _innermost(defs: list[_Def], line: int) -> _Def | None:
    """The innermost function/class whose lines hold `line` (None: module level)."""
    best = None
    for d in defs:
        if d.start <= line <= d.end and (best is None or d.start >= best.start):
            best = d
    return best


_Scan = tuple[ast.Module | None, list[_Def], dict[str | None, set[str]]]
#: Scans already made in this process, by file and version: a kernel that explains one
#: rule after another (notebooks 00 and 23) parses each file once, not at every call.
_SCANS: dict[tuple[str, int, int, frozenset[str]], _Scan] = {}


def _scan_python(path: Path, known: set[str]) -> _Scan:
    """Ids cited per function/class (None = module level) by docstrings and comments (the
    result is shared: read it, don't change it)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size, frozenset(known))
    if key not in _SCANS:
        _SCANS[key] = _scan_source(path.read_text(encoding="utf-8"), known)
    return _SCANS[key]


def _scan_source(source: str, known: set[str]) -> _Scan:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None, [], {}
    defs = _defs(tree)
    cites: dict[str | None, set[str]] = {}
    module_doc = ast.get_docstring(tree)
    if module_doc:
        cites.setdefault(None, set()).update(cited_ids(module_doc, known))
    for d in defs:
        doc = ast.get_docstring(d.node)  # type: ignore[arg-type]
        if doc:
            cites.setdefault(d.qualname, set()).update(cited_ids(doc, known))
    for line, comment in _comments(source):
        owner = _innermost(defs, line)
        cites.setdefault(owner.qualname if owner else None, set()).update(
            cited_ids(comment, known))
    return tree, defs, cites


#: The packages whose code cites rules: the product, and the dev environment.
CODE_PACKAGES = ("teamdesk", "devkit")


def scan_code(root: Path, known: Iterable[str]) -> dict[str, list[str]]:
    """id -> `module:function` places under `<root>/teamdesk/` and `<root>/devkit/`."""
    known = set(known)
    places: dict[str, list[str]] = {i: [] for i in known}
    paths = [p for package in CODE_PACKAGES for p in sorted((root / package).rglob("*.py"))]
    for path in paths:
        if path.relative_to(root).as_posix() == "devkit/rules.py":
            continue  # this module's examples are not a rule's home
        rel = path.relative_to(root).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        _, _, cites = _scan_python(path, known)
        for owner, ids in cites.items():
            for i in ids:
                places[i].append(f"{module}:{owner or '<module>'}")
    return {i: sorted(set(p), key=p.index) for i, p in places.items()}


def _is_test(d: _Def) -> bool:
    node = d.node
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    parts = d.qualname.split(".")
    return node.name.startswith("test") and all(p.startswith("Test") for p in parts[:-1])


def scan_tests(root: Path, known: Iterable[str]) -> dict[str, list[str]]:
    """id -> `path::test_name` places under `<root>/tests/`: a test function cites an id by
    its name, its docstring or a comment anywhere in its body (helpers inside it too); a
    test module's docstring cites it for the whole module (`path::<module>`)."""
    known = set(known)
    places: dict[str, list[str]] = {i: [] for i in known}
    for path in sorted((root / "tests").rglob("*.py")):
        tree, defs, cites = _scan_python(path, known)
        if tree is None:
            continue
        rel = path.relative_to(root).as_posix()
        # A test module's docstring says what its tests prove as a whole.
        for i in cited_ids(ast.get_docstring(tree) or "", known):
            places[i].append(f"{rel}::<module>")
        tests = [d for d in defs if _is_test(d)]
        for t in tests:
            ids = set(_name_ids(t.node.name, known))  # type: ignore[attr-defined]
            for d in defs:  # the test itself and anything nested in it
                if d.start >= t.start and d.end <= t.end:
                    ids |= cites.get(d.qualname, set())
            for i in ids:
                places[i].append(f"{rel}::{t.qualname.replace('.', '::')}")
    return places


def scan_notebooks(root: Path, known: Iterable[str]) -> dict[str, list[str]]:
    """id -> `notebooks/X.ipynb#cell (§ heading)` places."""
    known = set(known)
    places: dict[str, list[str]] = {i: [] for i in known}
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        try:
            cells = notebook_cells.cells(path)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        rel = path.relative_to(root).as_posix()
        heading = ""
        for index, cell in enumerate(cells):
            source = notebook_cells.source(cell)
            if cell.get("cell_type") == "markdown":
                headings = _HEADING.findall(source)
                if headings:
                    heading = headings[-1]
                ids = cited_ids(source, known)
            elif cell.get("cell_type") == "code":
                ids = set()
                for m in _CONTRACT_COMMENT.finditer(source):
                    ids |= cited_ids(m["ids"], known)
            else:
                continue
            where = f"{rel}#{index}" + (f" (§ {heading})" if heading else "")
            for i in ids:
                places[i].append(where)
    return places


# ---------------------------------------------------------------- the index


def index(root: Path | None = None, lang: str | None = None) -> dict[str, RuleReport]:
    """Every rule of RULES.md with its code, test and notebook places (computed now), in
    `lang`'s texts and words (default: the edition's); the places do not depend on it."""
    root = (root or PROJECT_ROOT).resolve()
    chosen = _lang(lang)
    rules = load_rules(root, chosen)
    code = scan_code(root, rules)
    tests = scan_tests(root, rules)
    notebooks = scan_notebooks(root, rules)
    return {i: RuleReport(r, code[i], tests[i], notebooks[i], chosen)
            for i, r in rules.items()}


def untested(reports: dict[str, RuleReport]) -> list[str]:
    """Ids no test cites, in RULES.md order."""
    return [i for i, r in reports.items() if not r.tests]


def _check_ids(ids: Iterable[str], valid: Iterable[str], lang: str | None = None) -> list[str]:
    valid = list(valid)
    wanted = [i.strip().upper() for i in ids]
    unknown = [i for i in wanted if i not in valid]
    if unknown:
        chosen = _lang(lang)
        raise UnknownRule(say("rules.unknown", "unknown rule id(s) {unknown}; valid ids: "
                              "{valid}", unknown=listing(unknown, lang=chosen),
                              valid=" ".join(valid), lang=chosen))
    return wanted


def explain(rule_id: str, root: Path | None = None, lang: str | None = None) -> RuleReport:
    """One rule and where it lives, in `lang` (`"zh"` or `"en"`; default: the edition's).
    In a notebook the returned report renders as markdown; `print(...)` gives the text
    block. Unknown id → `UnknownRule` naming the valid ids."""
    chosen = _lang(lang)
    reports = index(root, chosen)
    (wanted,) = _check_ids([rule_id], reports, chosen)
    return reports[wanted]


def select(ids: Iterable[str], reports: dict[str, RuleReport],
           lang: str | None = None) -> list[RuleReport]:
    """The reports of `ids` (case-insensitive), or `UnknownRule` (worded in `lang`)."""
    return [reports[i] for i in _check_ids(ids, reports, lang)]


def table(reports: Iterable[RuleReport], lang: str | None = None) -> list[dict[str, object]]:
    """Rows for `teamdesk rules`: id, title, and how many places of each kind; the column
    names are `lang`'s (default: the edition's)."""
    chosen = _lang(lang)
    rule_id, title, code, tests, notebooks = (
        say("rules.column.id", "id", lang=chosen), say("rules.column.title", "title", lang=chosen),
        say("rules.kind.code", "code", lang=chosen), say("rules.kind.tests", "tests", lang=chosen),
        say("rules.kind.notebooks", "notebooks", lang=chosen))
    return [{rule_id: r.rule.id, title: r.rule.title + "".join(f" ({t})" for t in r.rule.tags),
             code: len(r.code), tests: len(r.tests), notebooks: len(r.notebooks)}
            for r in reports]


def table_text(rows: list[dict[str, object]]) -> str:
    """`rows` as a plain text table whose columns line up in a terminal with 中文 titles
    too (the same layout as the product's `print_table` for ASCII)."""
    if not rows:
        return ""
    cols = list(rows[0])
    widths = {c: max(columns(c), *(columns(str(r[c])) for r in rows)) for c in cols}

    def line(cells: list[str]) -> str:
        return "  ".join(v + " " * (widths[c] - columns(v)) for c, v in zip(cols, cells,
                                                                          strict=True))

    return "\n".join([line(cols)] + [line([str(r[c]) for c in cols]) for r in rows])
