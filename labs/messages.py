"""The messages whose keys the harness makes rather than writes at a call: the diagnosis
cases' words (`labs.cases`), the notebooks' step titles (`labs.stage`), the answers a
learner may give in words (`labs.learn`, with the chaos checker's invariant names) and the
chaos run's English values (`labs.chaos.words`: fault actions, log counts, lease words). Their
Chinese is in the harness catalogue like every message's; `teamdesk messages` drafts them
and tests/unit/test_harness_catalogue.py checks them. A module of its own, imported by
nobody in the harness, because it reaches into modules that speak through `labs.i18n`.
"""

from __future__ import annotations

from devkit.i18n import Call
from labs import cases, learn, stage
from labs.chaos import checker, kinds, report, worker_logs


def made() -> list[Call]:
    """Every message of the harness whose key is made, not written at a call."""
    invariants = [inv.title for inv in checker.Invariant]
    return [*cases.messages(), *stage.messages(), *learn.messages(),
            *learn.messages(invariants, checker.__file__), *kinds.ACTIONS.messages(),
            *worker_logs.LABELS.messages(), *report.LEASE_AFTER.messages()]
