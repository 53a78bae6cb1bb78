"""How a lab's or test's database is cloned from the migrated template."""

from __future__ import annotations

import pytest

from teamdesk.db.templates import _clone_strategy


class _ServerSettings:
    """A stand-in connection that answers only the clone's settings query."""

    def __init__(self, version: int, fsync: str) -> None:
        self.row = (version, fsync)

    def execute(self, query: str) -> _ServerSettings:
        assert "server_version_num" in query and "fsync" in query
        return self

    def fetchone(self) -> tuple[int, str]:
        return self.row


@pytest.mark.parametrize(("version", "fsync", "strategy"), [
    (180006, "off", " STRATEGY FILE_COPY"),  # the embedded server: a file copy is cheapest
    (180006, "on", ""),    # a real server: no checkpoint per clone for everyone else on it
    (140011, "off", ""),   # PostgreSQL 14 has no STRATEGY clause
])
def test_only_a_server_without_fsync_copies_the_template_files(version, fsync, strategy):
    assert _clone_strategy(_ServerSettings(version, fsync)) == strategy
