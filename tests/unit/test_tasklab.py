"""The first run of `python3 tasklab.py`: phases while it installs, uv or pip, and a line
or two that names the fix instead of a traceback when it cannot go on.

The error paths run `tasklab.py` for real, in a copy of its three files, under what breaks
it: a Python that says it is 3.10, an `ensurepip` that cannot be imported, a `.venv` whose
pip fails, a `uv` on PATH that fails. Nothing is downloaded: the installers are fakes that
print what the real ones print (`tasklab_output/` holds captured output).
"""

from __future__ import annotations

import ast
import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

import tasklab

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = Path(__file__).with_name("tasklab_output")
PYTHON = ".".join(map(str, sys.version_info[:2]))

#: What pip 26 prints where the index serves each wheel's metadata on its own (PEP 658):
#: the resolver reads `.metadata` files, then the wheels are downloaded in one batch.
PIP_WITH_METADATA = """\
Obtaining file:///home/ada/teamdesk-task-lab
Collecting alembic==1.20.1 (from teamdesk-task-lab==0.1.0)
  Downloading alembic-1.20.1-py3-none-any.whl.metadata (7.2 kB)
Collecting pandas==2.3.3 (from teamdesk-task-lab==0.1.0)
  Downloading pandas-2.3.3-cp311-cp311-manylinux_2_24_x86_64.whl.metadata (91 kB)
Collecting pytz==2025.2 (from pandas==2.3.3->teamdesk-task-lab==0.1.0)
  Using cached pytz-2025.2-py2.py3-none-any.whl.metadata (22 kB)
Downloading alembic-1.20.1-py3-none-any.whl (270 kB)
Downloading pandas-2.3.3-cp311-cp311-manylinux_2_24_x86_64.whl (12.4 MB)
Using cached pytz-2025.2-py2.py3-none-any.whl (509 kB)
Building wheels for collected packages: teamdesk-task-lab
Installing collected packages: pytz, alembic, pandas, teamdesk-task-lab
Successfully installed alembic-1.20.1 pandas-2.3.3 pytz-2025.2 teamdesk-task-lab-0.1.0
"""

#: uv's second install of the project (every wheel in its cache; pip was in the venv).
UV_CACHED = """\
Resolved 135 packages in 2.36s
   Building teamdesk-task-lab @ file:///home/ada/teamdesk-task-lab
      Built teamdesk-task-lab @ file:///home/ada/teamdesk-task-lab
Prepared 1 package in 3.86s
Installed 134 packages in 9.43s
 + alembic==1.20.1
"""

PIP_NOT_FOUND = """\
Obtaining file:///home/ada/teamdesk-task-lab
Collecting foo==9 (from teamdesk-task-lab==0.1.0)
ERROR: Could not find a version that satisfies the requirement foo==9 (from versions: none)
ERROR: No matching distribution found for foo==9
"""
UV_NOT_FOUND = """\
Using Python 3.11.7 environment at: .venv
error: No solution found when resolving dependencies
  cause: Because foo was not found in the package registry and you require foo==9, we can \
conclude that your requirements are unsatisfiable.
"""
PIP_OFFLINE = """\
Obtaining file:///home/ada/teamdesk-task-lab
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after \
connection broken by 'NewConnectionError('<HTTPSConnection(host='pypi.org', port=443)>: Failed \
to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/alembic/
ERROR: Could not find a version that satisfies the requirement alembic==1.20.1 (from versions: \
none)
ERROR: No matching distribution found for alembic==1.20.1
"""
PIP_BUILD_FAILED = """\
  Building wheel for pyzmq (pyproject.toml): finished with status 'error'
  error: subprocess-exited-with-error

  × Building wheel for pyzmq (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> [12 lines of output]
      error: command 'gcc' failed: No such file or directory
      [end of output]
  ERROR: Failed building wheel for pyzmq
Failed to build pyzmq
ERROR: Failed to build installable wheels for some pyproject.toml based projects (pyzmq)
"""


