"""`redact`: the one helper every message uses to show a URL (S2)."""

from __future__ import annotations

import pytest

from teamdesk.redaction import redact, redact_text


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:p%40ss%25x@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("postgresql://postgres@127.0.0.1:5432/teamdesk", "postgresql://postgres@127.0.0.1:5432/teamdesk"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("http://127.0.0.1:8888/lab?token=abc123", "http://127.0.0.1:8888/lab?token=***"),
    (None, ""),
])
def test_redact_masks_passwords_and_tokens_only(url, shown):
    """S2: the password (percent-encoded or not) and a `token=` go; user, host, port and
    database stay, so a message still says *where*."""
    assert redact(url) == shown


def test_redact_text_masks_urls_inside_free_text():
    """S2: a driver's error or our own message that embeds URLs is masked as a whole."""
    text = "cannot reach redis://:pw1@h:1/0 nor postgresql://u:p%25w2@h:2/db (timeout)"
    assert redact_text(text) == (
        "cannot reach redis://:***@h:1/0 nor postgresql://u:***@h:2/db (timeout)")


def test_settings_repr_masks_the_url_passwords():
    """S2: settings are shown in notebook outputs, logs and tracebacks."""
    from teamdesk.config import Settings

    s = Settings(database_url="postgresql://u:pw1@h:1/db", redis_url="redis://:pw2@h:2/0")
    assert "pw1" not in repr(s) and "pw2" not in repr(s) and "u:***@h:1/db" in repr(s)
    assert s.database_url == "postgresql://u:pw1@h:1/db"  # only the display changes
