"""Diagnosis cases: a world left in a state from the book's troubleshooting (ch. 23 §5–7,
ch. 26 §7), handed to the learner to name the cause and the rule that explains it.

    case = await lab.case("fault-a")       # the real system is run into the state
    case.show()                            # ledger row, queue job, this task's log lines
    case.choices                           # the causes to choose from
    await check("case.fault-a", (my_cause, my_rule), case=case)   # labs.exercises

A case is staged by the real parts — workers, the dispatcher, faults, gates — never by
writing the rows by hand, so the evidence is what a practitioner would find on a real
machine: the ledger, the queue and the product's log lines. The board's `verdict` column
is left out of the evidence (it would name the answer).

Cases are declared by the scene module of the notebook that hands them out (a `CASES`
dict in `labs/scenes/ch23.py`, `ch26d.py`, `ch90.py`, name → `CaseSpec`) and found by
name among the scene modules at run time, so this module imports no scene (the package
stays acyclic).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from devkit.i18n import Call, placeholders
from labs import tables
from labs.exercises import Context, Exercise, Verdict, failed, not_attempted, passed
from labs.i18n import quoted_at, say

if TYPE_CHECKING:
    from labs.lab import Lab


@dataclass(frozen=True)
class CaseSpec:
    """One diagnosis case. `stage(lab)` runs the real system into the case's state and
    returns the id of the task to look at. `choices` maps a cause key to the sentence the
    learner reads; `cause` is the right key, `rules` the rule ids that explain it (any one
    is accepted), `why` what the judge says once both are named. `book` is the book's own
    name for the case, if it has one ("Fault A"): both editions quote it in the book's
    Chinese, and `title` places it with `{book}`.

    The words are English here; the Chinese edition's are the harness catalogue's
    (`labs/i18n/zh.md`) under keys made from the case's name: `case.<name>.title`,
    `case.<name>.why`, `case.<name>.choice.<key>` and `case.<name>.book` (`messages()`)."""

    name: str
    title: str
    stage: Callable[[Any], Awaitable[str]]
    choices: dict[str, str]
    cause: str
    rules: frozenset[str]
    why: str
    #: For each wrong cause: what in the evidence contradicts it (the judge says it).
    refutes: dict[str, str] = field(default_factory=dict)
    book: str = ""
    #: Markers of the lines shown beside the task's own, among those written while the case
    #: was staged: `("dispatch.",)` adds the dispatcher's lines, for a case whose evidence is
    #: what the scans did (their fault lines name no task: a tick ends on the first row
    #: whose add fails, before it ever looks at the task in question).
    log_also: tuple[str, ...] = ()
    #: The names the notebook's exercise cell and solution cell bind (cause, rule).
    answer: tuple[str, str] = ("my_cause", "my_rule")
    solution: tuple[str, str] = ("solution_cause", "solution_rule")

    def __post_init__(self) -> None:
        if self.cause not in self.choices or len(self.choices) < 3:
            raise ValueError(f"case {self.name}: the cause must be one of ≥ 3 choices")
        if set(self.refutes) != set(self.choices) - {self.cause}:
            raise ValueError(f"case {self.name}: each wrong cause, and only those, needs what "
                             "in the evidence refutes it")
        for key, en in self.messages():
            if placeholders(en) - ({"book"} if key.endswith(".title") and self.book else set()):
                raise ValueError(f"case {self.name}: {key} may place only {{book}}")

    def messages(self) -> list[tuple[str, str]]:
        """The case's words as (catalogue key, English)."""
        words = [(f"case.{self.name}.title", self.title), (f"case.{self.name}.why", self.why)]
        words += [(f"case.{self.name}.choice.{key}", en) for key, en in self.choices.items()]
        words += [(f"case.{self.name}.refutes.{key}", en) for key, en in self.refutes.items()]
        return words + ([(f"case.{self.name}.book", self.book)] if self.book else [])

    def exercise(self, context: Context) -> Exercise:
        """The case as an exercise like any other: `await check("case.<name>", (cause,
        rule), case=case)`, its cells tagged `case.<name>`, two plausible wrong answers
        (another cause; the cause with a rule that does not explain it). `context` stages
        it outside a notebook (`labs.worlds.register_cases`, which the scene module that
        declares the case calls: this module sits below the lab and cannot open one)."""
        other = next(key for key in self.choices if key != self.cause)
        wrong = {"another cause": (other, min(self.rules)),
                 "the cause with a rule that does not explain it": (self.cause, "P99")}
        return Exercise(f"case.{self.name}", self.answer, self.solution, _judge_case, wrong,
                        context)

    # The keys are made from the case's name, so these are the harness's only calls of
    # `say` without a literal key; the catalogue test checks them through `messages()`.
    def word(self, key: str) -> Any:
        """`title`, `why`, `choices` or `refutes` in the edition's language."""
        prefix = f"case.{self.name}"
        if key == "choices":
            return {k: say(f"{prefix}.choice.{k}", en) for k, en in self.choices.items()}
        if key == "refutes":
            return {k: say(f"{prefix}.refutes.{k}", en) for k, en in self.refutes.items()}
        book = say(f"{prefix}.book", self.book, lang="zh") if self.book else ""
        return say(f"{prefix}.{key}", getattr(self, key), book=book)


