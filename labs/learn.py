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

Both functions print one friendly line and never raise for a missing or wrong guess: a
learner's wrong answer is a step of learning, not an error. Only a solution cell asserts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
        print(f"No guess written — that's fine. What happened: {actual!r}.")
        matched = False
    elif _norm(guess) == _norm(actual):
        print(f"Right: {actual!r}.")
        matched = True
    else:
        print(f"You guessed {guess!r}; what happened: {actual!r}.")
        matched = False
    if why:
        print(why)
    return matched


def check(answer: Any, ok: Callable[[Any], bool | str], *, holds: str) -> bool:
    """Say whether the learner's `answer` holds. `ok(answer)` returns True, or False / a
    short reason why not. `holds` is the sentence printed when it does. `ok` is plain
    (not async): read what it needs from the lab first, e.g. `truth = await ...`."""
    if answer is None:
        print("Not attempted yet — try it above, or open the hidden solution cell below.")
        return False
    verdict = ok(answer)
    if verdict is True:
        print(f"✓ {holds}")
        return True
    print(f"✗ Not yet{': ' + verdict if isinstance(verdict, str) and verdict else '.'}")
    return False
