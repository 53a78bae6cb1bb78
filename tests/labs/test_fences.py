"""One registry of counterexamples (`labs.fences.COUNTEREXAMPLES`): the same names are valid
in a lab (`Lab.counterexample`) and in a worker process (`labs.counterexample_worker`,
`labs.chaos --counterexample`), an unknown name fails in one place naming the valid ones,
and every old fence is a plain `Fence` (P3) reporting into its own `effects` list. No
servers: the fences are built, not run."""

from __future__ import annotations

import inspect

import pytest

from labs import counterexample_worker, counterexamples, fences
from labs.chaos import COUNTEREXAMPLES as CHAOS_NAMES
from labs.chaos import ChaosConfig
from teamdesk.tasks.lease import leased_update
from teamdesk.tasks.reminder_effects import write_reminder_effects
from teamdesk.tasks.runner import PRODUCT


def test_one_list_of_names_for_labs_and_worker_processes():
    assert counterexample_worker.NAMES == CHAOS_NAMES == fences.NAMES == tuple(
        fences.COUNTEREXAMPLES)
    assert {"forgot-row-count", "separate-effects", "status-only-guard", "lease-less-export",
            "legacy-failed-listener"} == set(fences.NAMES)


@pytest.mark.parametrize("name", fences.NAMES)
def test_every_name_gives_a_worker_process_its_seams(name):
    entry = fences.lookup(name)
    seams = counterexample_worker.seams_for(name)
    assert seams.on_worker is entry.on_worker
    assert (seams.fence is leased_update) == (entry.fence is None)
    assert (seams.reminder_effects is write_reminder_effects) == (entry.reminder_effects is None)
    ChaosConfig(seed=1, counterexample=name).check()


@pytest.mark.parametrize("name", [n for n in fences.NAMES
                                  if not fences.lookup(n).listener_only])
def test_every_fence_name_switches_on_in_a_lab(name):
    board = counterexamples.LabFences()
    switch = board.switch_on(name, actor="A")
    assert board.active("A") is switch and board.active("B") is None
    assert switch.fence is not None and switch.fence.effects is switch.effects
    # a plain Fence: the product's call shape, nothing more
    assert (list(inspect.signature(switch.fence).parameters)
            == list(inspect.signature(leased_update).parameters))


def test_a_listener_is_refused_in_a_lab_with_where_it_runs():
    with pytest.raises(ValueError, match="legacy-failed-listener is a listener, not a fence"):
        counterexamples.LabFences().switch_on("legacy-failed-listener")


@pytest.mark.parametrize("call", [
    fences.lookup,
    counterexample_worker.seams_for,
    lambda name: counterexamples.LabFences().switch_on(name),
    lambda name: ChaosConfig(seed=1, counterexample=name).check(),
])
def test_an_unknown_name_fails_with_the_valid_ones(call):
    with pytest.raises(ValueError, match="unknown counterexample 'nope'") as err:
        call("nope")
    assert all(name in str(err.value) for name in fences.NAMES)


def test_no_counterexample_is_the_product():
    assert counterexample_worker.seams_for(None) is PRODUCT
