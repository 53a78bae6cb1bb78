#!/usr/bin/env python3
"""Bootstrap for a fresh machine with only Python 3.11+: the README's two commands.

    python3 tasklab.py lab    # set up .venv, start PostgreSQL + Redis, open JupyterLab
    python3 tasklab.py test   # set up .venv, run ruff and every test (unit, integration,
                              # notebooks, the import contracts), in parallel
    python3 tasklab.py regen [notebooks/NAME.ipynb ...]   # re-execute notebooks, store outputs
    python3 tasklab.py hub    # a class's JupyterHub on this machine (as root; see
                              # deploy/jupyterhub/jupyterhub_config.py)
    python3 tasklab.py site   # the course website, both editions, into _site/
                              # (devkit/site.py; --only NAME ... runs fewer 中文 notebooks)

Standard library only. The virtual environment lives in `.venv/`, built with the Python
that runs this file, and is rebuilt when that Python's version, `pyproject.toml` or
`constraints.txt` changes. Every install goes through `constraints.txt` (the versions
this lab is tested with, so nbval compares outputs rendered by the same pandas,
matplotlib and IPython everywhere). Extra arguments after `test` go to pytest
(e.g. `python3 tasklab.py test tests/unit -x`). JupyterHub's proxy (configurable-http-proxy,
a Node.js program) is installed from npm into `.venv/proxy/` when a hub or its test needs
it, at the versions of `deploy/jupyterhub/proxy/package-lock.json`.

The install is done by `uv` when it is on PATH, by pip otherwise (`TASKLAB_INSTALLER=pip`
or `=uv` chooses); its phases are shown as they go, its whole output is kept in
`.venv-install.log`, and a failure says in two lines what went wrong and what to do, not
in a traceback.
"""

# No `from __future__ import annotations` (a SyntaxError before 3.7): annotations that
# an old Python cannot evaluate are strings, so Python 3.6 to 3.10 reach check_python().
import hashlib
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".tasklab-installed"
CONSTRAINTS = ROOT / "constraints.txt"
#: The whole output of the last install: beside `.venv/`, not in it, so a build that failed
#: before `.venv/` existed (or that removed it) still leaves it to read.
INSTALL_LOG = ROOT / ".venv-install.log"
#: The oldest Python the lab runs on (pyproject's requires-python).
OLDEST = (3, 11)
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


def _fail(problem: str, fix: str) -> SystemExit:
    """What the learner reads instead of a traceback: the problem, then the fix (exit 1)."""
    return SystemExit(f"[tasklab] error: {problem}\n[tasklab] fix: {fix}")


# --- Which Python: too old a one is told where to get a newer one --------------------------
# This part runs under any python3 from 3.6 on, so that an old one gets the message instead
# of a SyntaxError or an AttributeError: no newer syntax and no newer library calls here.


def _rerun(python: str) -> str:
    """The command the learner typed, with `python` in front."""
    typed = bool(sys.argv) and sys.argv[0].endswith("tasklab.py")
    script, args = (sys.argv[0], sys.argv[1:]) if typed else ("tasklab.py", ["test"])
    return " ".join(shlex.quote(a) for a in [python, script, *args])


def os_release(path: str = "/etc/os-release") -> "dict[str, str]":
    """The distribution's id, version and code name (empty where the file is missing)."""
    fields = {}
    try:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                key, sep, value = line.strip().partition("=")
                if sep:
                    fields[key] = value.strip().strip('"')
    except OSError:
        pass
    return fields


