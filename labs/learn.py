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

from devkit.i18n import say
from labs.exercises import Verdict, failed, not_attempted, passed


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
        print(say(f"No guess written — that's fine. What happened: {actual!r}.",
                  f"没有写猜测——没关系。实际发生的是：{actual!r}。"))
        matched = False
    elif _norm(guess) == _norm(actual):
        print(say(f"Right: {actual!r}.", f"猜对了：{actual!r}。"))
        matched = True
    else:
        print(say(f"You guessed {guess!r}; what happened: {actual!r}.",
                  f"你猜的是 {guess!r}；实际发生的是：{actual!r}。"))
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
            verdict = failed(say(f"Not yet{': ' + reason if reason else '.'}",
                                 f"还不对{'：' + reason if reason else '。'}"))
    print(verdict)
    return verdict
