"""Scene helpers of `notebooks/27-test-isolation.ipynb` (ch. 27, inferred).

§4 runs the book's four named tests (ch. 26 §8) from a cell, in one pytest process, and
reads from pytest's `--setup-show` lines which isolation each test relied on; the exercise
asks for the `SCAN` pattern of exactly this world's keys. Neither the subprocess plumbing
nor the judge is what the chapter is about, so they live here.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

#: A fixture a test asked for → the isolation it gives (tests/conftest.py).
ISOLATION = {"database_url": "own clone", "settings": "own prefix",
             "gates": "own gates", "redis": "own Redis keys", "queue": "own queue"}


def task_count(lab: Any) -> int:
    """The number of ledger rows in this world's own database (psycopg, no lab session:
    the count must not depend on the harness it checks)."""
    with psycopg.connect(lab.settings.database_url) as conn:
        return conn.execute("SELECT count(*) FROM background_tasks").fetchone()[0]


def _uses(line: str, fixture: str) -> bool:
    return f" {fixture}," in line or f" {fixture})" in line


@dataclass
class BookRun:
    """One pytest run of the book's tests: `tests` maps the book's name to our test,
    `used` our test to its "(fixtures used: …) PASSED" line."""

    tests: dict[str, str]
    returncode: int
    stdout: str
    stderr: str
    used: dict[str, str]

    @property
    def summary_line(self) -> str:
        """pytest's last line, e.g. "4 passed in 3.64s"."""
        lines = self.stdout.strip().splitlines()
        return lines[-1].strip("= ") if lines else ""

    def relied_on(self, test: str) -> list[str]:
        """The isolation `test` relied on, from the fixtures it set up."""
        line = self.used.get(test, "")
        relied = [v for k, v in ISOLATION.items() if _uses(line, k)]
        if "own prefix" in relied and not {"own Redis keys", "own queue"} & set(relied):
            relied[relied.index("own prefix")] = "own prefix (no Redis used)"
        return relied

    def report(self) -> str:
        """One line per book test: passed or not, and what it relied on; then the total."""
        out = []
        for book, test in self.tests.items():
            line = self.used.get(test, "")
            status = line.rsplit(" ", 1)[-1] or "NOT RUN"
            out.append(f"{book}: {status} | relied on: {', '.join(self.relied_on(test))}")
        return "\n".join([*out, self.summary_line])

    @property
    def redis_users(self) -> int:
        """How many of the tests asked for a queue of their own in Redis."""
        return sum(_uses(line, f) for line in self.used.values() for f in ("redis", "queue"))

    @property
    def all_passed(self) -> bool:
        return (self.returncode == 0 and len(self.used) == len(self.tests)
                and all(line.endswith("PASSED") for line in self.used.values()))


def run_book_tests(tests: dict[str, str], timeout: float = 120) -> BookRun:
    """Run `tests` (paths under tests/integration/) in one pytest process — one process
    start instead of four keeps the notebook fast — with `-v --setup-show`, so each test's
    line names the fixtures it used. Each test still gets its own clone and prefix from
    its `settings` fixture."""
    root = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").exists())
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "--setup-show", "--color=no",
         "-p", "no:cacheprovider", *[f"tests/integration/{t}" for t in tests.values()]],
        cwd=root, capture_output=True, text=True, timeout=timeout)
    used = {t: line for t in tests.values() for line in run.stdout.splitlines()
            if f"{t} (fixtures used:" in line}
    return BookRun(tests, run.returncode, run.stdout, run.stderr, used)


async def key_pattern_judge(lab: Any, pattern: str | None) -> Callable[[Any], bool | str]:
    """The exercise's judge: `pattern` must match exactly this world's keys — what
    `close()` deletes — and none of another world on the shared Redis (ours: one prefix
    per world). Scans now; the returned function says what is wrong, if anything."""
    prefix = lab.settings.queue_prefix
    mine = {k async for k in lab.redis.scan_iter(match=f"{prefix}:*")}
    found = set() if pattern is None else {k async for k in lab.redis.scan_iter(match=pattern)}

    def exact(_pattern: Any) -> bool | str:
        if found - mine:
            return "it also matches keys of other worlds (another notebook, a test run)"
        return (bool(mine) and found == mine) or "it misses some of this world's keys"
    return exact
