"""Steps, not scripts: a notebook cell that acts runs once per race: an instructor
clicks a cell twice, or goes back, and the race still makes sense.

An instructor clicks a cell twice, goes back a step, starts over. A cell that *acts*
(start A, release A, retry) therefore begins with a `# step:` line naming its step:

    # step: A claims E1
    gate_a = lab.gate("export.after_read", actor="A")
    await lab.start_worker("A", **STUCK)
    ...

- The first run executes the cell. The step *begins* first: `lab.wait_for` then matches
  only worker events from this moment on, and a live board of an earlier step stops.
  If the cell finishes without an error, the step is done.
- Running the cell again does not act twice. It prints `↻ already done: A claims E1`
  and shows the lab's board again (`lab.stage.board`, set by the notebook), so the class
  sees the state, not a second claim. A step whose cell raised is not done: running it
  again tries again.
- `lab = await lab.start_over()` (a notebook's "start the race over" cell) closes the lab
  and opens a fresh one with the same options; every step is new again.

Cells that only look or check carry no `# step:` line: they may run any number of times.
The `# step:` line is handled by an IPython input transformer installed when a lab opens
in a kernel (`install()`); outside IPython (tests, scripts, ruff) it is a comment. (A
comment rather than a `%%step` cell magic: ruff skips cells that start with a magic, and
would then miss their names.) The
transformer turns a first run into `begin(name)` + the cell, and a re-run into
`await replay(name)`; IPython's `post_run_cell` event marks the step done.

**A step's name is its identifier; its title is what the learner reads.** The name after
`# step:` is the same in both editions (the editions' rule keeps code cells equal), and
the rewind goes by it. What the stage prints — "already done", "replayed", the script —
shows the step's `title()`: the name itself in English, its Chinese in the Chinese edition.
The Chinese of every step of the notebooks lives in the harness catalogue
(`labs/i18n/zh.md`, key `step.<slug of the name>`, fingerprinted against the name like
every message), not in the notebooks' catalogues: the title is needed where no cell is at
hand (a replay, a catch-up, the script read from whichever copy of the notebook runs),
and one entry serves a step shared by two notebooks. `messages()` lists the steps found
in `notebooks/*.ipynb`, so a renamed step shows up untranslated in the catalogue test.
`go_to` takes the name or the title, in either language.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devkit import notebook_cells
from devkit.i18n import Call
from labs import rewind
from labs.i18n import made_key, say, translated
from labs.rewind import MARKER

if TYPE_CHECKING:
    from labs.lab import Lab


def step_key(name: str) -> str:
    """The catalogue key of step `name`'s title (`step.` and the name, `made_key`)."""
    return made_key("step", name)


def title(name: str) -> str:
    """Step `name` as the learner reads it (see the module docstring): in the Chinese
    edition the catalogue's title, or the name itself when the catalogue has none (a step
    a learner wrote into their copy); in English the name."""
    return translated(step_key(name)) or name


def _spaced(text: str) -> str:
    return " ".join(text.split()).casefold()


def identifier(name: str, names: list[str]) -> str:
    """The step of `names` that `name` means: a name, or the title of one in the
    edition's language (spaces and case aside); else `name` unchanged, for the rewind to
    refuse with the list of steps."""
    if name in names:
        return name
    wanted = _spaced(name)
    return next((n for n in names if wanted in (_spaced(n), _spaced(title(n)))), name)


def messages(folder: Path = rewind.PROJECT / "notebooks") -> list[Call]:
    """Every step of the notebooks in `folder` as a message of the harness catalogue
    (key `step_key(name)`, English the name), at its notebook and cell number."""
    found = []
    for path in sorted(folder.glob("*.ipynb")):
        for number, cell in enumerate(notebook_cells.cells(path), 1):
            source = notebook_cells.source(cell) if cell["cell_type"] == "code" else ""
            mark = MARKER.match(source.split("\n", 1)[0])
            if mark is not None and mark["name"]:
                found.append(Call(path, number, step_key(mark["name"]), mark["name"],
                                  frozenset()))
    return found


@dataclass
class Step:
    name: str
    #: 1, 2, 3 … in the order the steps first ran in this race.
    number: int
    began: float
    done: bool = False


