"""The edition a learner reads — 中文 (`zh`) or English (`en`) — and the lab's words in it.

Notebook cells are the same code in both editions (`devkit.editions`), so the language of
the lab's own words — reveal and check feedback, board labels, scene narration — is
chosen where the kernel runs:

1. `TEAMDESK_LANG=zh|en` when set (a test, or a learner who wants it everywhere);
2. else the folder of the notebook: a kernel starts in its notebook's folder, and the
   中文 edition lives in a folder named `zh` (`notebooks/zh/`, `my-notebooks/zh/`), so
   each edition speaks its own language whichever one a learner opens;
3. else English.

`system_lang()` is the edition `teamdesk lab` opens when no `--lang` is given: the system
locale's (`zh*` → 中文, anything else → English).

**Words: English at the call, 中文 in a catalogue** — the notebooks' way (`devkit.editions`).
Code that speaks writes its English template where it speaks, under a stable key, with
named fields; English is the source language:

    say("ch27.other-worlds", "it also matches keys of other worlds ({what})", what=x)

In the 中文 edition (or with `lang="zh"`) the same fields fill the catalogue's template of
that key. A package that speaks keeps its catalogue beside its code, `PACKAGE/i18n/zh.md`,
and speaks through that catalogue's `say`: `labs.i18n.say` (the harness), `devkit.i18n.say`
(the dev tools). One block per message, opened by a marker with the fingerprint of the
English it translates, so a changed English shows the translation stale:

    <!-- msg ch27.other-worlds en 5d41402a -->
    它还匹配到了别的世界的键（{what}）

A template is the lines after its marker up to the next line that is a whole `<!-- … -->`
(the next marker, or a one-line comment grouping the blocks by module), trailing blank
lines dropped, so a template cannot end in a newline; `{{` and `}}` are literal braces
(`str.format`). A marker ending in ` todo` is a draft. The catalogue is read
once per process, when 中文 is first asked for; a key it lacks raises `MissingMessage`
naming the key and the file. `calls()` finds every message of a package from its source, so
a test (tests/unit/test_harness_catalogue.py) makes that impossible to ship, and `draft()`
rewrites a catalogue for a translator (`teamdesk messages`).

Product log lines, SQL, identifiers and exception class names stay as they are.
"""

from __future__ import annotations

import ast
import hashlib
import locale
import os
import re
import string
import threading
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LANGS = ("en", "zh")
#: Each edition's locale, as Sphinx's `language` and JupyterLab's display language name it
#: (the site's theme words, the lab's menus: `zh_CN` is the zh-CN language pack's).
LOCALES = {"en": "en", "zh": "zh_CN"}
#: The language written at the call; every other one comes from a catalogue.
SOURCE_LANG = "en"
#: Chinese characters (CJK unified ideographs), as the body of a regex character class:
#: what the minutes count as 汉字.
HAN = "\u4e00-\u9fff"
#: Any character of CJK text — ideographs, radicals, kana, compatibility ideographs, CJK
#: punctuation and full-width forms — as the body of a regex character class.
CJK = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef"


def columns(text: object) -> int:
    """How many terminal columns `text` takes: a CJK character (east-asian wide or
    full-width) takes two, so a printed table lines up in either edition."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in str(text))


_MARKER = re.compile(r"^<!-- msg (?P<key>[\w.-]+) en (?P<fp>[0-9a-f]{8})(?P<todo> todo)? -->$")
_COMMENT = re.compile(r"^<!--.*-->$")


def lang() -> str:
    """The edition's language now (read each time: a test may switch it)."""
    chosen = os.environ.get("TEAMDESK_LANG", "").strip().lower()
    if chosen in LANGS:
        return chosen
    return "zh" if Path.cwd().name == "zh" else "en"


def system_lang(environ: Mapping[str, str] = os.environ) -> str:
    """`zh` when the system locale is Chinese (LC_ALL, LC_MESSAGES, LANG of `environ`, then
    Python's own reading of the locale), else `en`."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name, "")
        if value and value not in ("C", "POSIX"):
            return "zh" if value.lower().startswith("zh") else "en"
    found = locale.getlocale()[0] or ""
    return "zh" if found.lower().startswith(("zh", "chinese")) else "en"


def fingerprint(text: str) -> str:
    """Eight hex digits of the English's SHA-1: what a translation was made from."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def placeholders(template: str) -> set[str]:
    """The field names a template formats (`{what}`, `{n:g}`, `{err!r}` → what, n, err)."""
    return {re.split(r"[.\[]", name, maxsplit=1)[0]
            for _, name, _, _ in string.Formatter().parse(template) if name is not None}


# ---------------------------------------------------------------- catalogues

@dataclass(frozen=True)
class Message:
    """One block of a catalogue: the translation of one key's English."""

    key: str
    fp: str
    text: str
    todo: bool = False


def parse_catalogue(text: str, path: Path | str = "<catalogue>") -> dict[str, Message]:
    """The blocks of a catalogue, by key (see the module docstring for the format)."""
    messages: dict[str, Message] = {}
    mark: re.Match[str] | None = None
    body: list[str] = []

    def close() -> None:
        if mark is None:
            return
        if mark["key"] in messages:
            raise ValueError(f"{path}: message {mark['key']!r} is translated twice")
        messages[mark["key"]] = Message(mark["key"], mark["fp"], "\n".join(body).rstrip("\n"),
                                        bool(mark["todo"]))

    for line in text.splitlines():
        if _COMMENT.match(line):
            close()
            mark, body = _MARKER.match(line), []
        elif mark is not None:
            body.append(line)
    close()
    return messages


