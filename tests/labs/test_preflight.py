"""`teamdesk preflight` (`labs.preflight`), check by check: each verdict passes on a sound
measurement and fails, with its fix, on one broken item. What is broken here is the
measurement handed to the verdict (a too-old version, a full server, a refused
connection), or a real thing made to fail (a kernel that does not exist, a font without
Chinese, ports all taken); the whole command runs against real servers in
tests/labs/test_preflight_command.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs import fonts, preflight
from labs.preflight import Check, PgInfo, RedisInfo

ROOT = Path(__file__).resolve().parents[2]
PG = PgInfo("18.1", 180001, 200, 3, 12, "127.0.0.1:5433")
REDIS = RedisInfo("Valkey 9.0.1 (Redis 7.2.4 compatible)", (7, 2), "noeviction", 0,
                  1_500_000, "127.0.0.1:6390")


def _failed(check: Check, *words: str) -> None:
    """A ✗ with its fix, and the words that say what is wrong."""
    assert not check.ok, check.text()
    assert check.fix and check.text().startswith("✗ ") and "\n    fix: " in check.text()
    for word in words:
        assert word in check.text(), (word, check.text())


def test_python_needs_311_a_venv_and_the_lab_packages():
    good = preflight.python_check((3, 11, 7), "/lab/.venv", "/usr", [])
    assert good.ok and good.text().startswith("✓ Python: 3.11.7 in /lab/.venv")
    _failed(preflight.python_check((3, 10, 12), "/lab/.venv", "/usr", []), "too old", "3.11")
    _failed(preflight.python_check((3, 12, 1), "/usr", "/usr", []), "outside any virtual",
            "tasklab.py lab")
    _failed(preflight.python_check((3, 12, 1), "/lab/.venv", "/usr", ["jupyterlab"]),
            "lacks jupyterlab", "[lab]")
    assert preflight.missing_modules(["json", "no_such_module_here"]) == ["no_such_module_here"]


def test_postgres_version_and_connections_for_the_class():
    """10 connections per learner and 20 for the instructor, hub and reserve."""
    ok = preflight.postgres_check(PG, learners=1)
    assert ok.ok and "18.1 at 127.0.0.1:5433" in ok.detail and "30 needed" in ok.detail
    assert preflight.postgres_check(PG, learners=16).ok  # 180 of 185 free
    _failed(preflight.postgres_check(PG, learners=17), "190 needed for 17", "max_connections")
    _failed(preflight.postgres_check(PgInfo("13.9", 130009, 200, 3, 1, "h:1"), 1),
            "PostgreSQL 14")
    _failed(preflight.postgres_check(ConnectionRefusedError("Connection refused"), 1,
                                     "127.0.0.1:5999"),
            "cannot connect to 127.0.0.1:5999", "Connection refused", "DATABASE_URL")


def test_redis_version_policy_and_memory():
    ok = preflight.redis_check(REDIS, learners=30)
    assert ok.ok and "maxmemory-policy noeviction" in ok.detail and "60 MB needed" in ok.detail
    _failed(preflight.redis_check(RedisInfo("Redis 6.0.16", (6, 0), "noeviction", 0, 0,
                                            "h:1"), 1), "6.2")
    _failed(preflight.redis_check(RedisInfo("Redis 7.2.4", (7, 2), "allkeys-lru", 0, 0,
                                            "h:1"), 1), "allkeys-lru", "noeviction")
    full = RedisInfo("Redis 7.2.4", (7, 2), "noeviction", 64 * 2**20, 63 * 2**20, "h:1")
    _failed(preflight.redis_check(full, 30), "1 MB free", "60 MB needed")
    _failed(preflight.redis_check(ConnectionRefusedError("Connection refused"), 1, "h:6390"),
            "cannot connect to h:6390", "REDIS_URL")


def test_a_secret_in_a_connection_error_is_not_shown():
    """S2: a driver's error may quote the URL; the line shows it redacted."""
    err = OSError("could not connect to redis://:hunter2secret@127.0.0.1:6390/0")
    text = preflight.redis_check(err, 1, "127.0.0.1:6390").text()
    assert "hunter2secret" not in text and "127.0.0.1:6390" in text


