"""Ask before you tell: nothing a learner reads before a reveal gives its answer away.

A prediction is a `predict` cell (`guess_x = None  # your guess: …`) and its reveal, the
first later code cell that calls `reveal(guess_x, …)` (`labs.learn`) — or, for a reveal of
its own, the first later code cell that reads `guess_x`. What the learner has
read by then is the notebook's front matter (every cell before the first `## ` section:
title, "What you will learn"), any glossary section above, and the prediction's own
section from its heading to the reveal — markdown, headings, step names, comments and
code alike; only the predict cell's line of choices is left out, since it lists the
right answer among the wrong ones, and so is a heading that comes after the predict cell:
where the book's own heading states the outcome, the prediction goes before it (the
heading stays verbatim, and the learner has guessed by the time they read it).

Each prediction declares its answer in `notebooks/answers.toml`, keyed by notebook and
guess variable: `answer`, the value as the reveal prints it in the stored run (so a
declaration that no longer matches the system fails; for a reveal of its own, a text its
output holds), and `en` / `zh`, the words and phrases that would give it away in each
edition. A spoiler is matched without case; an
English one at the start of a word, so "reject" also finds "rejected"; a phrase may wrap
a line. Every prediction of every chapter notebook must be declared.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from devkit import notebook_cells

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ANSWERS = NOTEBOOKS / "answers.toml"
#: Every chapter notebook: each prediction declared, none answered early.
CHECKED = tuple(sorted(p.stem for p in NOTEBOOKS.glob("[0-9]*.ipynb")))
_GUESS = re.compile(r"^(\w+)\s*=\s*None\b", re.MULTILINE)
#: The line of a predict cell that lists the choices (the answer is among them).
_CHOICES = re.compile(r"#\s*(your guess|你的猜测)\s*[:：]")
_GLOSSARY = re.compile(r"^##.*(Glossary|词汇表)", re.MULTILINE)


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _is_heading(cell: dict) -> bool:
    return cell["cell_type"] == "markdown" and _src(cell).lstrip().startswith("#")


def _output(cell: dict) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(_src({"source": o.get("text", "")}))
        elif "text/plain" in o.get("data", {}):
            out.append(_src({"source": o["data"]["text/plain"]}))
    return "".join(out)


def _without_heading(text: str) -> str:
    """A markdown cell without its heading line and the italic English line under it: a
    book heading that would give an answer away comes after the prediction, which the
    learner has answered by then (the heading stays verbatim)."""
    lines = text.splitlines()
    while lines and (lines[0].lstrip().startswith("#") or not lines[0].strip()
                     or (lines[0].startswith("*") and lines[0].rstrip().endswith("*"))):
        lines.pop(0)
    return "\n".join(lines)


@dataclass(frozen=True)
class Prediction:
    notebook: str
    guess: str
    predict: int
    reveal: int
    #: (cell index, text) the learner has read before the reveal.
    read: tuple[tuple[int, str], ...]


def predictions(cells: list[dict], notebook: str) -> list[Prediction]:
    """Every prediction of a notebook's cells, with what is read before its reveal."""
    first = next(i for i, c in enumerate(cells)
                 if c["cell_type"] == "markdown" and _src(c).lstrip().startswith("## "))
    found = []
    for i, cell in enumerate(cells):
        if "predict" not in cell.get("metadata", {}).get("tags", []):
            continue
        guesses = _GUESS.findall(_src(cell))
        assert guesses, f"{notebook} cell {i}: a predict cell binds no `guess = None`"
        for guess in guesses:
            # `learn.reveal(guess, …)`, or else the first later cell that reads the guess
            # (a reveal of its own, e.g. 90's: any of several invariants is right).
            call = re.compile(rf"reveal\(\s*{re.escape(guess)}\b")
            reads = re.compile(rf"\b{re.escape(guess)}\b")
            later = [j for j in range(i + 1, len(cells)) if cells[j]["cell_type"] == "code"]
            reveal = next((j for j in later if call.search(_src(cells[j]))),
                          next((j for j in later if reads.search(_src(cells[j]))), None))
            assert reveal is not None, f"{notebook} cell {i}: no reveal of {guess}"
            start = next(h for h in range(i, -1, -1) if _is_heading(cells[h]) or h == 0)
            shown = [k for k in range(first)]
            shown += [k for k in range(first, start) if _GLOSSARY.search(_src(cells[k]))]
            shown += list(range(start, reveal))
            read = []
            for k in shown:
                text = _src(cells[k])
                if k == i:
                    text = "\n".join(line for line in text.splitlines()
                                     if not _CHOICES.search(line))
                elif k > i and _is_heading(cells[k]):
                    text = _without_heading(text)
                read.append((k, text))
            found.append(Prediction(notebook, guess, i, reveal, tuple(read)))
    return found