def newer_pythons() -> "list[str]":
    """`python3.X` commands on PATH, X from 11 up, that run (a pyenv shim is on PATH even
    for a version it refuses to run), newest first."""
    found = []
    for minor in range(14, OLDEST[1] - 1, -1):
        name = f"python3.{minor}"
        if shutil.which(name) is None:
            continue
        try:
            ok = subprocess.run([name, "-c", "import venv"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=20).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            found.append(name)
    return found


def python_fix(platform: str, release: "dict[str, str]", found: "list[str]") -> str:
    """Where a newer Python comes from on this system, and the command to run with it."""
    if found:
        return f"{found[0]} is installed here: run {_rerun(found[0])}"
    distro = {release.get("ID", "")} | set(release.get("ID_LIKE", "").split())
    codename = release.get("UBUNTU_CODENAME") or release.get("VERSION_CODENAME", "")
    if platform == "darwin":
        return ("install Python 3.12 with the macOS installer from python.org, or with "
                f"Homebrew (brew install python@3.12), then run {_rerun('python3.12')}")
    if platform == "win32":
        return ("run the lab in WSL2 with Ubuntu 24.04 (in PowerShell: wsl --install -d "
                "Ubuntu-24.04), whose python3 is 3.12; in it: sudo apt install python3-venv, "
                f"then {_rerun('python3')}")
    if "ubuntu" in distro and codename == "jammy":
        return ("sudo apt install python3.11 python3.11-venv (Ubuntu 22.04 has it), "
                f"then run {_rerun('python3.11')}")
    if "ubuntu" in distro and codename in ("focal", "bionic", "xenial"):
        return ("sudo add-apt-repository ppa:deadsnakes/ppa && sudo apt install python3.12 "
                "python3.12-venv (or move to Ubuntu 24.04, whose python3 is 3.12), then run "
                f"{_rerun('python3.12')}")
    debian = release.get("VERSION_ID", "0").split(".")[0]
    if "ubuntu" in distro or ("debian" in distro and debian.isdigit() and int(debian) >= 13):
        # Ubuntu 24.04 and later, Debian 13 and later: their own python3 is new enough.
        return f"sudo apt install python3 python3-venv, then run {_rerun('python3')}"
    if "debian" in distro and debian == "12":
        return f"sudo apt install python3.11 python3.11-venv, then run {_rerun('python3.11')}"
    return ("install Python 3.11 or newer (your system's packages, the python.org "
            f"installers, pyenv, or uv python install 3.12), then run {_rerun('python3.12')}")


def check_python() -> None:
    """Exit with where to get Python 3.11+ when this one is older, or WSL2 on Windows."""
    if sys.platform == "win32":  # the embedded servers' wheels are for Linux and macOS
        raise _fail("the lab runs on Linux and macOS; on Windows it runs in WSL2",
                    python_fix("win32", {}, []))
    if sys.version_info >= OLDEST:
        return
    have = sys.version.split()[0]
    fix = python_fix(sys.platform, os_release(), newer_pythons())
    raise _fail(f"the lab needs Python 3.11 or newer; this Python is {have}", fix)


# --- The virtual environment ---------------------------------------------------------------


def _has_ensurepip() -> bool:
    try:
        import ensurepip  # noqa: F401 - Debian and Ubuntu ship it apart (python3.X-venv)
    except ImportError:
        return False
    return True


def venv_fix(release: "dict[str, str]", version: str) -> str:
    """How this system gets `venv` with pip (what `python -m venv` needs)."""
    distro = {release.get("ID", "")} | set(release.get("ID_LIKE", "").split())
    if distro & {"debian", "ubuntu"}:
        return f"sudo apt install python{version}-venv, then run the same command again"
    return ("use a Python with its venv module and ensurepip (python.org's installers have "
            "both), or put uv on PATH: tasklab then installs pip with it")


def create_venv(path: Path, *, with_pip: bool) -> None:
    """A new venv at `path` for this Python; a missing `venv`/`ensurepip` is told in a line
    that names the package to install."""
    version = ".".join(map(str, sys.version_info[:2]))
    missing = _fail(f"this Python {version} cannot make a virtual environment with pip: "
                    "its ensurepip module is missing", venv_fix(os_release(), version))
    if with_pip and not _has_ensurepip():
        raise missing
    try:
        import venv

        venv.EnvBuilder(with_pip=with_pip, clear=True).create(path)
    except (ImportError, subprocess.CalledProcessError, SystemExit) as exc:
        # Debian's venv prints its own advice and exits; elsewhere ensurepip's run fails.
        shutil.rmtree(path, ignore_errors=True)
        output = getattr(exc, "output", None) or b""
        if isinstance(exc, SystemExit) or b"ensurepip" in output or isinstance(exc, ImportError):
            raise missing from None
        last = output.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        raise _fail(f"could not create {path}: {last[0]}",
                    f"run the same command again; if it fails again, remove {path}") from None


def _venv_version(path: Path) -> str:
    """The Python major.minor that `path` was made for, from its pyvenv.cfg ('' if none)."""
    try:
        config = (path / "pyvenv.cfg").read_text()
    except OSError:
        return ""
    found = re.search(r"^version(?:_info)?\s*=\s*(\d+\.\d+)", config, re.MULTILINE)
    return found.group(1) if found else ""


def _has_pip(path: Path) -> bool:
    return any(path.glob("lib/python*/site-packages/pip/__init__.py"))


def ensure_venv() -> None:
    check_python()
    python = ".".join(map(str, sys.version_info[:2]))
    digest = hashlib.sha256()
    for path in (ROOT / "pyproject.toml", CONSTRAINTS):
        digest.update(path.read_bytes())
    wanted = f"python {python}\n{digest.hexdigest()}\n"
    if STAMP.exists() and STAMP.read_text() == wanted and (BIN / "teamdesk").exists():
        return
    start = time.monotonic()
    installer = choose_installer()
    # A venv of another Python cannot be upgraded in place: its site-packages are for that
    # version. Build it anew for this one (and for pip, anew where pip is missing).
    if (_venv_version(VENV) != python or not (BIN / "python").exists()
            or (installer.name == "pip" and not _has_pip(VENV))):
        _say(f"creating {VENV} for Python {python} …")
        # uv installs pip itself, so it needs no ensurepip (Debian's python3-venv).
        create_venv(VENV, with_pip=installer.name == "pip")
    STAMP.unlink(missing_ok=True)  # a failed install leaves none: the next run tries again
    _say(f"installing teamdesk with its lab and test dependencies with {installer.name} "
         f"({installer.note()}) …")
    install(installer, start)
    STAMP.write_text(wanted)
    _say(f"environment ready in {time.monotonic() - start:.0f} s ({installer.name}; "
         f"its output: {INSTALL_LOG.name})")


# --- The installer: uv when it is there, pip otherwise -------------------------------------


class Installer:
    """The commands that install the project into `.venv/` through `constraints.txt`."""

    def __init__(self, name: str, program: str = "") -> None:
        #: "uv" or "pip": said to the learner, and what a failure names.
        self.name = name
        #: The uv executable (pip runs as `.venv/bin/python -m pip`).
        self.program = program

    def note(self) -> str:
        """What the learner may want to know about this choice."""
        if self.name == "uv":
            return "TASKLAB_INSTALLER=pip to use pip instead"
        return "about a minute; faster with uv on PATH"

    def commands(self) -> "list[tuple[list[str], bool]]":
        """(argv, whether its output shows the phases), in order."""
        python = str(BIN / "python")
        project = f"{ROOT}[test]"
        if self.name == "uv":
            # `pip` too: the docs' `.venv/bin/pip install -c constraints.txt …` and
            # `pip freeze` keep working in a venv that uv made without it.
            return [([self.program, "pip", "install", "--python", python,
                      "-c", str(CONSTRAINTS), "-e", project, "pip"], True)]
        pip = [python, "-m", "pip", "--disable-pip-version-check"]
        return [([*pip, "install", "--progress-bar", "off", "--upgrade", "pip"], False),
                ([*pip, "install", "--progress-bar", "off", "-c", str(CONSTRAINTS),
                  "-e", project], True)]


def choose_installer() -> Installer:
    """uv when it is on PATH (much faster), pip otherwise; TASKLAB_INSTALLER=pip|uv chooses."""
    wanted = os.environ.get("TASKLAB_INSTALLER", "").strip().lower()
    if wanted not in ("", "auto", "pip", "uv"):
        raise _fail(f"TASKLAB_INSTALLER={wanted} is not an installer tasklab knows",
                    "set it to pip or uv, or unset it (uv when it is on PATH, else pip)")
    uv = shutil.which("uv")
    if wanted == "uv" and uv is None:
        raise _fail("TASKLAB_INSTALLER=uv, but there is no uv on PATH",
                    "install uv (pipx install uv) or unset TASKLAB_INSTALLER to use pip")
    if uv and wanted != "pip":
        return Installer("uv", uv)
    return Installer("pip")


def install(installer: Installer, start: float) -> None:
    """Run the installer's commands with their phases shown; exit with a short message
    naming the failing package and the log when one fails."""
    progress = InstallProgress()
    line = ProgressLine(start)
    line.show(progress, new_phase=True)
    with open(INSTALL_LOG, "w", encoding="utf-8") as log:
        for argv, shown in installer.commands():
            log.write(f"$ {shlex.join(argv)}\n")
            log.flush()
            code, output = _run_logged(argv, log, progress, line, feed=shown)
            if code != 0:
                line.close()
                raise install_failure(installer.name, output)
    if progress.phase != "ready":  # an installer that said nothing we know of
        progress.phase = "ready"
        line.show(progress, new_phase=True)
    line.close()


def _run_logged(argv: "list[str]", log, progress: "InstallProgress", line: "ProgressLine",
                feed: bool) -> "tuple[int, list[str]]":
    """Run `argv`, writing its output to `log` and (with `feed`) giving it to `progress` line
    by line, the clock ticking on a terminal while the installer is silent (a download)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # pip's lines as they come, not in blocks
    try:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except OSError as exc:
        return 127, [f"error: cannot run {argv[0]}: {exc}"]
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    output = []
    try:
        while True:
            try:
                text = lines.get(timeout=0.5)
            except queue.Empty:
                line.tick(progress)
                continue
            if text is None:
                break
            log.write(text)
            output.append(text.rstrip("\n"))
            if feed:
                line.show(progress, new_phase=progress.feed(text))
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        line.close()
        raise SystemExit("[tasklab] install interrupted; the next run starts it again") from None
    return proc.wait(), output


# --- Phases: what the installer's own lines say it is doing --------------------------------

#: The phases of an install, in order; an install never goes back to an earlier one.
PHASES = ("resolving", "downloading", "installing", "ready")

#: (pattern, phase it starts or None, what it counts) for pip's and uv's lines.
_LINES: "tuple[tuple[re.Pattern[str], str | None, str], ...]" = tuple(
    (re.compile(pattern), phase, count) for pattern, phase, count in (
        # pip: the resolver looks at each requirement, and (without a server's metadata
        # files) downloads each wheel while it does.
        (r"^(?:Collecting|Processing|Obtaining) (\S+)", None, "resolved"),
        (r"^Requirement already satisfied: (\S+)", None, "resolved"),
        (r"^ +(?:Downloading|Using cached) (\S+?)(?<!\.metadata)(?: |$)", None, "downloaded"),
        # pip with metadata files: the wheels are downloaded after resolving.
        (r"^(?:Downloading|Using cached) (\S+\.(?:whl|tar\.gz|zip))", "downloading",
         "downloaded"),
        (r"^Installing collected packages: (.*)", "installing", "listed"),
        (r"^Successfully installed (.*)", "ready", "listed"),
        # uv: one summary line per phase.
        (r"^Resolved (\d+) packages?", "downloading", "number:resolved"),
        (r"^Prepared (\d+) packages?", "installing", "none"),  # those not in its cache
        (r"^(?:Installed|Audited) (\d+) packages?", "ready", "number:installed"),
        (r"^Downloading (\S+) \(", "downloading", ""),  # uv names only its large downloads
        (r"^ Downloaded (\S+)", None, "downloaded"),
        (r"^ +(?:Built|\+) (\S+)", None, ""),
    ))


class InstallProgress:
    """Reads pip's or uv's output a line at a time: the phase, the packages counted, and
    the package the last line was about."""

    def __init__(self) -> None:
        self.phase = PHASES[0]
        #: Requirements the resolver has looked at (uv: says how many it resolved).
        self.resolved = 0
        #: Wheels downloaded or taken from the cache.
        self.downloaded = 0
        #: Packages being installed, then installed.
        self.installed = 0
        #: The package the last line named.
        self.item = ""

    def feed(self, line: str) -> bool:
        """Take one line of output; True when it starts a new phase."""
        line = line.rstrip("\r\n")
        for pattern, phase, count in _LINES:
            found = pattern.match(line)
            if not found:
                continue
            value, named = found.group(1), ""
            if count == "listed":
                self.installed = len(value.replace(",", " ").split())
            elif count.startswith("number:"):
                setattr(self, count.split(":")[1], int(value))
            elif count == "none":
                pass
            else:
                named = _package_name(value)
                if count:
                    setattr(self, count, getattr(self, count) + 1)
            new = bool(phase) and PHASES.index(phase) > PHASES.index(self.phase)
            if new:
                self.phase = phase
            if named or new:  # a new phase starts with no package of the last one
                self.item = named
            return new
        return False

    def detail(self) -> str:
        """What the phase has done so far, in a few words."""
        if self.phase in ("resolving", "downloading"):
            parts = [_packages(self.resolved), f"{self.downloaded} downloaded"]
            return ", ".join(part for part in parts if not part.startswith("0 "))
        if self.phase == "installing":  # uv says how many only when they are in
            count = self.installed or self.resolved
            return _packages(count) if count else ""
        return f"{_packages(self.installed)} installed" if self.installed else ""


def _packages(count: int) -> str:
    return f"{count} package" + ("" if count == 1 else "s")


def _package_name(text: str) -> str:
    """`pandas==2.3.1`, `pandas-2.3.1-cp311-….whl`, a path or a URL: `pandas`."""
    text = text.rstrip("/").rsplit("/", 1)[-1]
    if text.endswith((".whl", ".tar.gz", ".zip")):
        text = text.split("-", 1)[0]
    return re.split(r"[<>=!~\[;( @]", text, maxsplit=1)[0]


class ProgressLine:
    """The install's phase and its time since the start: on a terminal one line redrawn in
    place, elsewhere (CI, a log file) a plain line when a phase starts."""

    def __init__(self, start: float, stream=None, tty: "bool | None" = None,
                 clock=time.monotonic) -> None:
        self.start = start
        self.stream = stream or sys.stdout
        if tty is None:
            tty = self.stream.isatty() and os.environ.get("TERM") != "dumb"
        self.tty = tty
        self.clock = clock
        self.drawn = ""  # what the in-place line shows now ("" when none is open)
        self.settled = ""  # the same without the package at hand: what a phase leaves
        self.last = 0.0

    def text(self, progress: InstallProgress, live: bool, ended: bool = False) -> str:
        """The line for `progress` now: with the package at hand when `live`, without the
        "…" when the phase has `ended` (a terminal's finished lines)."""
        elapsed = self.clock() - self.start
        words = [f"[tasklab] {elapsed:4.0f} s  {progress.phase}"]
        if progress.phase != "ready" and not ended:
            words.append("…")
        detail = progress.detail()
        if detail:
            live = live and progress.item and progress.phase != "ready"
            words.append(f"({detail}, {progress.item})" if live else f"({detail})")
        return " ".join(words)

    def show(self, progress: InstallProgress, new_phase: bool) -> None:
        if not self.tty:
            if new_phase:
                print(self.text(progress, live=False), file=self.stream, flush=True)
            return
        now = self.clock()
        if not new_phase and now - self.last < 0.1:
            # Not drawn, but what the line says if the phase ends here.
            self.settled = self.text(progress, live=False, ended=True)
            return
        if new_phase and self.drawn:
            self._write(self.settled, end="\n")  # the phase that ended, as it ended
        self._draw(progress, live=not new_phase)

    def tick(self, progress: InstallProgress) -> None:
        """Redraw the clock on a terminal while the installer prints nothing."""
        if self.tty and self.drawn:
            self._draw(progress, live=True)

    def _draw(self, progress: InstallProgress, live: bool) -> None:
        self.drawn = self.text(progress, live)
        self.settled = self.text(progress, live=False, ended=True)
        self._write(self.drawn)
        self.last = self.clock()

    def _write(self, text: str, end: str = "") -> None:
        width = shutil.get_terminal_size().columns - 1  # a wrapped line cannot be redrawn
        self.stream.write("\r\x1b[K" + text[:width] + end)
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
        self.drawn = ""


# --- A failed install: the package, the reason and the log, in two lines ------------------

_NETWORK = re.compile(r"NewConnectionError|Temporary failure in name resolution|"
                      r"Network is unreachable|Connection refused|timed out|ConnectTimeout|"
                      r"ProxyError|SSLError|error sending request|dns error|tcp connect error")
_FAILED_PACKAGE = tuple(re.compile(p) for p in (
    # uv
    r"and you require (\S+?),",
    r"Because (?:there is no version of )?(\S+?),? (?:was not found|and you require)",
    r"Failed to (?:download|build|fetch|prepare distributions?) `([^`]+)`",
    # pip
    r"No matching distribution found for (\S+)",
    r"Could not find a version that satisfies the requirement (\S+)",
    r"Failed (?:building wheel for|to build) (?!installable)([^\s`]+)",
    r"Building wheel for (\S+) .*did not run successfully",
    r"Cannot install (.+?) because",
))


def describe_failure(output: "list[str]") -> "tuple[str, str, bool]":
    """(the failing package or '', the installer's own last error line, whether the package
    index was out of reach), read from the installer's output."""
    errors = [line.strip() for line in output
              if re.match(r"\s*(ERROR|error|×|cause|╰─▶)", line)]
    reason = ""
    for line in errors:
        text = re.sub(r"^(ERROR:|error:|×|cause:|╰─▶)\s*", "", line)
        if text:
            reason = text if len(text) <= 200 else text[:199] + "…"
    package = ""
    for line in output:
        for pattern in _FAILED_PACKAGE:
            found = pattern.search(line)
            if found and not package:
                package = found.group(1).rstrip(",:")
    network = any(_NETWORK.search(line) for line in output)
    return package, reason, network


def install_failure(installer: str, output: "list[str]") -> SystemExit:
    package, reason, network = describe_failure(output)
    what = f"{installer} could not install {package}" if package else f"{installer} failed"
    problem = f"{what}: {reason}" if reason else what
    log = f"the whole output is in {INSTALL_LOG}"
    if network:
        return _fail(problem, "the package index was out of reach: check the network (behind "
                     f"a proxy, set HTTPS_PROXY) and run the same command again; {log}")
    if package and sys.version_info[:2] > (3, 14):
        return _fail(problem, "constraints.txt pins versions with wheels for Python 3.11–3.14: "
                     f"run this with one of those; {log}")
    return _fail(problem, f"read {INSTALL_LOG}, then run the same command again (it starts "
                 "the install over)")


# --- JupyterHub's proxy, from npm ----------------------------------------------------------


def ensure_proxy() -> None:
    """configurable-http-proxy in `.venv/proxy/`, from npm, unless that lock is there."""
    lock = (PROXY_PACKAGE / "package-lock.json").read_text()
    stamp = PROXY_DIR / ".tasklab-installed"
    if PROXY_BIN.exists() and stamp.exists() and stamp.read_text() == lock:
        return
    npm = shutil.which("npm")
    if npm is None:
        raise _fail("JupyterHub's proxy (the suite runs a real hub) comes from npm, which is "
                    "not installed", "install Node.js 20 or newer with npm (Debian/Ubuntu: "
                    "`sudo apt install nodejs npm`; macOS: `brew install node`), then run the "
                    "same command again")
    start = time.monotonic()
    _say("installing configurable-http-proxy, JupyterHub's proxy, from npm …")
    PROXY_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PROXY_PACKAGE / name, PROXY_DIR / name)
    done = subprocess.run([npm, "ci", "--omit=dev", "--no-audit", "--no-fund",
                           "--loglevel=error", "--prefix", str(PROXY_DIR)], cwd=PROXY_DIR)
    if done.returncode != 0:
        raise _fail(f"npm could not install configurable-http-proxy (exit {done.returncode}; "
                    "its errors are above)", "check the network (behind a proxy, set "
                    "HTTPS_PROXY for npm too), then run the same command again")
    stamp.write_text(lock)
    _say(f"proxy ready in {time.monotonic() - start:.0f} s")


def needs_proxy(targets: "list[str]") -> bool:
    """Whether a pytest run of `targets` may collect the hub's test."""
    paths = [t.split("::", 1)[0].rstrip("/") for t in targets if not t.startswith("-")]
    return not paths or any(HUB_TEST == p or HUB_TEST.startswith(f"{p}/") for p in paths)


# --- The commands --------------------------------------------------------------------------


def run(args: "list[str]", env: "dict[str, str] | None" = None) -> int:
    return subprocess.run(args, cwd=ROOT, env=env).returncode


def cmd_test(extra: "list[str]") -> int:
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


def cmd_regen(names: "list[str]") -> int:
    """Re-execute notebooks headlessly and store their outputs (never save from the UI)."""
    paths = names or sorted(str(p) for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
    # Servers of their own (.teamdesk-regen/, as `devkit.minutes --measure` and the site
    # have): the notebooks stop and restart their servers, which must never be an open
    # lab's; a pytest run inside a notebook keeps them (TEAMDESK_LAB_DATA_DIR, as in the suite).
    lab = os.environ.get("TEAMDESK_DATA_DIR") or str(ROOT / ".teamdesk")
    env = {**os.environ, "TEAMDESK_DATA_DIR": f"{lab}-regen"}
    env.setdefault("TEAMDESK_LAB_DATA_DIR", lab)
    for path in paths:
        _say(f"executing {path} …")
        start = time.monotonic()
        code = run([str(BIN / "jupyter"), "nbconvert", "--to", "notebook", "--execute",
                    "--inplace", "--ExecutePreprocessor.record_timing=False",
                    "--ExecutePreprocessor.timeout=120", path], env=env)
        if code != 0:
            return code
        _say(f"{path}: {time.monotonic() - start:.1f} s")
    return 0


def cmd_hub(extra: "list[str]") -> int:
    """A class's JupyterHub from this checkout (deploy/jupyterhub/jupyterhub_config.py)."""
    ensure_proxy()
    config = ROOT / "deploy" / "jupyterhub" / "jupyterhub_config.py"
    os.execv(BIN / "jupyterhub", [str(BIN / "jupyterhub"), "-f", str(config), *extra])


def cmd_site(extra: "list[str]") -> int:
    """The course website (devkit.site): Sphinx in .venv/, the 中文 notebooks run."""
    return run([str(BIN / "python"), "-m", "devkit.site", *extra])


def main(argv: "list[str]") -> int:
    if not argv or argv[0] not in ("lab", "test", "regen", "hub", "site"):
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
    if argv[0] == "site":
        return cmd_site(argv[1:])
    return cmd_test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
