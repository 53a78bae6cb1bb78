"""`labs.scenes.ch27`: reading pytest's `--setup-show` lines, and the exercise's judge of
a SCAN pattern on the shared Redis (notebook 27, ours: one prefix per world)."""

from __future__ import annotations

import uuid

from labs.scenes import ch27

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


async def test_key_pattern_judge(lab):
    """Exactly this world's keys hold; a pattern that also reaches another world's key,
    or one that misses some of ours, does not."""
    prefix = lab.settings.queue_prefix
    await lab.dispatch()  # nothing to add yet: make sure the world has keys of its own
    await lab.redis.set(f"{prefix}:scene-test", "1")
    foreign = f"{prefix}other{uuid.uuid4().hex[:6]}:k"
    await lab.redis.set(foreign, "1")
    try:
        assert (await ch27.key_pattern_judge(lab, f"{prefix}:*"))(None) is True
        assert "other worlds" in (await ch27.key_pattern_judge(lab, f"{prefix}*"))(None)
        assert "misses" in (await ch27.key_pattern_judge(lab, f"{prefix}:nothing*"))(None)
    finally:
        await lab.redis.delete(foreign)
