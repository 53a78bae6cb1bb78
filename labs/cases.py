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

import functools
import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from devkit import i18n
from devkit.i18n import say
from labs import tables
from labs.exercises import Exercise, Verdict, failed, not_attempted, passed

if TYPE_CHECKING:
    from labs.lab import Lab


@dataclass(frozen=True)
class CaseSpec:
    """One diagnosis case. `stage(lab)` runs the real system into the case's state and
    returns the id of the task to look at. `choices` maps a cause key to the sentence the
    learner reads; `cause` is the right key, `rules` the rule ids that explain it (any one
    is accepted), `why` what the judge says once both are named. `zh` holds the 中文
    edition's words (`title`, `why`, and `choices` with the same keys); the edition's
    language picks them (`devkit.i18n`)."""

    name: str
    title: str
    stage: Callable[[Any], Awaitable[str]]
    choices: dict[str, str]
    cause: str
    rules: frozenset[str]
    why: str
    zh: dict[str, Any] = field(default_factory=dict)
    #: The names the notebook's exercise cell and solution cell bind (cause, rule).
    answer: tuple[str, str] = ("my_cause", "my_rule")
    solution: tuple[str, str] = ("solution_cause", "solution_rule")

    def __post_init__(self) -> None:
        if self.cause not in self.choices or len(self.choices) < 3:
            raise ValueError(f"case {self.name}: the cause must be one of ≥ 3 choices")
        if "choices" in self.zh and set(self.zh["choices"]) != set(self.choices):
            raise ValueError(f"case {self.name}: the 中文 choices need the same keys")

    def exercise(self) -> Exercise:
        """The case as an exercise like any other: `await check("case.<name>", (cause,
        rule), case=case)`, its cells tagged `case.<name>`, two plausible wrong answers
        (another cause; the cause with a rule that does not explain it). Registered with
        the scene module that declares the case (`labs.exercises.load_all`)."""
        other = next(key for key in self.choices if key != self.cause)
        wrong = {"another cause": (other, min(self.rules)),
                 "the cause with a rule that does not explain it": (self.cause, "P99")}
        return Exercise(f"case.{self.name}", self.answer, self.solution, _judge_case, wrong,
                        stage=functools.partial(_staged, self.name))

    def word(self, key: str) -> Any:
        """`title`, `why` or `choices` in the edition's language."""
        if i18n.lang() == "zh" and key in self.zh:
            return self.zh[key]
        return getattr(self, key)


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
        _display(say(f"## {self.spec.title} — task {self.task_id}",
                     f"## {self.spec.word('title')}——任务 {self.task_id}"),
                 self.ledger, self.board)
        print(say("log lines of this task:", "这个任务的日志行：") if self.log
              else say("no log line names this task", "没有日志行提到这个任务"))
        for line in self.log:
            print("  " + line)
        print(say("causes to choose from:", "可选的原因："))
        for key, text in self.spec.word("choices").items():
            print(f"  {key!r}: {text}")

    def judge(self, *, cause: str | None, rule: str | None) -> Verdict:
        """Right when `cause` is the case's cause key and `rule` one of its rule ids."""
        if cause is None or rule is None:
            return not_attempted(" and ".join(self.spec.answer))
        if cause not in self.spec.choices:
            keys = ", ".join(map(repr, self.spec.choices))
            return failed(say(f"{cause!r} is not one of the choices: {keys}",
                              f"{cause!r} 不在可选项里：{keys}"))
        if cause != self.spec.cause:
            return failed(say(f"not {cause!r}: look again at the evidence (which execution "
                              "wrote last, and what the queue says)",
                              f"不是 {cause!r}：再看看证据（最后是哪次执行写的，队列又怎么说）"))
        if str(rule).strip().upper() not in self.spec.rules:
            return failed(say(f"the cause is right, but {rule} is not the rule that explains "
                              "it (see RULES.md)",
                              f"原因对了，但 {rule} 不是解释它的那条规则（见 RULES.zh-CN.md）"))
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


def spec(name: str) -> CaseSpec:
    """The case declared under `name` (a clear error listing the names otherwise)."""
    cases = declared()
    if name not in cases:
        raise KeyError(f"no case {name!r}; the cases are {', '.join(sorted(cases)) or 'none'}")
    return cases[name]


async def _judge_case(answer: tuple[str | None, str | None], *, case: Case) -> Verdict:
    cause, rule = answer
    return case.judge(cause=cause, rule=rule)


async def _staged(name: str, lab: Lab) -> dict[str, Any]:
    """What a case's judge needs, outside a notebook: the case staged in `lab`."""
    return {"case": await open_case(lab, name)}


async def open_case(lab: Lab, name: str) -> Case:
    """Stage case `name` in `lab` and gather its evidence."""
    case_spec = spec(name)
    task_id = await case_spec.stage(lab)
    board = await tables.ledger_vs_queue(lab)
    board = board[board["task_id"] == task_id].drop(columns=["verdict"])
    ledger = pd.DataFrame([await tables.row(lab, task_id)])
    log = [line for line in lab.logs if task_id in line]
    return Case(case_spec, task_id, ledger, board.reset_index(drop=True), log)
