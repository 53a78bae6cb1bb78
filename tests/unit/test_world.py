"""`devkit.world.World` before any server: a label that could not name a database and a
Redis prefix safely is refused with a clear error, and the dev environment's world never
imports the lab harness (it sits below it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devkit.world import World
from teamdesk.config import Settings

_BASE = Settings(database_url="postgresql://u:p@127.0.0.1:1/x", redis_url="redis://127.0.0.1:1")


@pytest.mark.parametrize("label", ["", "Lab", "lab-1", "la*b", "1lab", "x" * 21, None])
def test_a_bad_label_is_refused_before_anything_is_created(label):
    with pytest.raises(ValueError, match="label"):
        World.open(_BASE, label)


def test_unresolved_settings_are_refused():
    with pytest.raises(ValueError, match="resolved"):
        World.open(Settings(), "t")


def test_the_world_imports_no_lab_code():
    code = ("import sys, devkit.world; "
            "print(sorted(m for m in sys.modules if m == 'labs' or m.startswith('labs.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_a_world_makes_its_prefix_in_the_learners_namespace():
    """(ours) On class servers (`TEAMDESK_QUEUE_PREFIX=td:<learner>`) a world's fresh prefix
    lies under the learner's namespace, the keys their Redis ACL allows; without one it is
    bare, as on a laptop."""
    from devkit.world import _names

    learner = _BASE.replace(queue_prefix="td:ann", queue_namespace="td:ann")
    assert _names(learner, "lab")[1].startswith("td:ann:lab")
    assert _names(_BASE, "lab")[1].startswith("lab") and ":" not in _names(_BASE, "lab")[1]
