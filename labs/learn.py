"""Active-learning cells: predict → reveal, exercise → check → solution: the learner commits
to an answer before the system shows one.

Notebook cells carry tags that tools and CI can read:

- `predict`: a question; the learner writes a guess into a variable (`guess = None  # …`).
  A later cell runs the scene and calls `reveal(guess, actual)`.
- `exercise`: the learner changes something (`answer = None  # your code`); the next cell,
  tagged `check`, calls `check(answer, ok)`; then a `solution` cell (source hidden with
  `metadata.jupyter.source_hidden`) fills in an answer and asserts `check(...)`, so CI runs
  the whole thing and a learner can peek.
- `recap`: a markdown cell with the key points.

Both print one friendly line and never raise for a missing or wrong guess: a learner's
wrong answer is a step of learning, not an error. Only a solution cell asserts. `check`
speaks as every judged exercise does (`labs.exercises`): one `Verdict`, one "not
attempted yet".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labs.exercises import Verdict, failed, not_attempted, passed
from labs.i18n import say


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.strip().lower().split())
    if isinstance(value, list | tuple | set | frozenset):
        return sorted(_norm(v) for v in value)
    return value


def reveal(guess: Any, actual: Any, *, why: str = "") -> bool:
    """Compare the learner's guess with what happened; True when they match. Strings are
    compared without case and extra spaces, collections without order."""
    if guess is None:
        print(say("learn.reveal.no-guess", "No guess written — that's fine. What happened: "
                  "{actual!r}.", actual=actual))
        matched = False
    elif _norm(guess) == _norm(actual):
        print(say("learn.reveal.right", "Right: {actual!r}.", actual=actual))
        matched = True
    else:
        print(say("learn.reveal.wrong", "You guessed {guess!r}; what happened: {actual!r}.",
                  guess=guess, actual=actual))
        matched = False
    if why:
        print(why)
    return matched


def check(answer: Any, ok: Callable[[Any], bool | str], *, holds: str) -> Verdict:
    """Say whether the learner's `answer` holds, as every exercise says it
    (`labs.exercises.Verdict`, printed and returned; true when it holds). `ok(answer)`
    returns True, or False / a short reason why not. `holds` is the sentence printed when
    it does. `ok` is plain (not async): read what it needs from the lab first, e.g.
    `truth = await ...`."""
    if answer is None:
        verdict = not_attempted("answer")
    else:
        result = ok(answer)
        if result is True:
            verdict = passed(holds)
        else:
            reason = result if isinstance(result, str) and result else ""
            verdict = failed(say("learn.check.not-yet-why", "Not yet: {reason}", reason=reason)
                             if reason else say("learn.check.not-yet", "Not yet."))
    print(verdict)
    return verdict
