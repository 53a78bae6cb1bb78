"""Secrets out of messages (contract S2): one `redact(url)` used by every message, log
line and error that shows a connection URL, and `redact_text` for free text that may embed
one (a driver's error, a traceback line)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

# scheme://[user]:password@ — the password runs to the last '@' before the host part; a
# password containing '@' must be percent-encoded (%40) in a URL anyway.
_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s/]+)@")
_TOKEN = re.compile(r"(?P<head>[?&]token=)[^&\s]+")


def redact(url: str | None) -> str:
    """`postgresql://u:p%40ss@h:5432/db` → `postgresql://u:***@h:5432/db` (S2). URLs
    without a password come back unchanged; None becomes an empty string."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return _TOKEN.sub(rf"\g<head>{MASK}", url)
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        netloc = f"{user}:{MASK}@{host}"
        return _TOKEN.sub(rf"\g<head>{MASK}", urlunsplit(parts._replace(netloc=netloc)))
    except ValueError:  # not parseable as a URL: fall back to the pattern
        return redact_text(url)


def redact_text(text: str) -> str:
    """Mask every `scheme://user:password@` and `?token=` inside free text (S2)."""
    return _TOKEN.sub(rf"\g<head>{MASK}", _CREDENTIALS.sub(rf"\g<head>{MASK}@", str(text)))
