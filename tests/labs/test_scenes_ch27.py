"""`labs.scenes.ch27`: reading pytest's `--setup-show` lines; and `ch27_exercises`: which
keys Exercise B's judge counts as one task's (notebook 27, ours: one prefix per world; the
judge itself runs in the registry test)."""

from __future__ import annotations

from labs.scenes import ch27, ch27_exercises

_TESTS = {"甲": "test_a.py::test_db_only", "乙": "test_b.py::test_with_queue"}
_STDOUT = """\
tests/integration/test_a.py::test_db_only (fixtures used: database_url, gates, settings) PASSED
tests/integration/test_b.py::test_with_queue (fixtures used: queue, redis, settings) PASSED
============================== 2 passed in 1.00s ===============================
"""


def test_book_run_reads_the_fixtures_each_test_used():
    """Which isolation each test relied on, how many used Redis, and the total line."""
    used = {t: line for t in _TESTS.values() for line in _STDOUT.splitlines()
            if f"{t} (fixtures used:" in line}
    run = ch27.BookRun(_TESTS, 0, _STDOUT, "", used)
    assert run.relied_on("test_a.py::test_db_only") == [
        "own clone", "own prefix (no Redis used)", "own gates"]
    assert run.relied_on("test_b.py::test_with_queue") == [
        "own prefix", "own Redis keys", "own queue"]
    assert run.redis_users == 1 and run.all_passed  # queue and redis: one test, counted once
    assert run.summary_line == "2 passed in 1.00s"
    assert run.report().splitlines()[0] == (
        "甲: PASSED | relied on: own clone, own prefix (no Redis used), own gates")
    missing = ch27.BookRun(_TESTS, 1, "", "", {})
    assert not missing.all_passed and "NOT RUN" in missing.report()


def test_a_key_of_a_tasks_job_is_named_by_prefix_queue_and_job_id():
    """Exercise B's truth (ours, I2): `<prefix>:<queue>:<task>-<run>` and the keys beside
    it are the task's; the queue's own keys, another task's and another world's are not."""
    from types import SimpleNamespace

    world = SimpleNamespace(queue_prefix="lababc", queue_name="teamdesk-tasks")
    mine = ["lababc:teamdesk-tasks:TTBKD8-0", "lababc:teamdesk-tasks:TTBKD8-1:lock"]
    others = ["lababc:teamdesk-tasks:wait", "lababc:teamdesk-tasks:TTBKD9-0",
              "lababcd:teamdesk-tasks:TTBKD8-0", "lababc:other-queue:TTBKD8-0",
              "lababc:teamdesk-tasks:TTBKD8-again"]
    assert all(ch27_exercises._is_jobs_key(k, world, "TTBKD8") for k in mine)
    assert not any(ch27_exercises._is_jobs_key(k, world, "TTBKD8") for k in others)
