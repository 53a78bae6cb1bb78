"""Scene helpers of `notebooks/27-test-isolation.ipynb` (ch. 27, inferred).

§4 runs the book's five named tests (ch. 26 §8's four, ch. 23 §7's one) from a cell, in one
pytest process, and reads from pytest's `--setup-show` lines which isolation each test
relied on. `BOOK_TEST_MAP` maps the book's tests of ch. 23 §7 and ch. 26 §7–§8 to the
notebook sections that stage them and our pytest tests (`map_markdown`, in the notebook and
the course map). The subprocess plumbing is not what the chapter is about, so it lives
here; the judges of the two exercises (the isolation fixture, one task's keys) are in
`labs.scenes.ch27_exercises`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from labs.i18n import listing, say
from labs.statements import LAB_QUERIES

if TYPE_CHECKING:
    from labs.lab import Lab

#: A fixture a test asked for → the isolation it gives (tests/conftest.py).
ISOLATION = {"database_url": "own clone", "settings": "own prefix",
             "gates": "own gates", "redis": "own Redis keys", "queue": "own queue"}


def _isolation_shown() -> dict[str, str]:
    """The same labels in the edition's words (`BookRun.report`)."""
    return {"own clone": say("ch27.isolation.clone", "own clone"),
            "own prefix": say("ch27.isolation.prefix", "own prefix"),
            "own gates": say("ch27.isolation.gates", "own gates"),
            "own Redis keys": say("ch27.isolation.redis", "own Redis keys"),
            "own queue": say("ch27.isolation.queue", "own queue"),
            "own prefix (no Redis used)": say("ch27.isolation.prefix-only",
                                              "own prefix (no Redis used)")}


def task_count(lab: Lab) -> int:
    """The number of ledger rows in this world's own database (psycopg, no lab session:
    the count must not depend on the harness it checks)."""
    with psycopg.connect(lab.settings.database_url) as conn:
        return conn.execute(LAB_QUERIES["task_count"]).fetchone()[0]


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
        """pytest's last line, e.g. "5 passed in 3.64s"."""
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
        out, shown = [], _isolation_shown()
        for book, test in self.tests.items():
            line = self.used.get(test, "")
            status = line.rsplit(" ", 1)[-1] or say("ch27.report.not-run", "NOT RUN")
            relied = listing(shown.get(r, r) for r in self.relied_on(test))
            out.append(say("ch27.report.line", "{book}: {status} | relied on: {relied}",
                           book=book, status=status, relied=relied))
        return "\n".join([*out, self.summary_line])

    @property
    def redis_users(self) -> int:
        """How many of the tests asked for a queue of their own in Redis (the `redis` or
        the `queue` fixture, or both: one test counts once)."""
        return sum(any(_uses(line, f) for f in ("redis", "queue"))
                   for line in self.used.values())

    @property
    def all_passed(self) -> bool:
        return (self.returncode == 0 and len(self.used) == len(self.tests)
                and all(line.endswith("PASSED") for line in self.used.values()))


def run_book_tests(tests: dict[str, str], timeout: float = 120) -> BookRun:
    """Run `tests` (paths under tests/integration/) in one pytest process — one process
    start instead of one per test keeps the notebook fast — with `-v --setup-show`, so each test's
    line names the fixtures it used. Each test still gets its own clone and prefix from
    its `settings` fixture."""
    root = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").exists())
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "--setup-show", "--color=no",
         "-p", "no:cacheprovider", "-p", "no:nbval",  # nbval's import alone takes ~2.5 s
         *[f"tests/integration/{t}" for t in tests.values()]],
        cwd=root, capture_output=True, text=True, timeout=timeout)
    used = {t: line for t in tests.values() for line in run.stdout.splitlines()
            if f"{t} (fixtures used:" in line}
    return BookRun(tests, run.returncode, run.stdout, run.stderr, used)


# ------------------------------------------------------------------ the book's tests and ours

@dataclass(frozen=True)
class BookTest:
    """One test the book describes (ch. 23 §7's dispatch failure, ch. 26 §7's six
    real-worker tests, §8's three reminder tests), where a notebook stages it, and the
    pytest tests of ours that prove it."""

    #: "ch. 23 §7", "§7 1 · export", "§8 2", …: the book's section (ch. 26 unless named)
    #: and its number in the list.
    book: str
    #: The book's own words, briefly (Chinese), and an English line.
    name: str
    english: str
    #: (notebook prefix, heading prefix) or (notebook prefix, first, last): the sections.
    staged: tuple[tuple[str, ...], ...]
    #: `path::test_name` or `path::test_name[param]`; empty: not covered by a test of ours.
    tests: tuple[str, ...]