# --- Helpers: a copy of the bootstrap, fakes on PATH, a run -------------------------------


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """A project folder with tasklab.py and the two files its stamp reads, nothing else."""
    folder = tmp_path / "lab"
    folder.mkdir()
    for name in ("tasklab.py", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, folder / name)
    return folder


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def _env(path: list[Path], keep_path: bool, env: dict[str, str]) -> dict[str, str]:
    """This environment less the variables a learner's shell would not have, `path` first
    on PATH (alone with `keep_path=False`), and `env` on top."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TASKLAB_INSTALLER", "PYTHONPATH", "VIRTUAL_ENV")}
    search = [str(p) for p in path] + ([environ.get("PATH", "")] if keep_path else [])
    return {**environ, "PATH": os.pathsep.join(search), **env}


def _tasklab(lab: Path, *args: str, path: list[Path] = (), keep_path: bool = True,
             **env: str) -> subprocess.CompletedProcess[str]:
    """`python3 lab/tasklab.py args`, as a learner runs it."""
    return subprocess.run([sys.executable, str(lab / "tasklab.py"), *args], cwd=lab,
                          env=_env(path, keep_path, env), capture_output=True, text=True,
                          timeout=120)


def _install_only(lab: Path, path: list[Path] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """Only the install step (what `.ci/run` starts early), not the tests after it."""
    return subprocess.run([sys.executable, "-c", "import tasklab; tasklab.ensure_venv()"],
                          cwd=lab, env=_env(path, True, env), capture_output=True, text=True,
                          timeout=120)


def _no_traceback(out: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in out.stderr + out.stdout, out.stderr


def _fake_venv(lab: Path, pip_body: str) -> Path:
    """A `.venv` of this Python whose `python` is a script acting as pip, and an old stamp,
    so tasklab goes straight to the install."""
    venv_dir = lab / ".venv"
    (venv_dir / "lib" / f"python{PYTHON}" / "site-packages" / "pip").mkdir(parents=True)
    (venv_dir / "lib" / f"python{PYTHON}" / "site-packages" / "pip" / "__init__.py").touch()
    (venv_dir / "pyvenv.cfg").write_text(f"version = {sys.version.split()[0]}\n")
    (venv_dir / ".tasklab-installed").write_text(f"python {PYTHON}\nan older digest\n")
    _script(venv_dir / "bin" / "python", pip_body)
    return venv_dir


# --- Too old a Python ---------------------------------------------------------------------


def test_a_python_older_than_3_11_is_told_where_to_get_one(lab, tmp_path):
    """A python3 that is 3.10 (Ubuntu 22.04's) gets the problem and the fix, exit 1, no
    traceback and no `.venv`; a newer python3.X on PATH is named with the command to run."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "sitecustomize.py").write_text(
        "import sys\nsys.version_info = (3, 10, 12, 'final', 0)\n"
        "sys.version = '3.10.12 (main, Nov 20 2023) [GCC 11.4.0]'\n")
    fake = _script(tmp_path / "bin" / "python3.13", "exit 0\n").parent
    out = _tasklab(lab, "lab", path=[fake], keep_path=False, PYTHONPATH=str(old))
    assert out.returncode == 1
    _no_traceback(out)
    error, fix = out.stderr.strip().splitlines()
    assert error == ("[tasklab] error: the lab needs Python 3.11 or newer; "
                     "this Python is 3.10.12")
    assert fix == ("[tasklab] fix: python3.13 is installed here: "
                   f"run python3.13 {lab}/tasklab.py lab")
    assert not (lab / ".venv").exists()

    alone = _tasklab(lab, "test", path=[], keep_path=False, PYTHONPATH=str(old))
    assert alone.returncode == 1
    assert "[tasklab] fix: " in alone.stderr and "tasklab.py test" in alone.stderr
    _no_traceback(alone)


def _old_pythons() -> list[str]:
    """Real interpreters older than 3.11 on this machine (pyenv's, or python3.X on PATH)."""
    found = []
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for minor in range(6, 11):
        candidates = [*sorted(root.glob(f"3.{minor}.*/bin/python3")),
                      Path(shutil.which(f"python3.{minor}") or "/nonexistent")]
        for candidate in candidates:
            ok = candidate.is_file() and subprocess.run(
                [str(candidate), "-c", "import sys"], capture_output=True).returncode == 0
            if ok:
                found.append(str(candidate))
                break
    return found