@dataclass
class Stage:
    """The steps of one lab's race (`lab.stage`); see the module docstring."""

    lab: Lab
    #: A coroutine function returning what to show when a done step's cell is re-run
    #: (a notebook sets its board: `lab.stage.board = board`).
    board: Callable[[], Awaitable[Any]] | None = None
    steps: dict[str, Step] = field(default_factory=dict)
    #: The step whose cell is running now (until IPython's `post_run_cell`).
    pending: str | None = None
    #: Called when a step begins (a live board stops).
    on_begin: list[Callable[[], None]] = field(default_factory=list)

    def is_done(self, name: str) -> bool:
        step = self.steps.get(name)
        return step is not None and step.done

    def begin(self, name: str) -> Step:
        """A step begins: later waits match only events from now on (`lab.wait_for`)."""
        for hook in tuple(self.on_begin):
            hook()
        step = self.steps.get(name) or Step(name, len(self.steps) + 1, time.monotonic())
        step.began = time.monotonic()
        self.steps[name] = step
        self.pending = name
        self.lab.step_began = step.began
        return step

    def finish(self, success: bool) -> None:
        """The cell of the pending step ended; it is done if it raised nothing."""
        if self.pending is not None and success:
            self.steps[self.pending].done = True
        self.pending = None

    async def replay(self, name: str) -> Any:
        step = self.steps[name]
        print(say("stage.line.done", "↻ already done: {name} (step {number} of this race; "
                  "nothing was done again). To act again, start the race over.",
                  name=title(name), number=step.number))
        if self.board is None or self.lab.closed:
            return None
        shown = self.board()
        return await shown if inspect.isawaitable(shown) else shown

    def script(self) -> list[str]:
        """The race's steps in notebook order, numbered, each marked done or not, by their
        titles; returns their names, what `go_to` takes (as it takes a title)."""
        names = rewind.step_names(rewind.load_script(self.lab.name))
        for i, name in enumerate(names, 1):
            print(f"{i:2d}. {'✓' if self.is_done(name) else ' '} {title(name)}")
        return names

    async def go_to(self, name: str) -> None:
        """Put the world into the state right before step `name`: start the race over
        (the notebook's start-over cell, which rebinds `lab`) and replay every earlier
        step. Then run that step's cell (`labs.rewind`). `name` may be the step's title."""
        script = rewind.load_script(self.lab.name)
        name = identifier(name, rewind.step_names(script))
        todo = rewind.before(script, name, title)  # an unknown name fails here, first
        ns = rewind.namespace()
        steps = sum(c.kind == "step" for c in todo)
        print(say("stage.line.restart", "⏮ going to: {name} — starting the race over, then "
                  "replaying {steps} step(s)", name=title(name), steps=steps))
        await rewind.run_source(script[0].source, ns)
        await _replay(todo, ns)
        print(say("stage.line.ready", "ready: now run the cell of “{name}”", name=title(name)))

    def __repr__(self) -> str:
        done = [s.name for s in self.steps.values() if s.done]
        return f"<Stage of lab {self.lab.name!r}: {len(done)} step(s) done: {done}>"


#: The stage a `# step:` cell refers to: the stage of the oldest lab still open in this
#: process (a second lab opened for a while, like 27's "other" world, does not take it
#: over), else the stage of the lab closed last (so a step cell re-run after the
#: notebook's closing cell still says "already done" rather than acting on a closed lab).
CURRENT: Stage | None = None
_STACK: list[Stage] = []
_LAST: Stage | None = None
#: The stage whose step began in the running cell (`post_run_cell` finishes it there,
#: even if the cell opened or closed a lab).
_PENDING: Stage | None = None


def _active() -> Stage | None:
    return CURRENT or _LAST


def begin(name: str) -> None:
    """Called by a transformed `# step:` cell before its body runs."""
    global _PENDING
    _PENDING = _active()
    if _PENDING is not None:
        _PENDING.begin(name)


async def replay(name: str) -> Any:
    """What a transformed `# step:` cell runs when its step is already done."""
    stage = _active()
    if stage is None or not stage.is_done(name):  # pragma: no cover - raced a close
        return None
    return await stage.replay(name)