@dataclass
class Case:
    """A staged case: the evidence, and the judge."""

    spec: CaseSpec
    task_id: str
    ledger: pd.DataFrame
    board: pd.DataFrame
    log: list[str] = field(default_factory=list)

    @property
    def choices(self) -> dict[str, str]:
        return dict(self.spec.word("choices"))

    def show(self) -> None:
        """Print the evidence (in a notebook, each frame is also displayed as a table)."""
        _display(say("cases.show.title", "## {title} — task {task_id}",
                     title=self.spec.word("title"), task_id=self.task_id),
                 self.ledger, self.board)
        if self.spec.log_also and self.log:
            print(say("cases.show.log-also", "log lines of this task, and the dispatcher's "
                      "while the case was staged:"))
        else:
            print(say("cases.show.log", "log lines of this task:") if self.log
                  else say("cases.show.no-log", "no log line names this task"))
        for line in self.log:
            print("  " + line)
        print(say("cases.show.causes", "causes to choose from:"))
        for key, text in self.spec.word("choices").items():
            print(f"  {key!r}: {text}")

    def judge(self, *, cause: str | None, rule: str | None) -> Verdict:
        """Right when `cause` is the case's cause key and `rule` one of its rule ids."""
        if cause is None or rule is None:
            return not_attempted(" and ".join(self.spec.answer))
        if cause not in self.spec.choices:
            keys = ", ".join(map(repr, self.spec.choices))
            return failed(say("cases.judge.unknown-cause", "{cause!r} is not one of the choices: "
                              "{keys}", cause=cause, keys=keys))
        if cause != self.spec.cause:
            # Case by case: what in this case's evidence contradicts that cause.
            return failed(say("cases.judge.wrong-cause", "not {cause!r}: {refutation}",
                              cause=cause, refutation=self.spec.word("refutes")[cause]))
        if str(rule).strip().upper() not in self.spec.rules:
            return failed(say("cases.judge.wrong-rule", "the cause is right, but {rule} is not the "
                              "rule that explains it (see RULES.md)", rule=rule))
        return passed(f"{self.spec.word('choices')[cause]} — {self.spec.word('why')}")


def _display(title: str, *frames: pd.DataFrame) -> None:
    print(title)
    try:
        from IPython.display import display
    except ImportError:  # pragma: no cover - outside IPython
        for frame in frames:
            print(frame.to_string())
        return
    for frame in frames:
        display(frame)


def declared() -> dict[str, CaseSpec]:
    """Every case of every scene module (`labs/scenes/*.py` with a `CASES` dict)."""
    scenes = importlib.import_module("labs.scenes")
    found: dict[str, CaseSpec] = {}
    for info in sorted(pkgutil.iter_modules(scenes.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"labs.scenes.{info.name}")
        for name, case_spec in getattr(module, "CASES", {}).items():
            if name in found:
                raise RuntimeError(f"case {name!r} is declared twice")
            found[name] = case_spec
    return found


def messages() -> list[Call]:
    """The words of every declared case, as messages of the harness catalogue, each at
    the line of its case in the scene module that declares it."""
    found = []
    for case in declared().values():
        path = Path(sys.modules[case.stage.__module__].__file__ or "")
        line = quoted_at(path, f'name="{case.name}"')
        found += [Call(path, line, key, en, frozenset(placeholders(en)))
                  for key, en in case.messages()]
    return found


def spec(name: str) -> CaseSpec:
    """The case declared under `name` (a clear error listing the names otherwise)."""
    cases = declared()
    if name not in cases:
        raise KeyError(f"no case {name!r}; the cases are {', '.join(sorted(cases)) or 'none'}")
    return cases[name]


async def _judge_case(answer: tuple[str | None, str | None], *, case: Case) -> Verdict:
    cause, rule = answer
    return case.judge(cause=cause, rule=rule)


async def open_case(lab: Lab, name: str) -> Case:
    """Stage case `name` in `lab` and gather its evidence."""
    case_spec = spec(name)
    seen = set(lab.logs)  # the lines written before the staging began
    task_id = await case_spec.stage(lab)
    board = await tables.ledger_vs_queue(lab)
    board = board[board["task_id"] == task_id].drop(columns=["verdict"])
    ledger = pd.DataFrame([await tables.row(lab, task_id)])
    log = [line for line in lab.logs if task_id in line or (
        line not in seen and any(marker in line for marker in case_spec.log_also))]
    return Case(case_spec, task_id, ledger, board.reset_index(drop=True), log)
