"""`devkit.classroom` before any server: learner names, the class secret, the URLs a
learner is given (S1, S2)."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from devkit import classroom
from teamdesk.db.templates import MAX_IDENTIFIER, template_name

ADMIN_DB = "postgresql://admin:s3cret@db.example:5432/postgres?sslmode=require"
ADMIN_REDIS = "redis://:adminpw@redis.example:6379/0"


@pytest.mark.parametrize("bad", ["", "Ann", "1ann", "ann-b", "a" * 31, "default", "postgres",
                                 "pg_ann", "teamdesk_learners", "ann b", "ann*"])
def test_a_name_that_cannot_be_a_learner_is_refused(bad):
    with pytest.raises(classroom.ClassroomError, match="not a learner name"):
        classroom.check_names(["ann", bad])


def test_names_are_kept_once_in_order_and_every_identifier_fits():
    assert classroom.check_names(["bo", "ann", "bo"]) == ["bo", "ann"]
    longest = "a" * 30
    assert classroom.check_names([longest]) == [longest]
    assert len(template_name(longest).encode()) <= MAX_IDENTIFIER
    assert len(template_name("x" * 60).encode()) <= MAX_IDENTIFIER  # a long role is hashed


def test_the_class_secret_is_made_once_for_its_owner_alone(tmp_path):
    path = tmp_path / "cfg" / "class-secret"
    first = classroom.class_secret(path)
    assert classroom.class_secret(path) == first and len(first) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o644)
    with pytest.raises(classroom.ClassroomError, match="readable by you alone"):
        classroom.class_secret(path)


def test_a_provisioning_beside_the_first_never_reads_the_secret_half_written(
        tmp_path, monkeypatch):
    """S1, and a hub spawning learners at once: while the first provisioning is still
    writing the new secret (held at a gate inside the write), a second one beside it gets
    a whole secret, not an empty file, and the first ends up with the same one."""
    path = tmp_path / "class-secret"
    writing, go_on = threading.Event(), threading.Event()
    made = iter(["a" * 64, "b" * 64])

    def token_hex(_n: int) -> str:
        value = next(made)
        if value.startswith("a"):  # the first writer: hold it mid-write
            writing.set()
            assert go_on.wait(10), "the second provisioning never came"
        return value

    monkeypatch.setattr(classroom._secrets, "token_hex", token_hex)
    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(_try(classroom.class_secret, path)))
    first.start()
    assert writing.wait(10)
    second = _try(classroom.class_secret, path)  # while the first is still writing
    go_on.set()
    first.join(10)
    assert second == b"b" * 64 and results == [second]


def _try(fn, *args):
    try:
        return fn(*args)
    except classroom.ClassroomError as err:
        return err


def test_a_learner_gets_their_own_credentials_and_namespace_and_no_password_is_shown():
    ann = classroom.learner(ADMIN_DB, ADMIN_REDIS, "ann", b"k" * 32)
    assert ann == classroom.learner(ADMIN_DB, ADMIN_REDIS, "ann", b"k" * 32)  # derived
    assert ann.database_url.startswith("postgresql://ann:")
    assert ann.database_url.endswith("@db.example:5432/ann?sslmode=require")
    assert ann.redis_url.startswith("redis://ann:")
    assert ann.redis_url.endswith("@redis.example:6379/0")
    assert ann.environment() == {"DATABASE_URL": ann.database_url, "REDIS_URL": ann.redis_url,
                                 "TEAMDESK_QUEUE_PREFIX": "td:ann"}
    other = classroom.learner(ADMIN_DB, ADMIN_REDIS, "ann", b"j" * 32)
    assert other.database_url != ann.database_url  # another class secret, other passwords
    password = ann.database_url.split(":")[2].split("@")[0]
    assert password not in repr(ann) and "s3cret" not in repr(ann)


def test_an_administrator_url_acts_as_the_learner():
    url = classroom.as_role(ADMIN_DB, "ann")
    assert url.endswith("?sslmode=require&options=-c%20role%3Dann")
