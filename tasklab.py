#!/usr/bin/env python3
"""Bootstrap for a fresh machine with only Python 3.11+: the README's two commands.

    python3 tasklab.py lab    # set up .venv, start PostgreSQL + Redis, open JupyterLab
    python3 tasklab.py test   # set up .venv, run ruff and every test (unit, integration,
                              # notebooks, the import contracts), in parallel
    python3 tasklab.py regen [notebooks/NAME.ipynb ...]   # re-execute notebooks, store outputs
    python3 tasklab.py hub    # a class's JupyterHub on this machine (as root; see
                              # deploy/jupyterhub/jupyterhub_config.py)

Standard library only. The virtual environment lives in `.venv/`, built with the Python
that runs this file, and is rebuilt when that Python's version, `pyproject.toml` or
`constraints.txt` changes. Every install goes through `constraints.txt` (the versions
this lab is tested with, so nbval compares outputs rendered by the same pandas,
matplotlib and IPython everywhere). Extra arguments after `test` go to pytest
(e.g. `python3 tasklab.py test tests/unit -x`). JupyterHub's proxy (configurable-http-proxy,
a Node.js program) is installed from npm into `.venv/proxy/` when a hub or its test needs
it, at the versions of `deploy/jupyterhub/proxy/package-lock.json`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".tasklab-installed"
CONSTRAINTS = ROOT / "constraints.txt"
#: JupyterHub's proxy: its npm package (with the lock of every version) and where it goes
#: (`devkit.hub.proxy_command` finds it there).
PROXY_PACKAGE = ROOT / "deploy" / "jupyterhub" / "proxy"
PROXY_DIR = VENV / "proxy"
PROXY_BIN = PROXY_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
#: The test that runs a real hub; a pytest run that may collect it needs the proxy.
HUB_TEST = "tests/integration/test_hub.py"

#: Workers of the whole suite's run (see cmd_test).
WORKERS = 6
#: Every run reports its 15 slowest tests.
REPORT_ARGS = ["--durations=15"]
#: Notebook runs: cell timeout (nbval's default is 2000 s) and what to sanitize.
NBVAL_ARGS = ["--nbval", "--nbval-cell-timeout=120",
              "--nbval-sanitize-with", str(ROOT / "notebooks" / "sanitize.cfg")]


def _say(msg: str) -> None:
    print(f"[tasklab] {msg}", flush=True)


def ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this file runs under any python3
        sys.exit(f"tasklab needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    python = ".".join(map(str, sys.version_info[:2]))
    digest = hashlib.sha256()
    for path in (ROOT / "pyproject.toml", CONSTRAINTS):
        digest.update(path.read_bytes())
    wanted = f"python {python}\n{digest.hexdigest()}\n"
    if STAMP.exists() and STAMP.read_text() == wanted and (BIN / "teamdesk").exists():
        return
    start = time.monotonic()
    stale = STAMP.exists() and not STAMP.read_text().startswith(f"python {python}\n")
    if stale or not (BIN / "python").exists():
        # A venv of another Python cannot be upgraded in place: its site-packages are
        # for that version. Build it anew for this one.
        _say(f"creating {VENV} for Python {python} …")
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    _say("installing teamdesk with its lab and test dependencies (first run: about a minute) …")
    pip = [str(BIN / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "--quiet", "--progress-bar", "off", "-c", str(CONSTRAINTS),
                    "-e", f"{ROOT}[test]"], check=True, cwd=ROOT)
    STAMP.write_text(wanted)
    _say(f"environment ready in {time.monotonic() - start:.0f} s")


def ensure_proxy() -> None:
    """configurable-http-proxy in `.venv/proxy/`, from npm, unless that lock is there."""
    lock = (PROXY_PACKAGE / "package-lock.json").read_text()
    stamp = PROXY_DIR / ".tasklab-installed"
    if PROXY_BIN.exists() and stamp.exists() and stamp.read_text() == lock:
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("[tasklab] JupyterHub's proxy comes from npm, which is not installed: "
                 "install Node.js 20 or newer with npm (e.g. `apt-get install nodejs npm`)")
    start = time.monotonic()
    _say("installing configurable-http-proxy, JupyterHub's proxy, from npm …")
    PROXY_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PROXY_PACKAGE / name, PROXY_DIR / name)
    subprocess.run([npm, "ci", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error",
                    "--prefix", str(PROXY_DIR)], check=True, cwd=PROXY_DIR)
    stamp.write_text(lock)
    _say(f"proxy ready in {time.monotonic() - start:.0f} s")


def needs_proxy(targets: list[str]) -> bool:
    """Whether a pytest run of `targets` may collect the hub's test."""
    paths = [t.split("::", 1)[0].rstrip("/") for t in targets if not t.startswith("-")]
    return not paths or any(HUB_TEST == p or HUB_TEST.startswith(f"{p}/") for p in paths)


def run(args: list[str]) -> int:
    return subprocess.run(args, cwd=ROOT).returncode


def cmd_test(extra: list[str]) -> int:
    _say("ruff check …")
    if run([str(BIN / "ruff"), "check", "."]) != 0:
        return 1
    # The whole suite runs on WORKERS pytest-xdist workers, each with servers of its own
    # (conftest.py; units of work: tests/parallel.py): it mostly waits on servers, kernels
    # and worker processes, so more workers than cores keep both cores busy. The import
    # contracts (lint-imports) are a test of the suite (tests/unit/test_layers.py). A part
    # of the suite (arguments given) runs in this one process unless `-n` is among them.
    targets = extra or ["tests", "notebooks", "-n", str(WORKERS)]
    if needs_proxy(targets):
        ensure_proxy()
    _say(f"pytest {' '.join(targets)} …")
    nb = NBVAL_ARGS if any("notebooks" in t for t in targets) else []
    started = time.monotonic()
    code = run([str(BIN / "python"), "-m", "pytest", *nb, *REPORT_ARGS, *targets])
    _say(f"pytest finished in {time.monotonic() - started:.0f} s (exit {code})")
    return code


def cmd_regen(names: list[str]) -> int:
    """Re-execute notebooks headlessly and store their outputs (never save from the UI)."""
    paths = names or sorted(str(p) for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
    for path in paths:
        _say(f"executing {path} …")
        start = time.monotonic()
        code = run([str(BIN / "jupyter"), "nbconvert", "--to", "notebook", "--execute",
                    "--inplace", "--ExecutePreprocessor.record_timing=False",
                    "--ExecutePreprocessor.timeout=120", path])
        if code != 0:
            return code
        _say(f"{path}: {time.monotonic() - start:.1f} s")
    return 0


def cmd_hub(extra: list[str]) -> int:
    """A class's JupyterHub from this checkout (deploy/jupyterhub/jupyterhub_config.py)."""
    ensure_proxy()
    config = ROOT / "deploy" / "jupyterhub" / "jupyterhub_config.py"
    os.execv(BIN / "jupyterhub", [str(BIN / "jupyterhub"), "-f", str(config), *extra])


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test", "regen", "hub"):
        print(__doc__)
        return 2
    ensure_venv()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if argv[0] == "lab":
        # Replace this process, so Ctrl-C reaches `teamdesk lab` alone and it shuts down
        # JupyterLab and releases the services itself.
        os.chdir(ROOT)
        os.execv(BIN / "teamdesk", [str(BIN / "teamdesk"), "lab", *argv[1:]])
    if argv[0] == "regen":
        return cmd_regen(argv[1:])
    if argv[0] == "hub":
        return cmd_hub(argv[1:])
    return cmd_test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
