"""labs.learn: the predict/reveal and exercise/check helpers the notebooks use."""

from labs.learn import check, reveal


def test_reveal_compares_kindly(capsys):
    assert reveal(" Lease Lost ", "lease lost") is True
    assert reveal([2, 1], (1, 2)) is True
    assert reveal(3, 4) is False
    assert reveal(None, "COMPLETED", why="P1: a finished task is skipped") is False
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Right: 'lease lost'."
    assert out[2] == "You guessed 3; what happened: 4."
    assert out[3].startswith("No guess written") and out[4] == "P1: a finished task is skipped"


def test_check_says_not_attempted_wrong_or_holds(capsys):
    """`check` speaks as every judged exercise does: one Verdict, true when it holds."""
    unwritten = check(None, lambda a: True, holds="x")
    wrong = check(5, lambda a: a == 4 or "off by one", holds="x")
    right = check(4, lambda a: a == 4, holds="the count matches")
    assert (bool(unwritten), unwritten.attempted, bool(wrong), bool(right)) == (
        False, False, False, True)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("not attempted yet: write your answer into answer")
    assert out[1] == "✗ Not yet: off by one"
    assert out[2] == "✓ the count matches"