_DISPATCH = "tests/integration/test_dispatch_redis_faults.py::"
_REAL = "tests/integration/test_worker_real.py::"
_RECOVERY = "tests/integration/test_worker_recovery.py::"
_RACES = "tests/integration/test_processor_races.py::"

def book_test_map() -> tuple[BookTest, ...]:
    """The book's ten tests (`BOOK_TEST_MAP`): ch. 23 §7's, then ch. 26 §7–§8's nine. The
    book's own words are quoted in Chinese
    in both editions, so they are read from the harness catalogue with `lang="zh"`, each
    under an English gloss; built on first use, since that reads the catalogue."""
    export, reminder = (say("ch27.book.export", "export", lang="zh"),
                        say("ch27.book.reminder", "reminder", lang="zh"))
    return (
        BookTest("ch. 23 §7",
                 say("ch27.book.23-7", "Redis dispatch failure: getJob finds nothing, add throws "
                     "'Redis offline', the real dispatchTasks; the dispatch throws, the task "
                     "stays WAITING", lang="zh"),
                 "a dispatch that fails on Redis: the tick raises, the task stays WAITING",
                 (("23", "§7"), ("23", say("ch27.section.23-exercise-b", "exercise B: how to "
                                           "strengthen the test", lang="zh"))),
                 (f"{_DISPATCH}test_redis_dispatch_failure_then_the_next_tick",
                  f"{_DISPATCH}test_redis_offline_add_keeps_task_waiting_undispatched",
                  f"{_DISPATCH}test_real_redis_outage_fails_fast_then_recovers_to_download")),
        BookTest(f"§7 1 · {export}",
                 say("ch27.book.7-1-export", "export stalled takeover: A pauses after "
                     "reading, B gets a real stalled claim E2", lang="zh"),
                 "export stalled takeover: A's late write matches 0 rows, the row stays E2's",
                 (("26b", "§4.1", "§4.5"),),
                 (f"{_REAL}test_stalled_takeover_late_executor_changes_nothing[export]",
                  f"{_RACES}test_export_takeover_old_executor_cannot_overwrite"
                  "[export.after_read]")),
        BookTest(f"§7 1 · {reminder}",
                 say("ch27.book.7-1-reminder", "reminder stalled takeover: 1 notification, 1 "
                     "system event, version up by exactly 1", lang="zh"),
                 "reminder stalled takeover: one notification, one event, version + 1",
                 (("26c", "§5.2", "§5.5"),),
                 (f"{_REAL}test_stalled_takeover_late_executor_changes_nothing[reminder]",)),
        BookTest("§7 2",
                 say("ch27.book.7-2", "the old failed callback comes late: record lost, two "
                     "scans re-add, the ledger must stay E2", lang="zh"),
                 "the late old `failed` callback: lost record, two scans re-add, E2 stays",
                 (("26d", say("ch27.section.26d-callback", "why the failed callback now only "
                              "logs", lang="zh")),
                  ("90", say("ch27.section.90-counterexample", "3. counterexample", lang="zh"))),
                 (f"{_RECOVERY}test_late_failed_callback_cannot_fail_the_new_execution"
                  "[contract]",
                  f"{_RECOVERY}test_late_failed_callback_cannot_fail_the_new_execution"
                  "[legacy-counterexample]")),
        BookTest("§7 3",
                 say("ch27.book.7-3", "an ordinary transient failure retried: 30ms backoff, "
                     "attemptsMade 2 in both", lang="zh"),
                 "a transient failure retried after a short backoff: attemptsMade 2 in both",
                 (("26a", say("ch27.section.26a-transient", "transient error", lang="zh")),),
                 (f"{_REAL}test_transient_error_retries_same_run_with_short_backoff",)),
        BookTest("§7 4",
                 say("ch27.book.7-4", "permanent rejection: invalid filters FAILED at once, "
                     "attemptsMade=1, exhausted=true", lang="zh"),
                 "permanent rejection: FAILED at once, one attempt, exhausted",
                 (("26a", say("ch27.section.26a-permanent", "permanent rejection", lang="zh")),),
                 (f"{_REAL}test_permanent_rejection_fails_at_once",)),
        BookTest("§7 5",
                 say("ch27.book.7-5", "stalled over the limit: first scan WAITING, second "
                     "FAILED", lang="zh"),
                 "stalled over the limit: scan 1 → WAITING, scan 2 → FAILED",
                 (("26d", "§7.1", "§7.2"),),
                 (f"{_RECOVERY}test_stalled_over_the_limit_then_two_scans",)),
        BookTest("§7 (ch. 30)",
                 say("ch27.book.ch30", "ch. 30 has its own real-subprocess tests of the "
                     "heartbeat, the SIGTERM drain and the recovery after a timeout exit",
                     lang="zh"),
                 "ch. 30's real subprocesses: heartbeat, SIGTERM drain, drain timeout, takeover",
                 (("30", "1.", "4."),
                  ("30", say("ch27.section.30-exercise-a", "exercise A: the drain's deadline",
                             lang="zh"))),
                 ("tests/integration/test_worker_process.py::"
                  "test_heartbeat_while_running_gone_after_clean_stop",
                  "tests/integration/test_worker_process.py::"
                  "test_sigterm_during_export_drains_and_completes",
                  "tests/integration/test_worker_process.py::"
                  "test_abandoned_export_is_finished_by_another_process[drain-timeout]",
                  "tests/integration/test_worker_process.py::"
                  "test_abandoned_export_is_finished_by_another_process[kill-9]")),
        BookTest("§8 1",
                 say("ch27.book.8-1", "a new executor claims: after A is released, 0 "
                     "notifications, 0 events, version unchanged", lang="zh"),
                 "a new executor claims: A's release commits nothing, B's exactly one",
                 (("26c", "§5.2", "§5.6"),),
                 (f"{_RACES}test_reminder_takeover_old_executor_commits_nothing",)),
        BookTest("§8 2",
                 say("ch27.book.8-2", "a recovery scan clears the lease: still WAITING after A "
                     "returns, no side effect", lang="zh"),
                 "a recovery scan clears the lease: A returns to WAITING, no side effect",
                 (("26c", say("ch27.section.26c-recovery", "§5 if a recovery scan clears the "
                              "lease first", lang="zh")),),
                 (f"{_RACES}test_recovery_scan_clears_lease_old_executor_rolls_back",)),
        BookTest("§8 3",
                 say("ch27.book.8-3", "a fault after the event write: all rolled back, only "
                     "the second execution gets the one result, attempts=2", lang="zh"),
                 "a fault after the event INSERT: all rolled back, one result, attempts 2",
                 (("26c", "§5.8"),),
                 (f"{_RACES}test_failure_after_event_insert_rolls_back_all_four",
                  "tests/labs/test_scenes_ch26c.py::"
                  "test_a_fault_anywhere_inside_the_transaction_rolls_back_and_only_the_last"
                  "_point_wins")),
    )


def __getattr__(name: str) -> Any:
    if name == "BOOK_TEST_MAP":  # read on first use: `book_test_map`
        return book_test_map()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _staged(where: tuple[str, ...]) -> str:
    notebook, *sections = where
    if len(sections) == 2:  # a range of numbered sections
        return f"`{notebook}` " + "–".join(section.rstrip(".") for section in sections)
    if re.fullmatch(r"§\d+(\.\d+)*", sections[0]):
        return f"`{notebook}` {sections[0]}"
    return f"`{notebook}` \"{sections[0]}\""


def map_markdown() -> str:
    """`BOOK_TEST_MAP` as a markdown table: the same text in notebook 27 and in
    `docs/teaching/course-map.md` (a test checks both, and that every cited test and
    section exists)."""
    book_test = say("ch27.map.book-test", "the book's test", lang="zh")
    rows = [f"| book | {book_test} · the book's test | staged in | our pytest test(s) |",
            "|---|---|---|---|"]
    for t in book_test_map():
        tests = "<br>".join(f"`{name}`" for name in t.tests) or "not covered"
        rows.append(f"| {t.book} | {t.name} · *{t.english}* | "
                    f"{'; '.join(_staged(w) for w in t.staged)} | {tests} |")
    return "\n".join(rows)