async def _replay(cells: list[Any], ns: dict[str, Any]) -> None:
    """Replay `cells` (`labs.rewind.ScriptCell`s) in order: steps not done yet, each as a
    step of the current stage, and the support cells from the first such step on."""
    started = False
    for cell in cells:
        stage = _active()
        if stage is None:
            raise rewind.RewindError("no lab is open to replay the steps in")
        if cell.kind == "step" and stage.is_done(cell.name):
            continue
        if cell.kind == "support" and not started:
            continue
        started = True
        if cell.kind == "step":
            step = stage.begin(cell.name)
        try:
            await rewind.run_source(cell.source, ns)
        except Exception as err:
            if cell.kind == "step":
                stage.finish(False)
            what = f"step {cell.name!r}" if cell.kind == "step" else "a helper cell"
            raise rewind.RewindError(f"replaying {what} failed: {type(err).__name__}: "
                                     f"{err}") from err
        if cell.kind == "step":
            stage.finish(True)
            print(say("stage.replayed-step", "↪ replayed step {number}: {name}",
                      number=step.number, name=title(cell.name or "")))


async def catch_up(name: str) -> None:
    """What a transformed `# step:` cell runs first when earlier steps of its race have
    not run: replay them (entering a scene directly, `labs.rewind`)."""
    stage = _active()
    if stage is None:
        return
    todo = rewind.before(rewind.load_script(stage.lab.name), name)
    missing = [c.name for c in todo if c.kind == "step" and not stage.is_done(c.name)]
    print(say("stage.first-earlier-steps", "↪ first the {count} earlier step(s) of this race: "
              "{steps}", count=len(missing), steps="; ".join(map(title, missing))))
    await _replay(todo, rewind.namespace())


def _needs_catch_up(stage: Stage, name: str) -> bool:
    """Whether a step of `stage`'s race that comes before `name` has not run yet. A lab
    whose notebook cannot be found (a test, a script), or a step its notebook does not
    have, never catches up; a notebook that cannot be read is an error shown as one."""
    try:
        todo = rewind.before(rewind.load_script(stage.lab.name), name)
    except rewind.RewindError:
        return False
    return any(c.kind == "step" and not stage.is_done(c.name) for c in todo)


def transform(lines: list[str]) -> list[str]:
    """IPython cleanup transformer: rewrite a cell whose first line is `# step: <name>`."""
    found = MARKER.match(lines[0]) if lines else None
    if found is None:
        return lines
    name = found["name"]
    if not name:
        return ["raise SyntaxError('a step needs a name: # step: A claims E1')\n"]
    stage = _active()
    if stage is not None and stage.is_done(name):
        return [f"await __import__('labs.stage').stage.replay({name!r})\n"]
    first = [f"__import__('labs.stage').stage.begin({name!r})\n"]
    if stage is not None and _needs_catch_up(stage, name):
        first.insert(0, f"await __import__('labs.stage').stage.catch_up({name!r})\n")
    return [*first, *lines[1:]]


def _post_run_cell(result: Any) -> None:
    global _PENDING
    if _PENDING is not None:
        _PENDING.finish(bool(getattr(result, "success", False)))
        _PENDING = None


_INSTALLED: set[int] = set()


def in_kernel() -> bool:
    """True when running inside an IPython shell (a notebook kernel)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    return get_ipython() is not None


def install() -> bool:
    """Install the `# step:` transformer and the post-run hook in the running IPython
    kernel (once per shell), and make error output one plain line (`%xmode Minimal`,
    no colours: a stored output shows `ErrorName: message`, not a traceback full of ANSI
    codes). Returns False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - labs without IPython
        return False
    shell = get_ipython()
    if shell is None or id(shell) in _INSTALLED:
        return shell is not None
    _INSTALLED.add(id(shell))
    shell.input_transformers_cleanup.insert(0, transform)
    shell.events.register("post_run_cell", _post_run_cell)
    # What `%xmode Minimal` and `%colors nocolor` do, without their printed notice (it
    # would become part of the first cell's stored output).
    try:
        shell.InteractiveTB.set_mode(mode="Minimal")
        shell.colors = "nocolor"
    except Exception:  # pragma: no cover - another IPython's API
        pass
    return True


def attach(lab: Lab) -> Stage:
    """Give `lab` its stage and make it the current one (called by `Lab.open`)."""
    global CURRENT, _LAST
    stage = Stage(lab)
    _STACK.append(stage)
    CURRENT = _STACK[0]
    _LAST = None
    install()
    return stage


def detach(stage: Stage) -> None:
    """The lab closed: a later `# step:` cell no longer refers to it."""
    global CURRENT, _LAST
    if stage in _STACK:
        _STACK.remove(stage)
    CURRENT = _STACK[0] if _STACK else None
    if CURRENT is None:
        _LAST = stage
