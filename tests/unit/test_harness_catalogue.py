"""One way to write Chinese: the harness's (and the dev tools') words are English at the
call, `say(key, english, **fields)`, and Chinese in a catalogue beside the package —
`labs/i18n/zh.md`, `devkit/i18n/zh.md` (devkit.i18n) — kept in step with the English the
way the notebooks' editions are (test_editions.py): every message translated from the
English as it is now, with the same fields; no translation left without its message; and
no Chinese anywhere else in `labs/`.

The messages are found by reading the source (`devkit.i18n.calls`), plus those whose keys
the harness makes (`labs.messages.made()`): the diagnosis cases' words, the notebooks' step
titles, the answers given in words and the chaos run's English values (`labs.chaos.words`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from devkit import i18n
from devkit.i18n import Call, Catalogue, MissingMessage, fingerprint, placeholders

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("labs", "devkit")
#: Where a `say` may take a key that is not a literal: the cases' words and the chaos run's
#: English values (see the docstring).
DYNAMIC = {ROOT / "labs" / "cases.py", ROOT / "labs" / "chaos" / "words.py"}
CJK = re.compile(f"[{i18n.CJK}]")
REFRESH = ("run `teamdesk messages` (it marks the block ' todo' under the new fingerprint), "
           "translate the block again in {catalogue} and remove ' todo'")


def _dynamic(call: Call) -> bool:
    return call.file in DYNAMIC and call.key is None


def messages(package: str) -> list[Call]:
    """Every message `package` says: its literal calls (any other fails
    `test_every_say_has_a_literal_key_and_english_and_named_fields`), and for the harness
    those whose keys it makes (`labs.messages.made()`)."""
    found = [c for c in i18n.calls(ROOT / package) if c.key is not None and c.en is not None]
    if package == "labs":
        from labs.messages import made

        found += made()
    return found


def catalogue(package: str) -> dict[str, i18n.Message]:
    return Catalogue(ROOT / package / "i18n").messages("zh")


def _where(call: Call) -> str:
    return call.where(ROOT)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_say_has_a_literal_key_and_english_and_named_fields(package):
    bad = [_where(c) for c in i18n.calls(ROOT / package) if not _dynamic(c)
           and (c.key is None or c.en is None or c.fields is None)]
    assert not bad, ("say(...) needs a literal key, a literal English template and named "
                     f"fields (no f-string, no **), so the catalogue can be checked: {bad}")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_message_is_translated_from_the_english_as_it_is_now(package):
    """The key is in the catalogue, not a draft, translated from this very English (its
    fingerprint), with the same fields as the English and the call."""
    cat, path = catalogue(package), f"{package}/i18n/zh.md"
    problems = []
    for call in messages(package):
        entry, where, fields = cat.get(call.key), _where(call), placeholders(call.en)
        if entry is None:
            problems.append(f"{call.key} ({where}): no translation in {path}; "
                            "`teamdesk messages` drafts its block")
            continue
        if entry.todo:
            problems.append(f"{call.key} ({where}): still a draft (todo) in {path}")
        if entry.fp != fingerprint(call.en):
            problems.append(f"{call.key} ({where}): the English changed since it was "
                            "translated; " + REFRESH.format(catalogue=path))
        if placeholders(entry.text) != fields:
            problems.append(f"{call.key} ({where}): the Chinese has fields "
                            f"{sorted(placeholders(entry.text))}, the English {sorted(fields)}")
        if call.fields is not None and call.fields != fields:
            problems.append(f"{call.key} ({where}): the call passes {sorted(call.fields)}, "
                            f"the English places {sorted(fields)}")
        if (call.en.endswith("\n")
                or re.search(r"\s*$", entry.text)[0] != re.search(r"\s*$", call.en)[0]):
            problems.append(f"{call.key} ({where}): the Chinese does not end in the English's "
                            "white space, or the English ends in a newline (a catalogue "
                            "cannot hold one: put it outside the call)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_translation_is_left_without_its_message(package):
    used = {c.key for c in messages(package)}
    unused = sorted(set(catalogue(package)) - used)
    assert not unused, (f"{package}/i18n/zh.md translates messages nobody says: {unused}; "
                        "`teamdesk messages` drops them")


@pytest.mark.parametrize("package", PACKAGES)
def test_a_key_means_one_english(package):
    english: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for call in messages(package):
        english[call.key][call.en].append(_where(call))
    twice = {key: dict(texts) for key, texts in english.items() if len(texts) > 1}
    assert not twice, f"a key used with different English (give each its own key): {twice}"


def test_the_harness_writes_no_chinese_outside_its_catalogue():
    """No CJK character in `labs/**/*.py`: the catalogue is the only home of the harness's
    Chinese, so a translator finds all of it in one file, fingerprinted."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "labs").rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if CJK.search(line)]
    assert not found, "Chinese belongs in labs/i18n/zh.md:\n" + "\n".join(found)


