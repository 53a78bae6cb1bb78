"""The three rooms, checked by import-linter (`[tool.importlinter]` in pyproject.toml): the
product (`teamdesk`) imports neither the dev environment (`devkit`) nor the harness
(`labs`); the dev environment does not import the harness; no package's sibling modules
import each other in a circle; the executors and their context do not import the
processor or the worker that runs them (STYLE: one module per concept); no runtime module
imports the product's test kit (`teamdesk.testing`). Imports made for type checking only
never run and are not counted.

The contracts are proven to bite on a copy of the three packages with forbidden imports
added: a contract that reports nothing there would keep nothing here either.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_the_contracts_hold():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 4 kept, 0 broken." in out.stdout


def _copy(tmp_path: Path) -> Path:
    """The three packages (sources only) and the contracts, in a folder of their own."""
    copy = tmp_path / "copy"
    for package in ("teamdesk", "devkit", "labs"):
        shutil.copytree(ROOT / package, copy / package,
                        ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def _broken(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, out.stdout + out.stderr
    return out.stdout.split("Broken contracts", 1)[1]


def test_a_product_module_importing_the_dev_environment_is_reported(tmp_path):
    copy = _copy(tmp_path)
    (copy / "teamdesk" / "leak.py").write_text("from devkit import services\n")
    (copy / "devkit" / "leak.py").write_text("import labs.names\n")
    out = _lint(copy, PYTHONPATH=str(copy))
    assert "Contracts: 3 kept, 1 broken." in out.stdout, out.stdout
    report = _broken(out)
    assert "teamdesk.leak -> devkit.services" in report
    assert "devkit.leak -> labs.names" in report


def test_a_cycle_and_an_executor_importing_the_processor_are_reported(tmp_path):
    copy = _copy(tmp_path)
    _append(copy / "devkit" / "services" / "paths.py",
            "from devkit.services import api  # a cycle: paths -> api -> paths")
    _append(copy / "teamdesk" / "tasks" / "context.py", "import teamdesk.tasks.processor")
    out = _lint(copy, PYTHONPATH=str(copy))
    assert "Contracts: 2 kept, 2 broken." in out.stdout, out.stdout
    report = _broken(out)
    assert "No cycles are allowed in devkit.services" in report
    assert "teamdesk.tasks.context -> teamdesk.tasks.processor" in report


def test_a_runtime_module_importing_the_test_kit_is_reported(tmp_path):
    copy = _copy(tmp_path)
    _append(copy / "teamdesk" / "cli.py", "from teamdesk.testing import Gate")
    _append(copy / "devkit" / "world.py", "import teamdesk.testing")
    # For type checking only: never run, so no room is crossed.
    _append(copy / "teamdesk" / "config.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from labs.lab import Lab")
    out = _lint(copy, PYTHONPATH=str(copy))
    assert "Contracts: 3 kept, 1 broken." in out.stdout, out.stdout
    report = _broken(out)
    assert "teamdesk.cli -> teamdesk.testing" in report
    assert "devkit.world -> teamdesk.testing" in report


def test_the_product_alone_asks_for_its_servers_in_one_line():
    """Without the dev environment the product starts no servers: its own command lists
    only its commands and, with DATABASE_URL/REDIS_URL unset, says so in one line (exit 2)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    help_ = subprocess.run([sys.executable, "-m", "teamdesk.cli", "--help"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert "{db,seed,worker,tasks}" in help_.stdout, help_.stdout
    out = subprocess.run([sys.executable, "-m", "teamdesk.cli", "tasks"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        "teamdesk: DATABASE_URL and REDIS_URL are not set: point them at your PostgreSQL and "
        "Redis (the dev environment's `teamdesk` command, `python -m devkit.cli`, starts "
        "embedded ones instead)"]
