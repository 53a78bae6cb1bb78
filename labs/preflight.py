"""`teamdesk preflight`: the instructor's check the evening before, on the machine the class
will use.

    ✓ Python: 3.11.7 in /srv/teamdesk/.venv, with the lab's packages
    ✓ PostgreSQL: 18.1 at 127.0.0.1:5433; 12 of 200 connections in use, 30 needed for 1 learner
    ✗ Redis: cannot connect to 127.0.0.1:6390 (Connection refused)
        fix: start it (`teamdesk services up` for the embedded one), or correct REDIS_URL
    …

One line per check, ✓ or ✗, and under each ✗ the one thing to do; the exit code is 1 when
anything failed. Each check is a measurement (`gather_*`, which talks to the real thing: a
server, a kernel, the font files, a port) and a verdict on it (`*_check`, pure), so the
verdicts are tested with broken measurements and the whole command against real servers:

- Python ≥ 3.11 in a virtual environment, with the lab's packages importable;
- PostgreSQL ≥ 14 and Redis ≥ 6.2 reachable (the embedded ones are started, as by every
  command), with their versions; Redis's `maxmemory-policy` is `noeviction` (BullMQ's
  need); free connections and Redis memory for `--learners N` (docs/classroom.md's sizing);
- a Jupyter kernel starts and imports the harness, and its memory is measured;
- a CJK font draws the figures' Chinese (`labs.fonts`), and for the Chinese edition on Linux
  the browser has one too (fontconfig);
- the lab's port is free (`devkit.lab.choose_port`: 8888, or the next free one);
- the takeover race (`labs.races` through `teamdesk demo race`'s own run) passes once, and
  how long it took here;
- free memory for N learners: each one's kernel (as measured) and server share.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from devkit.lab import DEFAULT_PORT, choose_port, port_free
from teamdesk.config import Settings
from teamdesk.redaction import redact_text

#: Per learner, one notebook open (docs/classroom.md, "Sizing, measured"): PostgreSQL
#: connections, their backends' private memory, Redis memory (rounded up).
CONNECTIONS_PER_LEARNER = 10
PG_MB_PER_LEARNER = 35
REDIS_MB_PER_LEARNER = 2
#: Connections beyond the learners': the instructor, a hub, a reserve (docs/classroom.md).
RESERVE_CONNECTIONS = 20
#: The oldest servers the lab supports (README: PostgreSQL 14+, Redis 6.2+).
PG_MIN = 140000
REDIS_MIN = (6, 2)
#: What a kernel imports to count as a lab's (26b's first cell, less the scenes).
KERNEL_CODE = "from labs.lab import Lab\nfrom labs import tables\nimport matplotlib.pyplot\n"
KERNEL_TIMEOUT_S = 90
#: Packages the lab's notebooks need (the `lab` extra), by import name.
LAB_MODULES = ("jupyterlab", "ipykernel", "matplotlib", "pandas", "nbconvert")
#: A character the Chinese figures draw (U+79DF, the first of "lease" in Chinese).
CJK_PROBE = "\u79df"


@dataclass(frozen=True)
class Check:
    """One line of the checklist."""

    name: str
    ok: bool
    detail: str
    #: The one thing to do about a ✗.
    fix: str = ""

    def text(self) -> str:
        line = f"{'✓' if self.ok else '✗'} {self.name}: {self.detail}"
        return line + (f"\n    fix: {self.fix}" if not self.ok and self.fix else "")


# ---------------------------------------------------------------- Python

def missing_modules(names: Iterable[str] = LAB_MODULES) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is None]


def python_check(version: tuple[int, ...] = tuple(sys.version_info[:3]),
                 prefix: str = sys.prefix, base_prefix: str = sys.base_prefix,
                 missing: Iterable[str] | None = None) -> Check:
    missing = list(missing_modules() if missing is None else missing)
    shown = ".".join(map(str, version))
    if version < (3, 11):
        return Check("Python", False, f"{shown} is too old (3.11 or newer)",
                     "install Python 3.11+ and run `python3.11 tasklab.py lab` once")
    if prefix == base_prefix:
        return Check("Python", False, f"{shown} outside any virtual environment ({prefix})",
                     "run `python3 tasklab.py lab` once (it builds .venv), then "
                     "`.venv/bin/teamdesk preflight`")
    if missing:
        return Check("Python", False, f"{shown} in {prefix} lacks {', '.join(missing)}",
                     "install the lab's packages: `python3 tasklab.py lab` (or "
                     "`.venv/bin/pip install -c constraints.txt -e '.[lab]'`)")
    return Check("Python", True, f"{shown} in {prefix}, with the lab's packages")


# ---------------------------------------------------------------- servers

@dataclass(frozen=True)
class PgInfo:
    version: str
    version_num: int
    max_connections: int
    reserved: int
    in_use: int
    where: str


@dataclass(frozen=True)
class RedisInfo:
    version: str
    #: The Redis version it is compatible with (Valkey says which), as numbers.
    compatible: tuple[int, ...]
    policy: str
    maxmemory: int
    used_memory: int
    where: str


def _where(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def gather_postgres(url: str) -> PgInfo:
    import psycopg

    from labs.statements import LAB_QUERIES

    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, connect_timeout=5) as conn:
        row = conn.execute(LAB_QUERIES["server_room"]).fetchone()
    if row is None:
        raise RuntimeError("the server did not say its settings")
    return PgInfo(row[0].split()[0], row[1], row[2], row[3], row[4], _where(url))


def gather_redis(url: str) -> RedisInfo:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5,
                                  retry_on_timeout=False)
    try:
        server, memory = client.info("server"), client.info("memory")
    finally:
        client.close()
    redis_version = str(server["redis_version"])
    version = (f"Valkey {server['valkey_version']} (Redis {redis_version} compatible)"
               if "valkey_version" in server else f"Redis {redis_version}")
    return RedisInfo(version, tuple(int(x) for x in redis_version.split(".")[:2]),
                     str(memory.get("maxmemory_policy", "?")), int(memory.get("maxmemory", 0)),
                     int(memory.get("used_memory", 0)), _where(url))


def _said(err: BaseException) -> str:
    """An error's first line as a check shows it, any password in it masked (S2)."""
    return (redact_text(str(err)).strip().splitlines() or [type(err).__name__])[0]