class MissingMessage(LookupError):
    """A key asked for in a language whose catalogue has no block for it."""


class Catalogue:
    """A package's catalogues, `FOLDER/<lang>.md`, each read once, when first needed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._read: dict[str, dict[str, Message]] = {}
        self._lock = threading.Lock()

    def path(self, lang: str) -> Path:
        return self.folder / f"{lang}.md"

    def messages(self, lang: str) -> dict[str, Message]:
        with self._lock:
            if lang not in self._read:
                path = self.path(lang)
                self._read[lang] = parse_catalogue(path.read_text(encoding="utf-8"), path)
            return self._read[lang]

    def template(self, key: str, en: str, lang: str) -> str:
        """The template of `key` in `lang`: `en` itself in the source language."""
        if lang == SOURCE_LANG:
            return en
        found = self.messages(lang).get(key)
        if found is None:
            raise MissingMessage(f"no {lang} text for message {key!r} in {self.path(lang)} "
                                 "(`teamdesk messages` drafts its block)")
        return found.text

    def say(self, key: str, en: str, /, *, lang: str | None = None, **fields: Any) -> str:
        """The message `key` in the edition's language, or in `lang` when given (a caller
        told which one to speak): `en`, or the catalogue's template, formatted with
        `fields`."""
        return self.template(key, en, lang or _edition()).format(**fields)


_edition = lang  # `say`'s own `lang` parameter shadows the function's name

#: The dev tools' own words (`devkit/i18n/zh.md`).
CATALOGUE = Catalogue(Path(__file__).parent)
say = CATALOGUE.say


def listing(items: Iterable[str], *, conjunction: bool = False,
            lang: str | None = None) -> str:
    """`items` as one list in the language — "a, b, c", or with `conjunction` "a and b" —
    each edition joining a list its own way (the dev tools' catalogue holds the words;
    `labs.i18n` passes this on)."""
    out: str | None = None
    for item in items:
        if out is None:
            out = item
        elif conjunction:
            out = say("list.and", "{items} and {item}", items=out, item=item, lang=lang)
        else:
            out = say("list.more", "{items}, {item}", items=out, item=item, lang=lang)
    return out or ""


# ---------------------------------------------------------------- messages in the source

@dataclass(frozen=True)
class Call:
    """One `say(...)` in a package's source. `key` and `en` are None when not literal
    strings; `fields` None when passed with `**`."""

    file: Path
    line: int
    key: str | None
    en: str | None
    fields: frozenset[str] | None

    def where(self, root: Path) -> str:
        return f"{self.file.relative_to(root)}:{self.line}"


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def calls(package: Path) -> list[Call]:
    """Every call of a function named `say` (`say(…)`, `i18n.say(…)`) in `package`'s
    `*.py` files, in the order of the source."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        nodes = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and (node.func.id if isinstance(node.func, ast.Name)
                      else getattr(node.func, "attr", None)) == "say"]
        for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
            args = [*node.args, None, None]
            kws = [k.arg for k in node.keywords]
            fields = None if None in kws else frozenset(k for k in kws if k != "lang")
            found.append(Call(path, node.lineno, _literal(args[0]), _literal(args[1]), fields))
    return found


def draft(package: Path, extra: Iterable[Call] = (), lang: str = "zh") -> Path:
    """Rewrite `package`'s catalogue for a translator, from its calls (`calls()`) and the
    `extra` messages its code says under keys it makes (a case's words): blocks grouped by
    module in the order of the calls, fresh translations kept, stale ones marked ` todo`
    under the new fingerprint, missing ones filled with the English and marked ` todo`,
    unused ones dropped."""
    path = package / "i18n" / f"{lang}.md"
    old = parse_catalogue(path.read_text(encoding="utf-8"), path) if path.exists() else {}
    name = f"{package.name}/i18n/{lang}.md"
    blocks = [f"<!-- {name}: the {lang} text of every message `{package.name}` says "
              "(format: devkit/i18n/__init__.py). -->\n"
              "<!-- One block per message: its marker, then its template on the lines below. "
              "The English is at the call: search for the key. -->\n"
              "<!-- Keep the {fields} of the English, no more, no fewer; {{ and }} are "
              "literal braces. -->\n"
              "<!-- A changed English changes the fingerprint: `teamdesk messages` marks the "
              "block ' todo'; translate it again, then remove ' todo'. -->\n"]
    done: set[str] = set()
    group = None
    # A stable sort: calls on one line (and a case's words) keep their order.
    for call in sorted([*calls(package), *extra], key=lambda c: (c.file, c.line)):
        if call.key is None or call.en is None or call.key in done:
            continue
        done.add(call.key)
        module = call.file.relative_to(package.parent).as_posix()
        if module != group:
            group = module
            blocks.append(f"<!-- {'=' * 8} {module} {'=' * 8} -->\n")
        entry = old.get(call.key)
        fresh = entry is not None and not entry.todo and entry.fp == fingerprint(call.en)
        text = entry.text if entry is not None else call.en
        todo = "" if fresh else " todo"
        blocks.append(f"<!-- msg {call.key} en {fingerprint(call.en)}{todo} -->\n{text}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(blocks), encoding="utf-8")
    return path
