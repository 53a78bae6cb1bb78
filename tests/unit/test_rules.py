"""`devkit.rules` and `teamdesk rules`: the reference's ids, and places computed from a
synthetic tree. The synthetic tree uses made-up ids (A1, A12, B2) so this file cites no
real rule by accident."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devkit import cli, rules

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT.parent / "shared" / "CONTRACT.md"

MINI_RULES = """\
# rules

## Group A

- **A1** *First* — the first rule. *Why:* because.
- **A12** *Twelfth* (ours) — the twelfth rule. *Why:* twelve.

## Group B

- **B2** *Second* (inferred) — the second rule. *Why:* two.
"""

MINI_MODULE = '''\
"""A module about A12."""


def fenced_write():
    """Writes under the lease (A1)."""
    return 1


class Store:
    def save(self):
        # B2: saved once
        return "A1 in a string is not a citation"
'''

MINI_TEST = '''\
def test_first_rule():
    """A1: proven here."""


def test_b2_by_name():
    assert True


def helper():
    """A12 in a helper is not a test."""
'''


def _notebook(cells: list[tuple[str, str]]) -> str:
    return json.dumps({"cells": [{"cell_type": kind, "metadata": {}, "source": src}
                                 for kind, src in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    (tmp_path / "RULES.md").write_text(MINI_RULES, encoding="utf-8")
    (tmp_path / "teamdesk").mkdir()
    (tmp_path / "teamdesk" / "__init__.py").write_text("")
    (tmp_path / "teamdesk" / "store.py").write_text(MINI_MODULE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_store.py").write_text(MINI_TEST)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "10-demo.ipynb").write_text(_notebook([
        ("markdown", "# 10 · Demo\n\nIntro."),
        ("code", "x = 1\n# contract: A1, B2\nassert x == 1"),
        ("markdown", "## 2. Later\n\nThis shows A12."),
        ("code", "# B2 in a plain comment is not a contract comment\nprint(1)"),
    ]))
    return tmp_path


def test_reference_has_exactly_the_contracts_ids():
    """RULES.md defines each id of the contract once: 46 of them, none more."""
    if not CONTRACT.is_file():
        pytest.skip(f"the contract is not beside the project ({CONTRACT})")
    contract_ids = re.findall(r"^- \*\*([A-Z]\d{1,2})\*\*", CONTRACT.read_text(), re.MULTILINE)
    assert len(contract_ids) == len(set(contract_ids)) == 46
    assert list(rules.load_rules(ROOT)) == contract_ids


def test_reference_entries_are_complete_and_tagged():
    """Every entry has a title, a statement and a why; rules beyond the book say (ours)."""
    loaded = rules.load_rules(ROOT)
    assert len(loaded) == 46
    for r in loaded.values():
        assert r.title and r.statement and r.why and r.group, r
    ours = {i for i, r in loaded.items() if "ours" in r.tags}
    assert ours == {"D9", "X3", "S1", "S2", "S3"}
    inferred = {i for i, r in loaded.items() if "inferred" in r.tags}
    assert inferred == {"O3", "D4", "W4", "X1", "X2", "M1"}


def test_whole_word_matching_and_ranges():
    known = {"A1", "A2", "A3", "A4", "A12"}
    assert rules.cited_ids("see A12 only", known) == {"A12"}
    assert rules.cited_ids("A1x A1_ XA1 A1.", known) == {"A1"}
    assert rules.cited_ids("(A1, A12)", known) == {"A1", "A12"}
    assert rules.cited_ids("A1–A3 and A4", known) == {"A1", "A2", "A3", "A4"}
    assert rules.cited_ids("A2-A3", known) == {"A2", "A3"}
    assert rules.cited_ids("job T-0 and T-1", known | {"T0"}) == set()


def test_places_are_computed_from_a_synthetic_tree(mini: Path):
    reports = rules.index(mini)
    assert list(reports) == ["A1", "A12", "B2"]
    assert reports["A1"].code == ["teamdesk.store:fenced_write"]
    assert reports["A12"].code == ["teamdesk.store:<module>"]
    assert reports["B2"].code == ["teamdesk.store:Store.save"]
    assert reports["A1"].tests == ["tests/test_store.py::test_first_rule"]
    assert reports["B2"].tests == ["tests/test_store.py::test_b2_by_name"]
    assert reports["A12"].tests == []
    assert reports["A1"].notebooks == ["notebooks/10-demo.ipynb#1 (§ 10 · Demo)"]
    assert reports["B2"].notebooks == ["notebooks/10-demo.ipynb#1 (§ 10 · Demo)"]
    assert reports["A12"].notebooks == ["notebooks/10-demo.ipynb#2 (§ 2. Later)"]
    assert rules.untested(reports) == ["A12"]


def test_the_dev_environment_is_scanned_for_code_places_too(mini: Path):
    """`devkit/` holds rules of its own (the embedded servers' secrets): its modules are
    code places beside the product's, and `devkit/rules.py`'s own examples are not."""
    (mini / "devkit").mkdir()
    (mini / "devkit" / "__init__.py").write_text("")
    (mini / "devkit" / "servers.py").write_text('def start():\n    """Keeps B2."""\n')
    (mini / "devkit" / "rules.py").write_text('"""rules.explain("A1")"""\n')
    reports = rules.index(mini)
    assert reports["B2"].code == ["teamdesk.store:Store.save", "devkit.servers:start"]
    assert reports["A1"].code == ["teamdesk.store:fenced_write"]


def test_the_embedded_servers_rules_live_in_the_dev_environment():
    """S1-S3 are cited where the embedded servers now live (`devkit.services`)."""
    reports = rules.index(ROOT)
    for rule_id in ("S1", "S3"):
        assert any(p.startswith("devkit.services.") for p in reports[rule_id].code), rule_id


def test_explain_renders_text_and_markdown(mini: Path):
    report = rules.explain("a12", root=mini)
    assert str(report).splitlines()[0] == "A12 — Twelfth (ours)"
    assert "Why: twelve." in str(report)
    assert "tests (0): none" in str(report)
    md = report._repr_markdown_()
    assert md.startswith("**A12 — Twelfth (ours)**")
    assert "`teamdesk.store:<module>`" in md


def test_unknown_id_names_the_valid_ones(mini: Path):
    with pytest.raises(rules.UnknownRule, match=r"unknown rule id\(s\) Z9; valid ids: A1 A12 B2"):
        rules.explain("Z9", root=mini)
    assert cli.main(["rules", "--root", str(mini), "Z9"]) == 2


def test_malformed_entry_is_an_error(tmp_path: Path):
    (tmp_path / "RULES.md").write_text("- **A1** no title here\n")
    with pytest.raises(ValueError, match=r"RULES\.md:1: not a rule entry"):
        rules.load_rules(tmp_path)


def test_cli_exits_1_naming_rules_without_a_test(mini: Path, capsys):
    assert cli.main(["rules", "--root", str(mini)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^A12\s+Twelfth \(ours\)\s+1\s+0\s+1\s*$", out, re.MULTILINE), out
    assert "no test cites 1 rule(s): A12" in out
    assert cli.main(["rules", "--root", str(mini), "A1", "B2"]) == 0
    out = capsys.readouterr().out
    assert "tests/test_store.py::test_first_rule" in out


def test_cli_exits_0_when_every_rule_has_a_test(mini: Path, capsys):
    (mini / "tests" / "test_more.py").write_text('def test_twelve():\n    """A12."""\n')
    assert cli.main(["rules", "--root", str(mini)]) == 0
    assert "every one of the 3 rules is cited by at least one test" in capsys.readouterr().out


def test_command_finds_the_project_from_any_directory(tmp_path: Path):
    """Run from an unrelated directory: paths are relative to the project root."""
    proc = subprocess.run([sys.executable, "-m", "devkit.cli", "rules", "I2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tests/unit/test_pure.py::test_task_job_id_is_id_dash_run" in proc.stdout
    assert str(ROOT) not in proc.stdout