def _unreachable(what: str, where: str, err: BaseException, fix: str) -> Check:
    return Check(what, False, f"cannot connect to {where} ({_said(err)})", fix)


def postgres_check(info: PgInfo | BaseException, learners: int, where: str = "") -> Check:
    if isinstance(info, BaseException):
        return _unreachable("PostgreSQL", where, info, "start it (`teamdesk services up` for "
                            "the embedded one), or correct DATABASE_URL")
    need = CONNECTIONS_PER_LEARNER * learners + RESERVE_CONNECTIONS
    free = info.max_connections - info.reserved - info.in_use
    detail = (f"{info.version} at {info.where}; {info.in_use} of {info.max_connections} "
              f"connections in use, {need} needed for {learners} learner(s)")
    if info.version_num < PG_MIN:
        return Check("PostgreSQL", False, detail, "the lab needs PostgreSQL 14 or newer")
    if free < need:
        return Check("PostgreSQL", False, detail + f", {free} free",
                     f"raise max_connections to at least {need + info.in_use + info.reserved} "
                     "(docs/classroom.md), or close other sessions")
    return Check("PostgreSQL", True, detail)


def redis_check(info: RedisInfo | BaseException, learners: int, where: str = "") -> Check:
    if isinstance(info, BaseException):
        return _unreachable("Redis", where, info, "start it (`teamdesk services up` for the "
                            "embedded one), or correct REDIS_URL")
    need_mb = REDIS_MB_PER_LEARNER * learners
    room = ("no memory limit" if not info.maxmemory else
            f"{(info.maxmemory - info.used_memory) / 2**20:.0f} MB free of its maxmemory")
    detail = (f"{info.version} at {info.where}; maxmemory-policy {info.policy}; {room}, "
              f"{need_mb} MB needed for {learners} learner(s)")
    if info.compatible < REDIS_MIN:
        return Check("Redis", False, detail, "the lab needs Redis 6.2 or newer (or Valkey)")
    if info.policy != "noeviction":
        return Check("Redis", False, detail, "BullMQ needs `maxmemory-policy noeviction`: "
                     "`CONFIG SET maxmemory-policy noeviction` and in the server's config")
    if info.maxmemory and info.maxmemory - info.used_memory < need_mb * 2**20:
        return Check("Redis", False, detail, f"raise maxmemory by {need_mb} MB at least")
    return Check("Redis", True, detail)


# ---------------------------------------------------------------- kernel, fonts, port

def gather_kernel(cwd: Path, kernel_name: str = "python3",
                  timeout: float = KERNEL_TIMEOUT_S) -> tuple[float, float]:
    """Start a kernel as the lab would, import the harness in it; (seconds to a working
    kernel, its private memory in MB). Raises what went wrong."""
    import tempfile

    from jupyter_client.manager import start_new_kernel

    started = time.monotonic()
    # The kernel's own stderr (a transport warning, or why it died) is kept, not shown
    # amid the checklist: its last line joins the error when the kernel does not start.
    with tempfile.TemporaryFile("w+") as stderr:
        try:
            km, kc = start_new_kernel(kernel_name=kernel_name, startup_timeout=timeout,
                                      cwd=str(cwd), stderr=stderr)
        except Exception as err:
            stderr.seek(0)
            last = [line for line in stderr.read().splitlines() if line.strip()][-1:]
            if last:
                raise RuntimeError(f"{err} — {last[0]}") from err
            raise
        return _import_harness(km, kc, started, timeout)


