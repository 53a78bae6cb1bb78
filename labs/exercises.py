"""One protocol for every exercise a notebook judges: a registry keyed by the cells' tags,
one `Verdict`, one answer for "not attempted yet", and one way to open a world of its
own for a judge that needs one (`labs.worlds`, above the lab it opens).

    await check("26b.fence", my_where)            # a check cell: its last line shows the verdict

An exercise is three cells that carry its key as a tag beside their role: `exercise` (the
learner's starter, binding the answer's name, e.g. `my_where = None`), `check` (the line
above) and `solution` (hidden; binds the solution's name and asserts it passes). A scene
module declares the judge with `@exercise(key, answer=..., solution=...)`; the judge takes
the answer and what the check cell passes (`lab=lab`, …) and returns a `Verdict`. The
suite runs every registered exercise the same way (`tests/labs/test_exercise_registry.py`):
the notebook's starter is refused, its solution accepted, and each named wrong answer
refused — a judge that cannot tell them apart judges nothing.

Judges are found among the scene modules at run time: importing one registers its
judges and its diagnosis cases (`labs.worlds.register_cases`), so this module imports no
scene and the package stays acyclic.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import operator
import pkgutil
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labs.i18n import say

if TYPE_CHECKING:
    from teamdesk.config import Settings


@dataclass(frozen=True, repr=False)
class Verdict:
    """What a judge said: `ok`, one heading (✓ or ✗ first), notes under it, and what it
    found (`facts`, for tests and the curious). Shown as text by `print` and as Markdown
    when it is a cell's last value."""

    ok: bool
    heading: str
    notes: tuple[str, ...] = ()
    #: False only for "not attempted yet": no answer was written.
    attempted: bool = True
    facts: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        """True when it holds: `assert verdict` in a solution cell, `if verdict:`."""
        return self.ok

    def __str__(self) -> str:
        return "\n".join([self.heading, *(f"  {n}" for n in self.notes)])

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        return "\n".join([f"**{self.heading}**", *(f"- {n}" for n in self.notes)])


def passed(heading: str, *notes: str, **facts: Any) -> Verdict:
    """A verdict that holds; the heading gets its ✓."""
    return Verdict(True, f"✓ {heading}", tuple(notes), facts=facts)


def failed(heading: str, *notes: str, **facts: Any) -> Verdict:
    """A verdict that does not hold (yet); the heading gets its ✗."""
    return Verdict(False, f"✗ {heading}", tuple(notes), facts=facts)


def not_attempted(name: str) -> Verdict:
    """The one answer to an exercise whose answer `name` (or names, "my_cause and
    my_rule") is still None."""
    return Verdict(False, say("exercises.not-attempted", "not attempted yet: write your "
                              "answer into {name} above, or open the hidden solution cell below",
                              name=name), attempted=False)


def stopped_note(err: BaseException) -> str:
    """The note of a judged run that ended early: a bounded wait ran out, or the database
    refused; its first line, not a traceback."""
    first = (str(err).splitlines() or [""])[0]
    return say("exercises.run-stopped", "the run stopped: {error_type}: {first}",
               error_type=type(err).__name__, first=first)


# ---------------------------------------------------------------- a learner's test, run once

@dataclass
class TestRun:
    """One run of a learner's test in one world. A judge of a written test runs it in two:
    one where the rule holds (it must pass) and one with the bug switched on (it must fail,
    by an assertion: a test that cannot catch the bug is not a test)."""

    __test__ = False  # not a pytest class

    #: The world, as the verdict shows it (in the edition's words).
    world: str
    #: "passed", "failed" (an assertion said no), "timed out" (a bounded wait inside the
    #: test ran out), "errored" (any other exception) or "hung" (the run's bound ran out).
    outcome: str = "errored"
    detail: str = ""
    #: The gates the test left unreleased when it ended ("point for actor").
    held: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        outcomes = {"passed": say("exercises.outcome.passed", "passed"),
                    "failed": say("exercises.outcome.failed", "failed"),
                    "timed out": say("exercises.outcome.timed-out", "timed out"),
                    "errored": say("exercises.outcome.errored", "errored"),
                    "hung": say("exercises.outcome.hung", "hung")}
        line = say("exercises.run.line", "{world}: {outcome}", world=self.world,
                   outcome=outcomes.get(self.outcome, self.outcome))
        line += f" — {self.detail}" if self.detail else ""
        if self.held:
            line += "\n    " + say("exercises.run.held", "and it left {held} held: release "
                                   "gates in finally", held=", ".join(self.held))
        return line


async def run_test(run: TestRun, test: Awaitable[Any], *, bound: float) -> TestRun:
    """Await a learner's test, at most `bound` seconds, and write how it ended into `run`:
    any exception of the learner's code is an outcome, never a crash of the judge."""
    try:
        await asyncio.wait_for(test, bound)
        run.outcome = "passed"
    except TimeoutError:
        run.outcome = "hung"
        run.detail = say("exercises.run.still-running", "still running after {bound:g} s",
                         bound=bound)
    except AssertionError as err:
        run.outcome = "timed out" if _is_a_wait(err) else "failed"
        run.detail = first_line(err)
    except Exception as err:  # the learner's code: any error is a verdict, not a crash
        run.outcome, run.detail = "errored", first_line(err)
    return run


