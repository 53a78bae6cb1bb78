"""How the suite is split across pytest-xdist workers (`python3 tasklab.py test` runs it with
`-n`, each worker on a server set of its own: the root `conftest.py`).

A unit of work goes to one worker, whole and in order:
- a notebook under nbval: its cells share one kernel;
- a group named in `GROUPS`: tests that read one session fixture (a chaos run made once
  for several tests), or that must not overlap;
- a module with module-scoped fixtures or shared state (`WHOLE_MODULES`);
- any other test on its own.

Longest first: notebooks and named groups before single tests, so no worker starts a long
unit when the others are nearly done. (xdist's `loadgroup` reads `xdist_group` marks from
node ids, which pytest 9 no longer lets a plugin rewrite; hence a scheduler of our own.)
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: module → group: tests that share a session fixture or must run one after another.
GROUPS: dict[str, str] = {
    # The notebook 90's two chaos runs, made once (tests/labs/conftest.py) and read by both.
    "tests/labs/test_chaos_inflight.py": "chaos-90",
    "tests/labs/test_exercises_ch90.py": "chaos-90",
}
#: Modules whose tests stay together (module-scoped fixtures, one lab folder, one port).
WHOLE_MODULES: frozenset[str] = frozenset({
    "tests/unit/test_rules_zh.py",
    "tests/unit/test_notebook_passes.py",  # one pytest run of small notebooks for all
    "tests/labs/test_lab_isolation.py",  # starts the lab's own servers (.teamdesk/)
})


def scope_of(nodeid: str) -> str:
    """The unit of work `nodeid` belongs to."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        return path
    if path in GROUPS:
        return GROUPS[path]
    if path in WHOLE_MODULES:
        return path
    return nodeid


def _weight(scope: str, size: int) -> tuple[int, int]:
    """Sort key, heaviest first: notebooks and the tests that drive notebooks, then groups
    and whole modules, then integration and lab tests, then the rest."""
    if scope.endswith(".ipynb"):
        rank = 0
    elif "::" not in scope:
        rank = 1
    elif scope.startswith("tests/notebooks/"):
        rank = 0
    elif scope.startswith(("tests/integration/", "tests/labs/")):
        rank = 2
    else:
        rank = 3
    return rank, -size


class SuiteScheduling(LoadScopeScheduling):
    """LoadScope with our units (`scope_of`), handed out heaviest first."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _assign_work_unit(self, node) -> None:
        # LoadScope fills its queue in collection order (or by size alone) and hands out
        # the first unit; put ours in order once, before the first one goes.
        if not self._ordered:
            units = sorted(self.workqueue.items(), key=lambda kv: _weight(kv[0], len(kv[1])))
            self.workqueue.clear()
            self.workqueue.update(units)
            self._ordered = True
        super()._assign_work_unit(node)