def test_the_check_runs_on_python_3_6_to_3_10(lab):
    """The file parses, and reaches its version check, on the Pythons a learner may have:
    no `from __future__ import annotations` (3.7+), no newer syntax; where real old
    interpreters exist here, each one prints the message."""
    source = (ROOT / "tasklab.py").read_text()
    tree = ast.parse(source, feature_version=(3, 6))
    futures = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    assert not futures, "a __future__ import is a SyntaxError on Python 3.6"
    for python in _old_pythons():
        out = subprocess.run([python, str(lab / "tasklab.py"), "test"], cwd=lab,
                             env={**os.environ, "PATH": ""}, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 1, (python, out.stderr)
        assert "[tasklab] error: the lab needs Python 3.11 or newer" in out.stderr, python
        assert "[tasklab] fix: " in out.stderr and "Traceback" not in out.stderr, python


@pytest.mark.parametrize(("platform", "release", "found", "fix", "then"), [
    ("linux", {"ID": "ubuntu", "VERSION_CODENAME": "jammy"}, [],
     "sudo apt install python3.11 python3.11-venv", "python3.11 tasklab.py test"),
    ("linux", {"ID": "linuxmint", "ID_LIKE": "ubuntu debian", "UBUNTU_CODENAME": "jammy"}, [],
     "sudo apt install python3.11 python3.11-venv", "python3.11 tasklab.py test"),
    ("linux", {"ID": "ubuntu", "VERSION_CODENAME": "focal"}, [],
     "ppa:deadsnakes/ppa && sudo apt install python3.12 python3.12-venv",
     "python3.12 tasklab.py test"),
    ("linux", {"ID": "ubuntu", "VERSION_CODENAME": "noble"}, [],
     "sudo apt install python3 python3-venv", "python3 tasklab.py test"),
    ("linux", {"ID": "debian", "VERSION_ID": "12"}, [],
     "sudo apt install python3.11 python3.11-venv", "python3.11 tasklab.py test"),
    ("linux", {"ID": "debian", "VERSION_ID": "11"}, [],
     "uv python install 3.12", "python3.12 tasklab.py test"),
    ("linux", {}, [], "the python.org installers", "python3.12 tasklab.py test"),
    ("darwin", {}, [], "brew install python@3.12", "python3.12 tasklab.py test"),
    ("darwin", {}, [], "macOS installer from python.org", "python3.12 tasklab.py test"),
    ("win32", {}, [], "wsl --install -d Ubuntu-24.04", "python3 tasklab.py test"),
    ("linux", {"ID": "ubuntu", "VERSION_CODENAME": "jammy"}, ["python3.12"],
     "python3.12 is installed here", "python3.12 tasklab.py test"),
])
def test_each_system_is_told_its_own_way_to_python_3_11(monkeypatch, platform, release, found,
                                                        fix, then):
    monkeypatch.setattr(sys, "argv", ["tasklab.py", "test"])
    text = tasklab.python_fix(platform, release, found)
    assert fix in text
    assert text.endswith(then)


# --- No venv / ensurepip ------------------------------------------------------------------


def test_a_python_without_ensurepip_is_told_the_package(lab, tmp_path):
    """Debian and Ubuntu ship ensurepip apart (python3.X-venv): without it, one error line
    and the package to install, before anything is made."""
    stub = tmp_path / "no-ensurepip"
    stub.mkdir()
    (stub / "ensurepip.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'ensurepip'\", name='ensurepip')\n")
    # (PIP_NO_INDEX: were the check gone, pip would fail at once instead of downloading.)
    out = _tasklab(lab, "test", PYTHONPATH=str(stub), TASKLAB_INSTALLER="pip", PIP_NO_INDEX="1")
    assert out.returncode == 1
    _no_traceback(out)
    error, fix = out.stderr.strip().splitlines()
    assert error == (f"[tasklab] error: this Python {PYTHON} cannot make a virtual environment "
                     "with pip: its ensurepip module is missing")
    assert fix.startswith("[tasklab] fix: ")
    debian = {"debian", "ubuntu"} & ({tasklab.os_release().get("ID", "")}
                                     | set(tasklab.os_release().get("ID_LIKE", "").split()))
    assert (f"sudo apt install python{PYTHON}-venv" in fix) == bool(debian)
    assert not (lab / ".venv").exists()


@pytest.mark.parametrize(("release", "fix"), [
    ({"ID": "ubuntu"}, "sudo apt install python3.12-venv, then run the same command again"),
    ({"ID": "pop", "ID_LIKE": "ubuntu debian"}, "sudo apt install python3.12-venv"),
    ({"ID": "debian"}, "sudo apt install python3.12-venv"),
    ({"ID": "fedora"}, "or put uv on PATH"),
])
def test_the_venv_fix_names_the_exact_package(release, fix):
    assert fix in tasklab.venv_fix(release, "3.12")


def _ensurepip_fails(output: bytes):
    def setup_pip(self, context):
        raise subprocess.CalledProcessError(1, [context.env_exec_cmd, "-m", "ensurepip"],
                                            output=output)
    return setup_pip


def _debian_venv_exits(self, context):
    print("The virtual environment was not created successfully because ensurepip is not\n"
          "available.  On Debian/Ubuntu systems, you need to install the python3-venv")
    sys.exit(1)


@pytest.mark.parametrize("setup_pip", [
    _ensurepip_fails(b"/lab/.venv/bin/python3: No module named ensurepip\n"),
    _debian_venv_exits,
], ids=["ensurepip-run-fails", "debian-venv-exits"])
def test_a_venv_that_fails_on_ensurepip_is_told_the_same(monkeypatch, tmp_path, setup_pip):
    """When `import ensurepip` works but running it in the new venv does not (or Debian's
    venv prints its advice and exits), the same two lines, and no half-made `.venv`."""
    monkeypatch.setattr(venv.EnvBuilder, "_setup_pip", setup_pip)
    target = tmp_path / ".venv"
    with pytest.raises(SystemExit) as stop:
        tasklab.create_venv(target, with_pip=True)
    assert "its ensurepip module is missing" in str(stop.value.code)
    assert "\n[tasklab] fix: " in str(stop.value.code)
    assert not target.exists()


def test_another_venv_failure_says_what_failed(monkeypatch, tmp_path):
    monkeypatch.setattr(venv.EnvBuilder, "_setup_pip", _ensurepip_fails(
        b"Processing pip-23.2.1.whl\nOSError: [Errno 28] No space left on device\n"))
    with pytest.raises(SystemExit) as stop:
        tasklab.create_venv(tmp_path / ".venv", with_pip=True)
    assert str(stop.value.code).startswith(
        f"[tasklab] error: could not create {tmp_path / '.venv'}: OSError: [Errno 28] No space")


# --- A failing install: pip or uv -----------------------------------------------------------


def test_a_pip_failure_names_the_package_and_the_log_and_leaves_no_stamp(lab):
    """pip exits 1: the failing requirement and pip's own reason in one line, the log with
    the whole output beside `.venv/`, no stamp (the next run installs again), no traceback."""
    venv_dir = _fake_venv(lab, f"""\
        case "$*" in *"--upgrade pip"*) echo "Requirement already satisfied: pip"; exit 0;; esac
        cat <<'OUT'
        {textwrap.indent(PIP_NOT_FOUND, "        ").strip()}
        OUT
        exit 1
    """)
    out = _tasklab(lab, "test", TASKLAB_INSTALLER="pip")
    assert out.returncode == 1
    _no_traceback(out)
    error, fix = out.stderr.strip().splitlines()
    assert error == ("[tasklab] error: pip could not install foo==9: "
                     "No matching distribution found for foo==9")
    log = lab / ".venv-install.log"
    assert fix == (f"[tasklab] fix: read {log}, then run the same command again "
                   "(it starts the install over)")
    assert "ERROR: No matching distribution found for foo==9" in log.read_text()
    assert f"-c {lab}/constraints.txt -e '{lab}[test]'" in log.read_text()
    assert not (venv_dir / ".tasklab-installed").exists()
    assert out.stdout.splitlines()[-1] == "[tasklab]    0 s  resolving …"  # no TTY: plain


def test_a_uv_failure_names_the_package_and_the_log(lab, tmp_path):
    """uv on PATH is used (and said to be); it exits 1 with its own resolver message."""
    calls = tmp_path / "uv-argv"
    fake = _script(tmp_path / "bin" / "uv", f"""\
        echo "$@" > {calls}
        cat >&2 <<'OUT'
        {textwrap.indent(UV_NOT_FOUND, "        ").strip()}
        OUT
        exit 1
    """).parent
    out = _tasklab(lab, "lab", path=[fake])
    assert out.returncode == 1
    _no_traceback(out)
    assert "with uv (TASKLAB_INSTALLER=pip to use pip instead)" in out.stdout
    error, fix = out.stderr.strip().splitlines()
    assert error.startswith("[tasklab] error: uv could not install foo==9: Because foo was not "
                            "found in the package registry and you require foo==9")
    assert str(lab / ".venv-install.log") in fix
    assert not (lab / ".venv" / ".tasklab-installed").exists()
    # uv installs into the venv through the same constraints, and brings pip into it.
    assert calls.read_text().split() == [
        "pip", "install", "--python", str(lab / ".venv" / "bin" / "python"),
        "-c", str(lab / "constraints.txt"), "-e", f"{lab}[test]", "pip"]


@pytest.mark.parametrize(("output", "package", "reason", "network"), [
    (PIP_NOT_FOUND, "foo==9", "No matching distribution found for foo==9", False),
    (UV_NOT_FOUND, "foo==9", "Because foo was not found in the package registry", False),
    (PIP_OFFLINE, "alembic==1.20.1", "No matching distribution found for alembic==1.20.1", True),
    (PIP_BUILD_FAILED, "pyzmq", "Failed to build installable wheels", False),
    ("error: Failed to download `pandas==2.3.3`\n  Caused by: error sending request for url\n",
     "pandas==2.3.3", "Failed to download `pandas==2.3.3`", True),
], ids=["pip-not-found", "uv-not-found", "pip-offline", "pip-build", "uv-offline"])
def test_the_failure_is_read_from_the_installers_output(output, package, reason, network):
    found, said, offline = tasklab.describe_failure(output.splitlines())
    assert found == package
    assert said.startswith(reason)
    assert offline is network


def test_an_unreachable_index_is_told_as_a_network_problem():
    stop = tasklab.install_failure("pip", PIP_OFFLINE.splitlines())
    assert "the package index was out of reach: check the network" in stop.code
    assert "HTTPS_PROXY" in stop.code


# --- uv or pip, and what the learner sees while it installs ----------------------------------


def test_uv_installs_with_phases_and_the_total_time(lab, tmp_path):
    """A uv that works: the venv is made without ensurepip (uv brings pip), the phases are
    printed as plain lines with their times, then the total, and the stamp is written."""
    uv_output = (OUTPUT / "uv-first-install.txt").read_text()
    (tmp_path / "uv-output.txt").write_text(uv_output)
    fake = _script(tmp_path / "bin" / "uv", f"""\
        cat {tmp_path / "uv-output.txt"} >&2
        mkdir -p {lab}/.venv/bin && touch {lab}/.venv/bin/teamdesk
    """).parent
    out = _install_only(lab, path=[fake])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    phases = [m.group(1) for m in map(re.compile(r"\[tasklab\] +\d+ s  (\w+)").match, lines) if m]
    assert phases == ["resolving", "downloading", "installing", "ready"]
    assert "installed" in lines[-2] and lines[-1].startswith("[tasklab] environment ready in ")
    assert lines[-1].endswith("s (uv; its output: .venv-install.log)")
    assert "\r" not in out.stdout
    assert (lab / ".venv" / ".tasklab-installed").exists()
    assert uv_output in (lab / ".venv-install.log").read_text()
    assert not any((lab / ".venv").glob("lib/python*/site-packages/pip"))  # ensurepip skipped


def test_tasklab_installer_pip_wins_over_a_uv_on_path(lab, tmp_path):
    calls = tmp_path / "uv-argv"
    fake = _script(tmp_path / "bin" / "uv", f"echo \"$@\" > {calls}\nexit 1\n").parent
    _fake_venv(lab, f"""\
        case "$*" in *"--upgrade pip"*) exit 0;; esac
        cat {OUTPUT / "pip-first-install.txt"}
        touch {lab}/.venv/bin/teamdesk
    """)
    bad = _install_only(lab, path=[fake], TASKLAB_INSTALLER="conda")
    assert bad.returncode == 1 and "TASKLAB_INSTALLER=conda is not an installer" in bad.stderr
    out = _install_only(lab, path=[fake], TASKLAB_INSTALLER="pip")
    assert out.returncode == 0, out.stderr
    assert not calls.exists()
    assert "with pip (about a minute; faster with uv on PATH)" in out.stdout
    assert "(pip; its output: .venv-install.log)" in out.stdout


def _phases(text: str) -> list[tuple[str, str]]:
    progress = tasklab.InstallProgress()
    seen = []
    for line in text.splitlines():
        if progress.feed(line):
            seen.append((progress.phase, progress.detail()))
    return seen


def test_the_phases_of_a_captured_pip_install():
    """pip without metadata files downloads while it resolves: resolving (with a count),
    installing, ready. (The capture keeps 16 of the 134 requirements the resolver read.)"""
    seen = _phases((OUTPUT / "pip-first-install.txt").read_text())
    assert seen == [("installing", "134 packages"), ("ready", "134 packages installed")]
    progress = tasklab.InstallProgress()
    for line in (OUTPUT / "pip-first-install.txt").read_text().splitlines()[:25]:
        progress.feed(line)
    assert progress.phase == "resolving"
    assert progress.detail() == "9 packages, 8 downloaded"
    assert progress.item == "pytest"


def test_the_phases_of_pip_with_metadata_files():
    assert _phases(PIP_WITH_METADATA) == [
        ("downloading", "4 packages, 1 downloaded"),
        ("installing", "4 packages"),
        ("ready", "4 packages installed")]


def test_the_phases_of_a_captured_uv_install():
    """uv says how many it resolved, then names its large downloads as they finish."""
    text = (OUTPUT / "uv-first-install.txt").read_text()
    assert _phases(text) == [
        ("downloading", "135 packages"),
        ("installing", "135 packages"),
        ("ready", "135 packages installed")]
    progress = tasklab.InstallProgress()
    for line in text.splitlines()[:30]:
        progress.feed(line)
    assert (progress.phase, progress.detail(), progress.item) == (
        "downloading", "135 packages, 9 downloaded", "sqlalchemy")
    # With its cache full, uv prepares only the project itself, then installs the rest.
    assert _phases(UV_CACHED) == [
        ("downloading", "135 packages"),
        ("installing", "135 packages"),
        ("ready", "134 packages installed")]


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_one_line_redrawn_and_a_log_gets_plain_lines():
    lines = PIP_WITH_METADATA.splitlines()
    shown = {}
    for tty in (True, False):
        clock, stream = _Clock(), io.StringIO()
        line = tasklab.ProgressLine(start=100.0, stream=stream, tty=tty, clock=clock)
        progress = tasklab.InstallProgress()
        line.show(progress, new_phase=True)
        for text in lines:
            clock.now += 2
            line.show(progress, new_phase=progress.feed(text))
        clock.now += 30
        line.tick(progress)
        line.close()
        shown[tty] = stream.getvalue()
    terminal, plain = shown[True], shown[False]
    assert plain.splitlines() == [
        "[tasklab]    0 s  resolving …",
        "[tasklab]   16 s  downloading … (4 packages, 1 downloaded)",
        "[tasklab]   24 s  installing … (4 packages)",
        "[tasklab]   26 s  ready (4 packages installed)"]
    assert "\r" not in plain
    # On a terminal: a line per phase, redrawn in place with the package at hand, and left
    # as the phase ended.
    assert terminal.count("\n") == 4
    assert "\r\x1b[K[tasklab]    8 s  resolving … (3 packages, pandas)\r" in terminal
    assert "\r\x1b[K[tasklab]   14 s  resolving (4 packages)\n" in terminal
    assert "\r\x1b[K[tasklab]   22 s  downloading (4 packages, 3 downloaded)\n" in terminal
    assert terminal.endswith("\r\x1b[K[tasklab]   56 s  ready (4 packages installed)\n")


def test_a_fast_installer_is_drawn_at_most_ten_times_a_second_and_each_phase_ends_right():
    """Lines that come faster than the redraws still count: the line a phase leaves has
    the last counts, and the next phase does not carry the last phase's package."""
    clock, stream = _Clock(), io.StringIO()
    line = tasklab.ProgressLine(start=100.0, stream=stream, tty=True, clock=clock)
    progress = tasklab.InstallProgress()
    line.show(progress, new_phase=True)
    for text in (OUTPUT / "uv-first-install.txt").read_text().splitlines():
        clock.now += 0.01
        line.show(progress, new_phase=progress.feed(text))
    line.close()
    drawn = stream.getvalue().split("\r\x1b[K")
    assert len(drawn) < 40  # 179 lines
    assert "[tasklab]    0 s  downloading (135 packages, 19 downloaded)\n" in drawn
    assert "[tasklab]    0 s  installing (135 packages)\n" in drawn


def test_regen_runs_the_notebooks_on_servers_of_their_own(monkeypatch, tmp_path):
    """`tasklab.py regen` executes notebooks that stop and restart their servers: never an
    open lab's (.teamdesk/), but .teamdesk-regen/ beside it, the lab's folder kept for a
    pytest run inside a notebook (as the suite and `devkit.minutes --measure` do)."""
    calls = []
    monkeypatch.setattr(tasklab, "run", lambda args, env=None: calls.append(env) or 0)
    monkeypatch.setenv("TEAMDESK_DATA_DIR", str(tmp_path / "lab"))
    monkeypatch.delenv("TEAMDESK_LAB_DATA_DIR", raising=False)
    assert tasklab.cmd_regen(["notebooks/00-start-here.ipynb"]) == 0
    [env] = calls
    assert env["TEAMDESK_DATA_DIR"] == f"{tmp_path / 'lab'}-regen"
    assert env["TEAMDESK_LAB_DATA_DIR"] == str(tmp_path / "lab")