def _import_harness(km: Any, kc: Any, started: float, timeout: float) -> tuple[float, float]:
    try:
        errors: list[str] = []

        def keep(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "error":
                errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

        reply = kc.execute_interactive(KERNEL_CODE, timeout=timeout, output_hook=keep)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(errors[0] if errors else "the harness did not import")
        pid = km.provisioner.process.pid  # type: ignore[union-attr]
        mb = psutil.Process(pid).memory_full_info().uss / 2**20
        return time.monotonic() - started, mb
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def servers_not_started(err: BaseException) -> list[Check]:
    """The two servers' checks when they could not even be started or found (`err`, its
    text masked: S2)."""
    fix = "`teamdesk services status` shows the embedded servers; or set the two URLs"
    return [Check("PostgreSQL", False, f"not started ({_said(err)})", fix),
            Check("Redis", False, "not started (see PostgreSQL)", fix)]


def kernel_check(measured: tuple[float, float] | BaseException) -> Check:
    if isinstance(measured, BaseException):
        return Check("kernel", False, f"did not start and import the harness "
                     f"({type(measured).__name__}: {_said(measured)})",
                     "reinstall the lab's packages (`python3 tasklab.py lab`), then run a "
                     "notebook's first cell to see the whole error")
    seconds, mb = measured
    return Check("kernel", True, f"started and imported the harness in {seconds:.1f} s; "
                 f"{mb:.0f} MB")


def font_candidates() -> list[tuple[str, Path]]:
    """The CJK fallbacks the figures use (`labs.fonts.cjk_families`), with their files."""
    from matplotlib import font_manager

    from labs import fonts

    return [(family, Path(font_manager.findfont(family, fallback_to_default=False)))
            for family in fonts.cjk_families()]


def _draws(path: Path, char: str = CJK_PROBE) -> bool:
    from matplotlib.ft2font import FT2Font

    try:
        return FT2Font(str(path)).get_char_index(ord(char)) != 0
    except (OSError, RuntimeError):
        return False


def font_check(candidates: list[tuple[str, Path]] | BaseException) -> Check:
    from labs import fonts

    drawn = [] if isinstance(candidates, BaseException) else [
        (family, path) for family, path in candidates if _draws(path)]
    if not drawn:
        why = (f"{type(candidates).__name__}: {candidates}"
               if isinstance(candidates, BaseException) else
               "none of " + ", ".join(f for f, _ in candidates) + f" draws {CJK_PROBE}")
        return Check("CJK font", False, f"the figures' Chinese would be boxes ({why})",
                     f"reinstall the lab (its font is {fonts.BUNDLED.name}), or install "
                     "a CJK font such as Noto Sans CJK")
    family, path = drawn[0]
    kind = "bundled with the lab" if path.resolve() == fonts.BUNDLED.resolve() else "system"
    return Check("CJK font", True, f"figures draw Chinese in {family} ({kind})")


def gather_browser_fonts() -> str | None:
    """fontconfig's Chinese families (Linux: what a browser falls back to), or None
    without fontconfig."""
    fc = shutil.which("fc-list")
    if fc is None:
        return None
    return subprocess.run([fc, ":lang=zh", "family"], capture_output=True, text=True,
                          timeout=30, check=False).stdout


def browser_font_check(lang: str, platform: str, families: str | None) -> Check | None:
    """For the Chinese edition on Linux: a Chinese font the browser can use (macOS and Windows
    ship one). None where there is nothing to check."""
    if lang != "zh" or not platform.startswith("linux"):
        return None
    found = sorted({f.split(",")[0].strip() for f in (families or "").splitlines() if f})
    if not found:
        return Check("CJK font (browser)", False, "no Chinese font for the browser: the "
                     "Chinese menus and notebooks would show boxes",
                     "install one: `sudo apt install fonts-noto-cjk` (Debian, Ubuntu, WSL)")
    return Check("CJK font (browser)", True, ", ".join(found[:2]))


def port_check(given: int | None, free: Callable[[int], bool] = port_free) -> Check:
    try:
        port = choose_port(given, free)
    except SystemExit as err:
        return Check("lab port", False, str(err).removeprefix("teamdesk lab: "),
                     "stop what listens there (another Jupyter?), or pass --port")
    if given is None and port != DEFAULT_PORT:
        return Check("lab port", True, f"{DEFAULT_PORT} is taken (another Jupyter?); the lab "
                     f"will say so and use {port}")
    return Check("lab port", True, f"{port} is free")


# ---------------------------------------------------------------- race, memory

def gather_race(settings: Settings) -> tuple[float, str]:
    """The takeover race once, as `teamdesk demo race` runs it (`labs.demo`: the race of
    the notebooks, `labs.races`), quietly: (seconds, its verdict line)."""
    from labs.demo import run_race_demo

    said: list[str] = []
    started = time.monotonic()
    code = asyncio.run(run_race_demo(settings, emit=said.append))
    verdict = next((s.strip() for s in reversed(said) if "verdict:" in s), "")
    if code != 0:  # the demo reads its verdict from the row and the log (labs.demo)
        raise RuntimeError(verdict or f"the race ended without its verdict (exit {code})")
    return time.monotonic() - started, verdict


def race_check(measured: tuple[float, str] | BaseException | None) -> Check:
    if measured is None:
        return Check("takeover race", False, "not run: it needs both servers",
                     "fix the servers above first")
    if isinstance(measured, BaseException):
        return Check("takeover race", False,
                     f"failed ({type(measured).__name__}: {_said(measured)})",
                     "run `teamdesk demo race` to see the step where it stops")
    seconds, _ = measured
    return Check("takeover race", True, f"passed in {seconds:.1f} s on this machine "
                 "(A's late write matched 0 rows; B's result saved)")


def memory_check(learners: int, available_mb: float, kernel_mb: float | None) -> Check:
    per = (kernel_mb or 0) + PG_MB_PER_LEARNER + REDIS_MB_PER_LEARNER
    need = per * learners
    kernel = (f"a kernel of {kernel_mb:.0f} MB as measured above"
              if kernel_mb is not None else "a kernel, not measured,")
    detail = (f"{available_mb / 1024:.1f} GB available; {learners} learner(s) need "
              f"{need / 1024:.1f} GB: each {kernel} and "
              f"{PG_MB_PER_LEARNER + REDIS_MB_PER_LEARNER} MB of server memory (as on a hub)")
    if available_mb < need:
        return Check("memory", False, detail, "close other programs, or plan fewer learners "
                     "per machine (docs/classroom.md)")
    return Check("memory", True, detail)


# ---------------------------------------------------------------- the checklist

def _attempt(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as err:  # a measurement that failed is the ✗ it reports
        return err


def run(resolve: Callable[[], Settings], *, learners: int = 1, lang: str = "en",
        port: int | None = None, root: Path | None = None,
        emit: Callable[[str], object] = print) -> list[Check]:
    """Every check in order, each announced before it runs (`emit`) and shown when done."""
    from devkit.lab import project_dir

    root = root or project_dir()
    checks: list[Check] = []

    def done(check: Check | None) -> None:
        if check is not None:
            checks.append(check)
            emit(check.text())

    def step(what: str) -> None:
        emit(f"  … {what}")

    step("Python and its packages")
    done(python_check())
    step("the servers (the embedded ones start if DATABASE_URL/REDIS_URL are unset)")
    settings = _attempt(resolve)
    if isinstance(settings, BaseException):
        for check in servers_not_started(settings):
            done(check)
        servers_ok = False
    else:
        pg = _attempt(lambda: gather_postgres(settings.database_url))
        done(postgres_check(pg, learners, _where(settings.database_url)))
        rd = _attempt(lambda: gather_redis(settings.redis_url))
        done(redis_check(rd, learners, _where(settings.redis_url)))
        # The race needs both to answer (a full or mis-set server still gets its try).
        servers_ok = not isinstance(pg, BaseException) and not isinstance(rd, BaseException)
    step("a kernel (starts one and imports the harness)")
    measured = _attempt(lambda: gather_kernel(root))
    done(kernel_check(measured))
    step("fonts")
    done(font_check(_attempt(font_candidates)))
    families = _attempt(gather_browser_fonts) if lang == "zh" else None
    done(browser_font_check(lang, sys.platform,
                            None if isinstance(families, BaseException) else families))
    step("the lab's port")
    done(port_check(port))
    if servers_ok:
        step("the takeover race, once (a few seconds)")
    done(race_check(_attempt(lambda: gather_race(settings)) if servers_ok else None))
    kernel_mb = measured[1] if isinstance(measured, tuple) else None
    done(memory_check(learners, psutil.virtual_memory().available / 2**20, kernel_mb))
    return checks


def summary(checks: list[Check], seconds: float) -> str:
    failed = [c.name for c in checks if not c.ok]
    if not failed:
        return f"preflight: all {len(checks)} checks passed in {seconds:.0f} s — ready for class"
    return (f"preflight: {len(failed)} of {len(checks)} checks failed ({', '.join(failed)}); "
            "fix them and run it again")