def spoiled(prediction: Prediction, spoilers: list[str]) -> list[str]:
    """`cell k: "spoiler"` for every spoiler found in what is read before the reveal."""
    hits = []
    for spoiler in spoilers:
        pattern = (re.compile(rf"(?<![\w]){re.escape(spoiler)}", re.IGNORECASE)
                   if spoiler.isascii() else re.compile(re.escape(spoiler)))
        hits += [f"cell {k}: {spoiler!r}" for k, text in prediction.read
                 if pattern.search(" ".join(text.split()))]  # a phrase may wrap
    return hits


def _cells(path: Path) -> list[dict]:
    return notebook_cells.cells(path)


ANSWER_KEY: dict = tomllib.loads(ANSWERS.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", CHECKED)
def test_every_prediction_declares_its_answer_as_the_run_shows_it(name: str) -> None:
    cells = _cells(NOTEBOOKS / f"{name}.ipynb")
    declared = ANSWER_KEY.get(name, {})
    found = {p.guess: p for p in predictions(cells, name)}
    assert sorted(declared) == sorted(found), (
        f"{name}: notebooks/answers.toml declares {sorted(declared)}, the notebook "
        f"predicts {sorted(found)}")
    for guess, p in found.items():
        entry = declared[guess]
        assert entry.get("en") and entry.get("zh"), f"{name}.{guess}: no en/zh spoilers"
        shown = _output(cells[p.reveal])
        said = f": {entry['answer']}." if "reveal(" in _src(cells[p.reveal]) else entry["answer"]
        assert said in shown, (
            f"{name}.{guess}: the reveal (cell {p.reveal}) shows {shown!r}, not "
            f"{entry['answer']!r}")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", CHECKED)
def test_nothing_read_before_a_reveal_gives_its_answer(name: str, lang: str) -> None:
    path = NOTEBOOKS / (f"{name}.ipynb" if lang == "en" else f"zh/{name}.ipynb")
    found = predictions(_cells(path), name)
    hits = [f"{p.guess} (revealed in cell {p.reveal}) — {hit}" for p in found
            for hit in spoiled(p, ANSWER_KEY[name][p.guess][lang])]
    assert not hits, f"{path.relative_to(ROOT)} tells before it asks:\n" + "\n".join(hits)


def test_a_spoiler_is_found_in_a_heading_a_step_name_and_the_learn_list() -> None:
    md = lambda s: {"cell_type": "markdown", "source": s, "metadata": {}}  # noqa: E731
    code = lambda s, *tags: {"cell_type": "code", "source": s,  # noqa: E731
                             "metadata": {"tags": list(tags)}, "outputs": []}
    cells = [md("# T\n**What you will learn**\n- a late write is rejected"),
             md("## 1. Earlier"), code("x = 'rejected'  # an earlier section"),
             md("## 2. The export is refused"),
             code("# predict: what happens?\nguess = None  # your guess: \"refused\" or \"ok\"",
                  "predict"),
             code("# step: Ben's export is refused"),
             code("learn.reveal(guess, 'refused')"),
             md("It was refused.")]
    (p,) = predictions(cells, "t")
    assert (p.predict, p.reveal) == (4, 6)
    assert spoiled(p, ["refused"]) == ["cell 3: 'refused'", "cell 5: 'refused'"]
    assert spoiled(p, ["reject"]) == ["cell 0: 'reject'"]  # the learn list, a stem
    assert spoiled(p, ["ok"]) == []  # only in the choices line, and in an earlier section


def test_a_book_heading_after_the_prediction_is_read_after_the_guess() -> None:
    md = lambda s: {"cell_type": "markdown", "source": s, "metadata": {}}  # noqa: E731
    code = lambda s, *tags: {"cell_type": "code", "source": s,  # noqa: E731
                             "metadata": {"tags": list(tags)}, "outputs": []}
    cells = [md("# T"), md("## 1. Setup\nA pauses inside its transaction."),
             code("guess = None  # your guess: 1 or 2", "predict"),
             md("## §5 A rolls back\n*A rolls back*\n\nThen A is released; it rolls back."),
             code("learn.reveal(guess, 1)")]
    (p,) = predictions(cells, "t")
    assert spoiled(p, ["rolls back"]) == ["cell 3: 'rolls back'"]  # the body still counts
    cells[3] = md("## §5 A rolls back\n*A rolls back*\n\nThen A is released.")
    (p,) = predictions(cells, "t")
    assert spoiled(p, ["rolls back"]) == []
