"""The task modules import one way (STYLE: one module per concept): the executors name
their context (`teamdesk.tasks.context`) without importing the processor that runs them,
and the product never imports the lab harness."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["teamdesk.tasks.exports", "teamdesk.tasks.reminders",
                                    "teamdesk.tasks.context"])
def test_executors_and_their_context_do_not_import_the_processor(module):
    code = (f"import sys, {module}; "
            "print(sorted(m for m in sys.modules if m in ('teamdesk.tasks.processor', "
            "'teamdesk.tasks.worker') or m == 'labs' or m.startswith('labs.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_the_worker_process_imports_no_lab_code():
    code = ("import sys, teamdesk.tasks.runner, teamdesk.cli; "
            "print(sorted(m for m in sys.modules if m == 'labs' or m.startswith('labs.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