def whole_number(value: Any) -> int | None:
    """`value` as an int when it is a whole number — numpy's integers too, which a count
    made with pandas returns — else None (a bool is not a number here)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


@dataclass(frozen=True)
class Ran:
    """How a learner's function ran (`run_answer`): what it returned, or the verdict that
    refuses it (it ran past its bound, or raised)."""

    value: Any = None
    refused: Verdict | None = None


async def run_answer(fn: Callable[..., Any], *args: Any, bound: float) -> Ran:
    """Call the learner's `fn(*args)` (awaited if it is async), at most `bound` seconds.
    Their code's errors are a verdict — their own `assert` or `TimeoutError` too — and so
    is running past the bound; a bounded wait of the harness that ran out inside it
    (`_is_a_wait`), or the database refusing, propagates, for `labs.worlds.fresh_world` to
    note as a run that stopped."""
    import psycopg

    timeout = asyncio.timeout(bound)
    try:
        async with timeout:
            result = fn(*args)
            value = await result if inspect.isawaitable(result) else result
    except TimeoutError as err:
        if timeout.expired():
            return Ran(refused=failed(say("exercises.answer.still-running", "your function was "
                                          "still running after {bound:g} s", bound=bound)))
        return Ran(refused=_raised(err))
    except psycopg.Error:
        raise
    except AssertionError as err:
        if _is_a_wait(err):
            raise
        return Ran(refused=_raised(err))
    except Exception as err:  # the learner's code: any error is a verdict, not a crash
        return Ran(refused=_raised(err))
    return Ran(value)


def _raised(err: BaseException) -> Verdict:
    return failed(say("exercises.answer.raised", "your function raised an error:"),
                  first_line(err))


def first_line(err: BaseException) -> str:
    """The error's first line; for a bare `assert`, the line that failed."""
    text = (str(err).splitlines() or [""])[0]
    if not text:
        frames = traceback.extract_tb(err.__traceback__)
        text = (say("exercises.error-at", "at `{line}`", line=frames[-1].line)
                if frames and frames[-1].line else say("exercises.no-message", "(no message)"))
    line = f"{type(err).__name__}: {text}"
    return line if len(line) <= 160 else line[:159].rsplit(" ", 1)[0] + " …"


def _is_a_wait(err: AssertionError) -> bool:
    """A bounded wait that ran out (a gate's `GateTimeout`, `lab.wait_for`'s
    `EventTimeout`): it reports a sync point that never came, not a fact the test
    asserted."""
    from teamdesk.testing import EventTimeout, GateTimeout

    return isinstance(err, GateTimeout | EventTimeout)


#: A judge: the learner's answer and what the check cell passes, a `Verdict`.
Judge = Callable[..., Awaitable[Verdict]]
#: What a judge needs besides the answer, made outside a notebook (for the suite): given
#: the suite's settings, an async context manager yielding the check cell's keywords
#: (`labs.worlds.world_context` makes one in a lab world of its own).
Context = Callable[["Settings"], contextlib.AbstractAsyncContextManager[dict[str, Any]]]


@contextlib.asynccontextmanager
async def no_context(settings: Settings) -> AsyncIterator[dict[str, Any]]:
    """For a judge that opens its own worlds: it only needs the servers' settings."""
    yield {"settings": settings}


@dataclass(frozen=True)
class Exercise:
    """One registered exercise: `key` is the tag of its cells; `answer` the name its
    exercise cell binds, `solution` the name its solution cell binds; `wrong` plausible
    wrong answers by name, each of which the judge must refuse."""

    key: str
    #: One name, or several (a diagnosis: cause and rule) whose values form a tuple.
    answer: str | tuple[str, ...]
    solution: str | tuple[str, ...]
    judge: Judge
    wrong: Mapping[str, Any] = field(default_factory=dict)
    context: Context = no_context


REGISTRY: dict[str, Exercise] = {}


def exercise(key: str, *, answer: str | tuple[str, ...], solution: str | tuple[str, ...],
             wrong: Mapping[str, Any] | None = None, context: Context = no_context,
             ) -> Callable[[Judge], Judge]:
    """Register the decorated judge as exercise `key` (see `Exercise`)."""

    def register(judge: Judge) -> Judge:
        if key in REGISTRY and REGISTRY[key].judge is not judge:
            raise ValueError(f"exercise {key!r} is registered twice")
        REGISTRY[key] = Exercise(key, answer, solution, judge, dict(wrong or {}), context)
        return judge

    return register


def load_all() -> dict[str, Exercise]:
    """Every exercise of every scene module (importing them registers their judges and
    cases); found by name at run time, as `labs.cases` finds cases, so that this module,
    which the scenes import, imports none of them."""
    scenes = importlib.import_module("labs.scenes")
    for info in pkgutil.iter_modules(scenes.__path__):
        importlib.import_module(f"{scenes.__name__}.{info.name}")
    return REGISTRY


def find(key: str) -> Exercise:
    """The exercise registered as `key`; a KeyError names the known ones."""
    if key not in REGISTRY:
        load_all()
    try:
        return REGISTRY[key]
    except KeyError:
        raise KeyError(f"no exercise {key!r}; known: {', '.join(sorted(REGISTRY))}") from None


async def check(key: str, answer: Any, **context: Any) -> Verdict:
    """Judge the learner's `answer` to exercise `key`: "not attempted yet" while it is
    None (every part of it, for several names), else the exercise's judge with `context`
    (e.g. `lab=lab`)."""
    found = find(key)
    names = found.answer if isinstance(found.answer, tuple) else (found.answer,)
    values = answer if isinstance(found.answer, tuple) and answer is not None else (answer,)
    if all(v is None for v in values):
        return not_attempted(" and ".join(names))
    return await found.judge(answer, **context)
