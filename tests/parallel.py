"""How the suite is split across pytest-xdist workers (`python3 tasklab.py test` runs it with
`-n`, each worker on a server set of its own: the root `conftest.py`).

A unit of work goes to one worker, whole and in order:
- a notebook under nbval: its cells share one kernel;
- a group named in `GROUPS`: tests that read one session fixture (a chaos run made once
  for several tests), or that must not overlap;
- a module with module-scoped fixtures or shared state (`WHOLE_MODULES`);
- any other test on its own.

Longest first: notebooks, the long single tests (`LONG`) and named groups before the other
tests, so no worker starts a long unit when the others are nearly done. (xdist's
`loadgroup` reads `xdist_group` marks from node ids, which pytest 9 no longer lets a plugin
rewrite; hence a scheduler of our own.)
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: module (or one test's node id) → group: tests that share a session fixture or must run
#: one after another.
GROUPS: dict[str, str] = {
    # The notebook 90's two chaos runs, made once per process (`ch90.notebook_runs`) and
    # read by these; the registry's case of `90.invariant` reads the same pair.
    "tests/labs/test_chaos_inflight.py": "chaos-90",
    "tests/labs/test_exercises_ch90.py": "chaos-90",
    "tests/labs/test_exercise_registry.py::test_the_judge_refuses_the_starter_and_wrong_"
    "answers_and_accepts_the_solution[90.invariant]": "chaos-90",
}
#: Modules whose tests stay together (module-scoped fixtures, one lab folder, one port).
WHOLE_MODULES: frozenset[str] = frozenset({
    "tests/unit/test_rules_zh.py",
    "tests/unit/test_notebook_passes.py",  # one pytest run of small notebooks for all
    "tests/labs/test_lab_isolation.py",  # starts the lab's own servers (.teamdesk/)
    "tests/integration/test_classroom_provision.py",  # learners provisioned once for all
    "tests/integration/test_site.py",  # the website built once for all its checks
})


def scope_of(nodeid: str) -> str:
    """The unit of work `nodeid` belongs to."""
    if nodeid in GROUPS:
        return GROUPS[nodeid]
    path = nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        return path
    if path in GROUPS:
        return GROUPS[path]
    if path in WHOLE_MODULES:
        return path
    return nodeid


#: Single tests and groups measured at 15 s or more (`--durations`): handed out with the
#: notebooks, so none of them starts last and runs on alone while the others are done.
LONG: tuple[str, ...] = (
    "chaos-90",
    "tests/integration/test_hub.py::",
    "tests/integration/test_classroom_provision.py",
    "tests/integration/test_site.py",
    "tests/integration/test_worker_process.py::test_two_processes_complete_500",
    "tests/labs/test_chaos.py::test_short_seeded_chaos_run",
    "tests/labs/test_exercise_registry.py::test_the_judge_refuses_the_starter_and_wrong_"
    "answers_and_accepts_the_solution[30.drain]",
    "tests/labs/test_takeover_staging.py::",
    "tests/labs/test_seams.py::test_labs_switch_counterexamples",
    "tests/integration/test_devservices.py::test_old_trust_auth_folder",
    "tests/integration/test_lab_command.py::",
)


def _weight(scope: str, size: int) -> tuple[int, int]:
    """Sort key, heaviest first: notebooks, the tests that drive notebooks and the long
    single tests, then groups and whole modules, then integration and lab tests, then the
    rest."""
    if scope.endswith(".ipynb") or scope.startswith(LONG):
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
