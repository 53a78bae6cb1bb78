"""The contract's rules inside the project: their texts, and where each one lives.

`RULES.md` at the project root is the one source of the rule texts (id, title, statement,
why it matters). Everything else here is *computed* from the sources, never hand-kept:

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
    rules.explain("P3")          # in a notebook it renders as markdown
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

#: The checkout this module belongs to (it sits at `<root>/devkit/rules.py`), so the
#: command works from any working directory of the checkout.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
RULES_FILE = "RULES.md"

_ENTRY = re.compile(
    r"^- \*\*(?P<id>[A-Z]\d{1,2})\*\* \*(?P<title>[^*]+)\*"
    r"(?P<tags>(?: \((?:ours|inferred)\))*) — (?P<statement>.+?) \*Why:\* (?P<why>.+)$")
_GROUP = re.compile(r"^## (?P<name>.+)$")
#: A candidate id: an upper-case letter and one or two digits, not inside a longer word.
_WORD = re.compile(r"(?<![A-Za-z0-9_])([A-Z]\d{1,2})(?![A-Za-z0-9_])")
_RANGE = re.compile(
    r"(?<![A-Za-z0-9_])([A-Z])(\d{1,2})\s*[–-]\s*(?:\1)?(\d{1,2})(?![A-Za-z0-9_])")
_CONTRACT_COMMENT = re.compile(r"#\s*contract:(?P<ids>.*)$", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$", re.MULTILINE)


class UnknownRule(ValueError):
    """An id that is not in RULES.md; the message lists the valid ones."""


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

    def _title(self) -> str:
        tags = "".join(f" ({t})" for t in self.rule.tags)
        return f"{self.rule.id} — {self.rule.title}{tags}"

    def text(self) -> str:
        r = self.rule
        lines = [self._title(), f"  {r.statement}", f"  Why: {r.why}"]
        for label, places in (("code", self.code), ("tests", self.tests),
                              ("notebooks", self.notebooks)):
            lines.append(f"  {label} ({len(places)}):" + ("" if places else " none"))
            lines.extend(f"    {p}" for p in places)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_markdown_(self) -> str:
        r = self.rule
        out = [f"**{self._title()}**", "", r.statement, "", f"*Why:* {r.why}", ""]
        for label, places in (("code", self.code), ("tests", self.tests),
                              ("notebooks", self.notebooks)):
            out.append(f"- {label} ({len(places)}): " + (
                ", ".join(f"`{p}`" for p in places) if places else "none"))
        return "\n".join(out)


# ---------------------------------------------------------------- the texts


def load_rules(root: Path | None = None) -> dict[str, Rule]:
    """The rules of `<root>/RULES.md`, in file order. A line that starts like an entry but
    does not parse, or an id given twice, is an error rather than a silently lost rule."""
    path = (root or PROJECT_ROOT) / RULES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {RULES_FILE} at {path.parent}: the rule texts live there")
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
            raise ValueError(f"{RULES_FILE}:{n}: not a rule entry "
                             "(expected `- **ID** *title* (tags) — statement *Why:* reason`)")
        if m["id"] in rules:
            raise ValueError(f"{RULES_FILE}:{n}: rule {m['id']} is defined twice")
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


def _scan_python(path: Path, known: set[str]) -> tuple[ast.Module | None, list[_Def],
                                                       dict[str | None, set[str]]]:
    """Ids cited per function/class (None = module level) by docstrings and comments."""
    source = path.read_text(encoding="utf-8")
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
            cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        rel = path.relative_to(root).as_posix()
        heading = ""
        for index, cell in enumerate(cells):
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
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


def index(root: Path | None = None) -> dict[str, RuleReport]:
    """Every rule of RULES.md with its code, test and notebook places (computed now)."""
    root = (root or PROJECT_ROOT).resolve()
    rules = load_rules(root)
    code = scan_code(root, rules)
    tests = scan_tests(root, rules)
    notebooks = scan_notebooks(root, rules)
    return {i: RuleReport(r, code[i], tests[i], notebooks[i]) for i, r in rules.items()}


def untested(reports: dict[str, RuleReport]) -> list[str]:
    """Ids no test cites, in RULES.md order."""
    return [i for i, r in reports.items() if not r.tests]


def _check_ids(ids: Iterable[str], valid: Iterable[str]) -> list[str]:
    valid = list(valid)
    wanted = [i.strip().upper() for i in ids]
    unknown = [i for i in wanted if i not in valid]
    if unknown:
        raise UnknownRule(f"unknown rule id(s) {', '.join(unknown)}; valid ids: "
                          f"{' '.join(valid)}")
    return wanted


def explain(rule_id: str, root: Path | None = None) -> RuleReport:
    """One rule and where it lives. In a notebook the returned report renders as markdown;
    `print(...)` gives the text block. Unknown id → `UnknownRule` naming the valid ids."""
    reports = index(root)
    (wanted,) = _check_ids([rule_id], reports)
    return reports[wanted]


def select(ids: Iterable[str], reports: dict[str, RuleReport]) -> list[RuleReport]:
    """The reports of `ids` (case-insensitive), or `UnknownRule`."""
    return [reports[i] for i in _check_ids(ids, reports)]


def table(reports: Iterable[RuleReport]) -> list[dict[str, object]]:
    """Rows for `teamdesk rules`: id, title, and how many places of each kind."""
    return [{"id": r.rule.id, "title": r.rule.title + "".join(f" ({t})" for t in r.rule.tags),
             "code": len(r.code), "tests": len(r.tests), "notebooks": len(r.notebooks)}
            for r in reports]
