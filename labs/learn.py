"""Active-learning cells: predict → reveal, exercise → check → solution: the learner commits
to an answer before the system shows one.

Notebook cells carry tags that tools and CI can read:

- `predict`: a question; the learner writes a guess into a variable (`guess = None  # …`).
  A later cell runs the scene and calls `reveal(guess, actual)`.
- `recap`: a markdown cell with the key points.

`reveal` prints one friendly line and never raises for a missing or wrong guess: a
learner's wrong answer is a step of learning, not an error. Exercises (`exercise`,
`check`, `solution` cells) are judged by one registry, `labs.exercises`.

**Answers in words, in either language.** A prediction that asks for words ("both",
"skip it", an invariant's name) is revealed with the English the cell computes; in the
Chinese edition the learner may write the Chinese instead. The Chinese of each such answer
is in the harness catalogue under `answer.<slug>` (`answer_key`), one accepted form a
line, the first the one the reveal shows. `WORDS` lists those answers (the chaos
checker's invariant names are answers too: `labs.messages` adds them). Statuses, job
states, task names and rule ids are identifiers: they stay as they are in both editions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devkit.i18n import Call
from labs.i18n import made_key, quoted_at, say, translated

#: The notebooks' answers given in words, by their English (see the module docstring).
WORDS: tuple[str, ...] = (
    "a task row", "a job", "both", "nothing",                 # 23: what is left
    "runs it", "retries it later", "fails it for good",       # 23: the ghost job
    "remind again", "no-op",                                  # 24: d1 tomorrow
    "constant", "doubling",                                   # 26a: the backoff
    "the same job", "a new job",                              # 26a: the retry's job
    "progress", "result", "none",                             # 26b: A's failed write
    "nobody",                                                 # 26b: who writes FAILED
    "neither",                                                # 26c: which version kept
    "run it", "skip it", "fail the task",                     # 26d: an old delivery
    "add a new job", "leave it WAITING", "mark it FAILED",    # 26d: the scan
    "retry", "reject",                                        # 26a: the kinds exercise
)


def answer_key(answer: str) -> str:
    """The catalogue key of an answer's Chinese (`answer.` and the English, `made_key`)."""
    return made_key("answer", answer)


def forms(answer: str, lang: str | None = None) -> list[str]:
    """The ways a learner may write `answer` in the edition (or `lang`): in Chinese the
    catalogue's forms, then the English; in English the English alone."""
    found = translated(answer_key(answer), lang)
    if found is None:
        return [answer]
    return [*(line.strip() for line in found.splitlines() if line.strip()), answer]


def shown(answer: Any) -> Any:
    """`answer` as the edition shows it: a word answer in the edition's language."""
    return forms(answer)[0] if isinstance(answer, str) else answer


def same(guess: Any, answer: Any) -> bool:
    """Whether `guess` is `answer`: strings without case and extra spaces, in any of the
    edition's forms of a word answer (`forms`); collections without order."""
    if isinstance(guess, str) and isinstance(answer, str):
        return _norm(guess) in {_norm(f) for f in forms(answer)}
    return _norm(guess) == _norm(answer)


def messages(answers: tuple[str, ...] | list[str] = WORDS, path: str = __file__) -> list[Call]:
    """`answers` (by default `WORDS`) as messages of the harness catalogue, each at the
    line of `path` that quotes it (`labs.messages` adds the chaos checker's invariant
    names this way)."""
    return [Call(Path(path), quoted_at(Path(path), f'"{answer}"'), answer_key(answer), answer,
                 frozenset()) for answer in answers]


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.strip().lower().split())
    if isinstance(value, list | tuple | set | frozenset):
        return sorted(_norm(v) for v in value)
    return value


def reveal(guess: Any, actual: Any, *, why: str = "") -> bool:
    """Compare the learner's guess with what happened; True when they match (`same`: a
    word answer in either of the edition's languages). What happened is shown in the
    edition's words (`shown`)."""
    if guess is None:
        print(say("learn.reveal.no-guess", "No guess written — that's fine. What happened: "
                  "{actual!r}.", actual=shown(actual)))
        matched = False
    elif same(guess, actual):
        print(say("learn.reveal.right", "Right: {actual!r}.", actual=shown(actual)))
        matched = True
    else:
        print(say("learn.reveal.wrong", "You guessed {guess!r}; what happened: {actual!r}.",
                  guess=guess, actual=shown(actual)))
        matched = False
    if why:
        print(why)
    return matched


def __getattr__(name: str) -> Any:
    """A learner's kept copy written before its exercises were registered still calls
    `learn.check`: say what to do instead of a bare AttributeError."""
    if name == "check":
        raise AttributeError(say("learn.check.gone", "learn.check is gone: this copy of the "
                                 "notebook is older than the lab. Its exercises are checked "
                                 "with `await check(\"KEY\", answer)` now; the updated notebook "
                                 "is beside your copy (NAME.updated.ipynb)."))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