def test_every_failed_check_masks_a_secret_its_error_quotes():
    """S2 for each check that shows an error's text: the kernel's (a harness import that
    reached Redis) and the race's too, not only the servers'."""
    err = RuntimeError("Redis at redis://:hunter2secret@127.0.0.1:6390/0 refused")
    for check in (preflight.kernel_check(err), preflight.race_check(err),
                  preflight.postgres_check(err, 1, "127.0.0.1:5433"),
                  *preflight.servers_not_started(err)[:1]):
        assert "hunter2secret" not in check.text() and "6390" in check.text(), check.text()


def test_a_kernel_that_cannot_start_is_named(tmp_path):
    """A real start of a kernel that does not exist fails fast, and says which."""
    measured = preflight._attempt(lambda: preflight.gather_kernel(tmp_path, "no-such-kernel"))
    assert isinstance(measured, Exception)
    _failed(preflight.kernel_check(measured), "no-such-kernel", "tasklab.py lab")
    assert preflight.kernel_check((4.2, 180.0)).text() == (
        "✓ kernel: started and imported the harness in 4.2 s; 180 MB")


def test_figures_need_a_font_that_draws_chinese():
    """The lab's own font draws it; DejaVu Sans (matplotlib's default) does not."""
    from matplotlib import font_manager

    good = preflight.font_check([(fonts.BUNDLED_FAMILY, fonts.BUNDLED)])
    assert good.ok and "bundled with the lab" in good.detail
    dejavu = Path(font_manager.findfont("DejaVu Sans"))
    _failed(preflight.font_check([("DejaVu Sans", dejavu)]), "boxes", "DejaVu Sans")
    _failed(preflight.font_check([("Gone", ROOT / "no-such-font.ttf")]), "boxes")
    assert preflight.font_check(preflight.font_candidates()).ok  # this machine, for real


def test_the_browsers_chinese_font_matters_for_the_chinese_edition_on_linux():
    assert preflight.browser_font_check("en", "linux", "") is None
    assert preflight.browser_font_check("zh", "darwin", None) is None
    found = preflight.browser_font_check("zh", "linux", "Noto Sans CJK SC,Noto Sans CJK JP\n")
    assert found is not None and found.ok and "Noto Sans CJK SC" in found.detail
    _failed(preflight.browser_font_check("zh", "linux", ""), "boxes", "fonts-noto-cjk")


def test_the_labs_port():
    """The lab's own rule (`devkit.lab.choose_port`): 8888 or the next free port; a port
    given must be free."""
    assert preflight.port_check(None, lambda p: True).detail == "8888 is free"
    moved = preflight.port_check(None, lambda p: p != 8888)
    assert moved.ok and "8888 is taken" in moved.detail and "8889" in moved.detail
    _failed(preflight.port_check(None, lambda p: False), "8888–8897", "--port")
    _failed(preflight.port_check(9000, lambda p: p != 9000), "9000 is in use")


def test_the_race_is_timed_or_says_why_not():
    ok = preflight.race_check((7.345, "verdict: …"))
    assert ok.ok and "passed in 7.3 s" in ok.detail
    _failed(preflight.race_check(None), "not run", "servers")
    _failed(preflight.race_check(TimeoutError("gate claim.after (B) never reached")),
            "TimeoutError", "gate claim.after", "teamdesk demo race")


def test_memory_for_n_learners():
    """Per learner: their kernel (measured) and 37 MB of server memory."""
    ok = preflight.memory_check(1, available_mb=8000, kernel_mb=163)
    assert ok.ok and "1 learner(s) need 0.2 GB" in ok.detail and "163 MB" in ok.detail
    _failed(preflight.memory_check(30, available_mb=4000, kernel_mb=163), "need 5.9 GB",
            "fewer learners")


def test_the_summary_names_what_failed():
    checks = [Check("Python", True, "3.11"), Check("Redis", False, "down", "start it")]
    assert preflight.summary(checks[:1], 12.3) == (
        "preflight: all 1 checks passed in 12 s — ready for class")
    assert preflight.summary(checks, 1) == (
        "preflight: 1 of 2 checks failed (Redis); fix them and run it again")


@pytest.mark.parametrize("args", [["--learners", "0"], ["--learners", "many"],
                                  ["--port", "70000"]])
def test_bad_options_are_refused_before_any_check(args, capsys):
    from labs import command

    with pytest.raises(SystemExit) as exit_:
        command.main(["preflight", *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err