def test_the_harness_speaks_through_its_own_catalogue():
    """A labs module that imported devkit's `say` would look its keys up in the dev tools'
    catalogue, and fail only in the 中文 edition."""
    wrong = [f"{path.relative_to(ROOT)}" for path in sorted((ROOT / "labs").rglob("*.py"))
             if re.search(r"from devkit\.i18n import[^\n]*\bsay\b|\bi18n\.say\(",
                          path.read_text(encoding="utf-8"))]
    assert not wrong, f"import say from labs.i18n: {wrong}"


# ---------------------------------------------------------------- the mechanism

CATALOGUE = """<!-- test catalogue -->

<!-- ======== x.py -->
<!-- msg x.hello en HELLO -->
你好，{name}！

<!-- msg x.two en TWO -->
第一行
  第二行（{n}）

<!-- msg x.todo en 00000000 todo -->
still English
"""


@pytest.fixture
def words(tmp_path):
    text = CATALOGUE.replace("HELLO", fingerprint("hello, {name}!"))
    text = text.replace("TWO", fingerprint("one\n  two ({n})"))
    (tmp_path / "zh.md").write_text(text, encoding="utf-8")
    return Catalogue(tmp_path)


def test_say_speaks_the_editions_language_or_the_one_it_is_told(words, monkeypatch):
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    assert words.say("x.hello", "hello, {name}!", name="Ann") == "你好，Ann！"
    assert words.say("x.hello", "hello, {name}!", name="Ann", lang="en") == "hello, Ann!"
    assert words.say("x.two", "one\n  two ({n})", n=2) == "第一行\n  第二行（2）"
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert words.say("x.hello", "hello, {name}!", name="Ann") == "hello, Ann!"
    assert words.say("x.hello", "hello, {name}!", name="Ann", lang="zh") == "你好，Ann！"


def test_a_catalogue_is_read_once_and_only_for_chinese(words, monkeypatch):
    monkeypatch.setenv("TEAMDESK_LANG", "en")
    assert words.say("x.nowhere", "{n:g} s", n=1.5) == "1.5 s"  # English: never read
    assert words._read == {}
    monkeypatch.setenv("TEAMDESK_LANG", "zh")
    words.say("x.hello", "hello, {name}!", name="A")
    words.path("zh").write_text("", encoding="utf-8")
    assert words.say("x.hello", "hello, {name}!", name="B") == "你好，B！"


def test_a_missing_key_names_itself_and_the_catalogue(words):
    with pytest.raises(MissingMessage, match=r"'x\.nowhere' in .*zh\.md"):
        words.say("x.nowhere", "nowhere", lang="zh")


def test_the_catalogue_format_round_trips(words):
    parsed = words.messages("zh")
    assert list(parsed) == ["x.hello", "x.two", "x.todo"]
    assert parsed["x.todo"].todo and not parsed["x.hello"].todo
    assert parsed["x.two"].text == "第一行\n  第二行（{n}）"
    with pytest.raises(ValueError, match="translated twice"):
        i18n.parse_catalogue("<!-- msg a en 00000000 -->\nx\n<!-- msg a en 00000000 -->\ny")


def test_the_messages_are_found_in_the_source(tmp_path):
    (tmp_path / "m.py").write_text(
        'say("m.a", "a {x}", x=1)\ni18n.say("m.b", "b", lang="zh")\n'
        'say(f"m.{k}", "c")\nsay("m.d", "d", **kw)\n', encoding="utf-8")
    found = [(c.line, c.key, c.en, c.fields) for c in i18n.calls(tmp_path)]
    assert found == [(1, "m.a", "a {x}", {"x"}), (2, "m.b", "b", frozenset()),
                     (3, None, "c", frozenset()), (4, "m.d", "d", None)]


def test_draft_keeps_fresh_marks_stale_adds_missing_and_drops_unused(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "i18n").mkdir(parents=True)
    (pkg / "m.py").write_text('say("m.same", "same")\nsay("m.changed", "new English")\n'
                              'say("m.new", "brand new")\n', encoding="utf-8")
    (pkg / "i18n" / "zh.md").write_text(
        f"<!-- msg m.same en {fingerprint('same')} -->\n相同\n\n"
        f"<!-- msg m.changed en {fingerprint('old English')} -->\n旧的\n\n"
        f"<!-- msg m.gone en {fingerprint('gone')} -->\n没了\n", encoding="utf-8")
    extra = [Call(pkg / "m.py", 9, "m.extra", "extra", frozenset())]
    drafted = i18n.parse_catalogue(i18n.draft(pkg, extra).read_text(encoding="utf-8"))
    assert list(drafted) == ["m.same", "m.changed", "m.new", "m.extra"]
    assert drafted["m.same"] == i18n.Message("m.same", fingerprint("same"), "相同")
    assert drafted["m.changed"] == i18n.Message("m.changed", fingerprint("new English"),
                                                "旧的", todo=True)
    assert drafted["m.new"] == i18n.Message("m.new", fingerprint("brand new"), "brand new",
                                            todo=True)
