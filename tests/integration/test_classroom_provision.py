"""A class on shared servers, provisioned for real (`devkit.classroom`): the suite's own
PostgreSQL and Redis stand in for the class servers, its superuser for the instructor.

Learner A works as a learner does — their own non-superuser role, their Redis ACL user,
`TEAMDESK_QUEUE_PREFIX=td:<A>` — through the product: a world cloned from A's template,
the demo data, an export requested and run by a real BullMQ worker. Learner B can do none
of it to A: not connect to A's databases, not read or delete A's keys, not flush, configure
or stop Redis. A template squatted by another role is refused. `cleanup` leaves no lab
database and no key; `remove` leaves no role and no Redis user. (Whole notebooks run as
provisioned learners in tests/integration/test_hub.py: on the servers as `docs/classroom.md`
once described them, a learner's lab stopped at `permission denied for table teams`.)
"""

from __future__ import annotations

import os
import secrets
import uuid
from pathlib import Path

import psycopg
import pytest
import redis
from redis.exceptions import NoPermissionError

from devkit import classroom
from devkit.world import World
from teamdesk.config import Settings
from teamdesk.db.templates import (
    TemplateNotOurs,
    clone_database,
    drop_database,
    ensure_template,
    template_name,
    with_database,
)

ROOT = Path(__file__).resolve().parents[2]
#: This run's class secret (the instructor's file is never touched here).
SECRET = secrets.token_hex(32).encode()
#: Commands no learner may run: each would reach every other learner.
FORBIDDEN = [("FLUSHALL",), ("FLUSHDB",), ("CONFIG", "GET", "maxmemory"),
             ("CONFIG", "SET", "maxmemory", "1"), ("SHUTDOWN", "NOSAVE"), ("KEYS", "*"),
             ("ACL", "LIST"), ("CLIENT", "LIST"),
             ("CLIENT", "KILL", "TYPE", "normal"), ("SCRIPT", "FLUSH"), ("SWAPDB", "0", "1")]


def _tag() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def admin(service_settings: Settings) -> tuple[str, str]:
    """The administrator's URLs: the suite's superuser and its Redis default user."""
    return service_settings.database_url, service_settings.redis_url


@pytest.fixture(scope="module")
def pair(admin):
    """Learners A and B, provisioned (templates built) once for the module; removed after.
    As `docs/classroom.md` told the instructor, the administrator's own template exists
    first: a learner must never clone it."""
    ensure_template(admin[0])
    names = [f"la_{_tag()}", f"lb_{_tag()}"]
    learners = classroom.provision(*admin, names, secret=SECRET)
    yield learners
    classroom.remove(*admin, names)


def _owned_databases(admin_url: str, role: str) -> set[str]:
    with psycopg.connect(with_database(admin_url, "postgres")) as conn:
        return {r[0] for r in conn.execute(
            "SELECT datname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba "
            "WHERE r.rolname = %s", (role,))}


def _keys(admin_redis_url: str, name: str) -> list[str]:
    client = redis.Redis.from_url(admin_redis_url, decode_responses=True)
    try:
        return list(client.scan_iter(match=f"td:{name}:*", count=1000))
    finally:
        client.close()


async def test_a_learner_owns_their_world_and_no_classmate_can_reach_it(admin, pair):
    """(ours) A, a non-superuser, opens a world under `td:<A>:`, seeds, requests an export
    (O1) and a real worker completes it (P5); every table of the clone is A's. B cannot
    connect to A's database or clone, nor GET or DEL A's keys; FLUSHALL, CONFIG, SHUTDOWN,
    KEYS … are refused to a learner; A's role has the class's connection limit."""
    from teamdesk.seed import seed_demo
    from teamdesk.services.exports import request_export
    from teamdesk.tasks.dispatcher import dispatch_tasks
    from teamdesk.tasks.queue import create_task_queue
    from teamdesk.tasks.worker import create_task_worker
    from teamdesk.testing import task_row, wait_until

    a, b = pair
    base = Settings.from_env(a.environment())
    assert base.queue_namespace == f"td:{a.name}"
    world = await World.open_async(base, "lab")
    queue = worker = None
    try:
        assert world.settings.queue_prefix.startswith(f"td:{a.name}:lab")
        async with world.sessions() as session:
            await seed_demo(session, tickets=8)
            task = await request_export(session, "acme", "ben", {"status": ["OPEN"]})
        queue = create_task_queue(world.settings)
        worker = await create_task_worker(world.settings, actor="A")
        await dispatch_tasks(queue, world.settings)

        async def completed() -> bool:
            return (await task_row(world.sessions, task.id))["status"] == "COMPLETED"

        await wait_until(completed, 20, "the export completed by A's worker")

        clone = world.settings.database_url.rsplit("/", 1)[1]
        with psycopg.connect(world.settings.database_url) as conn:
            owners = {r[0] for r in conn.execute(
                "SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")}
        assert owners == {a.name}
        for db in (a.name, clone):
            with pytest.raises(psycopg.OperationalError, match="permission denied"):
                psycopg.connect(with_database(b.database_url, db)).close()

        key = next(iter(_keys(admin[1], a.name)))
        theirs = redis.Redis.from_url(b.redis_url, decode_responses=True)
        try:
            with pytest.raises(NoPermissionError):
                theirs.get(key)
            with pytest.raises(NoPermissionError):
                theirs.delete(key)
            for command in FORBIDDEN:
                with pytest.raises(NoPermissionError):
                    theirs.execute_command(*command)
        finally:
            theirs.close()
        with psycopg.connect(admin[0]) as conn:
            limit = conn.execute("SELECT rolconnlimit FROM pg_roles WHERE rolname = %s",
                                 (a.name,)).fetchone()[0]
        assert limit == classroom.CONNECTION_LIMIT
    finally:
        if worker is not None:
            await worker.close(timeout=3)
        if queue is not None:
            await queue.close()
        await world.close()
    assert _keys(admin[1], a.name) == []


def test_provisioning_again_keeps_passwords_and_running_sessions(admin, pair):
    """A hub provisions at every spawn: same URLs, and a session already open survives."""
    a, _ = pair
    with psycopg.connect(a.database_url) as open_before:
        again = classroom.provision(*admin, [a.name], secret=SECRET)
        assert again[0] == a
        assert open_before.execute("SELECT current_user").fetchone()[0] == a.name
    redis.Redis.from_url(again[0].redis_url).ping()


def test_a_template_squatted_by_another_role_is_refused(admin, pair):
    """(ours) B creates the database C's template would be named: C's first clone refuses
    it, naming B, instead of handing C someone else's tables; `cleanup` of B drops it and
    C's template is then built by C."""
    _, b = pair
    (c,) = classroom.provision(*admin, [f"lc_{_tag()}"], secret=SECRET, prebuild=False)
    try:
        squat = template_name(c.name)
        with psycopg.connect(b.database_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{squat}"')
        with pytest.raises(TemplateNotOurs, match=b.name):
            clone_database(c.database_url)
        (report,) = classroom.cleanup(*admin, [b.name])
        assert squat in report.databases
        drop_database(clone_database(c.database_url))
        assert _owned_databases(admin[0], c.name) == {c.name, squat}
    finally:
        classroom.remove(*admin, [c.name])


async def test_cleanup_leaves_no_lab_database_and_no_key(admin):
    """A lab whose kernel died left its clone and keys: `cleanup` drops and deletes them
    (the learner's own database and template stay); `remove` then leaves no role, no
    database and no Redis user."""
    (d,) = classroom.provision(*admin, [f"ld_{_tag()}"], secret=SECRET,
                               prebuild=False)
    world = await World.open_async(Settings.from_env(d.environment()), "lab")  # never closed
    client = redis.Redis.from_url(d.redis_url)
    client.set(f"{world.settings.queue_prefix}:left", "1")
    client.close()
    await world.engine.dispose()
    (report,) = classroom.cleanup(*admin, [d.name])
    assert report.keys == 1 and len(report.databases) == 1
    assert _owned_databases(admin[0], d.name) == {d.name, template_name(d.name)}
    assert _keys(admin[1], d.name) == []

    (gone,) = classroom.remove(*admin, [d.name])
    assert gone.role and gone.redis_user
    with psycopg.connect(admin[0]) as conn:
        assert conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (d.name,)).fetchone() \
            is None
    assert _owned_databases(admin[0], d.name) == set()
    admin_redis = redis.Redis.from_url(admin[1])
    try:
        assert admin_redis.execute_command("ACL", "GETUSER", d.name) is None
    finally:
        admin_redis.close()


def test_bad_names_and_taken_names_change_nothing(admin):
    """Every name is checked, and every conflict found, before anything is created."""
    good = f"le_{_tag()}"
    for bad in ("Bad", "pg_x", "x" * 31, "default", "1st", "a-b"):
        with pytest.raises(classroom.ClassroomError, match="not a learner name"):
            classroom.provision(*admin, [good, bad], secret=b"s" * 32)
    stranger = f"plain_{_tag()}"
    with psycopg.connect(admin[0], autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {stranger} NOLOGIN")
        try:
            with pytest.raises(classroom.ClassroomError, match="is not a learner"):
                classroom.provision(*admin, [good, stranger], secret=b"s" * 32)
            with pytest.raises(classroom.ClassroomError, match="not a learner"):
                classroom.remove(*admin, [stranger])
            assert conn.execute("SELECT rolsuper, rolcanlogin FROM pg_roles WHERE rolname = %s",
                                (stranger,)).fetchone() == (False, False)
        finally:
            conn.execute(f"DROP ROLE {stranger}")
        assert conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (good,)).fetchone() \
            is None
    assert good not in classroom.learners(*admin)


def test_the_instructors_commands(admin, tmp_path):
    """`teamdesk classroom add|list|cleanup|remove` with the administrator's URLs in the
    environment: no password on the terminal (S2); `--env-dir` writes each learner's
    variables to a file of the instructor's alone (S1)."""
    import stat
    import subprocess
    import sys

    name = f"lf_{_tag()}"
    env = {**os.environ, "TEAMDESK_ADMIN_DATABASE_URL": admin[0],
           "TEAMDESK_ADMIN_REDIS_URL": admin[1],
           "TEAMDESK_CLASS_SECRET_FILE": str(tmp_path / "secret")}
    teamdesk = str(Path(sys.executable).with_name("teamdesk"))

    def run(*args: str) -> str:
        out = subprocess.run([teamdesk, "classroom", *args], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    shown = run("add", name, "--env-dir", str(tmp_path / "env"))
    (made,) = classroom.provision(*admin, [name],
                                  secret=classroom.class_secret(tmp_path / "secret"))
    written = (tmp_path / "env" / f"{name}.env").read_text()
    assert f"DATABASE_URL={made.database_url}\n" in written
    assert f"TEAMDESK_QUEUE_PREFIX=td:{name}\n" in written
    assert stat.S_IMODE((tmp_path / "env" / f"{name}.env").stat().st_mode) == 0o600
    password = made.database_url.split(":")[2].split("@")[0]
    assert name in shown and password not in shown
    assert name in run("list")
    assert "0 database(s), 0 key(s)" in run("cleanup", name)
    assert "role, Redis user" in run("remove", name)
    assert name not in classroom.learners(*admin)


def test_learners_provisioned_from_threads_at_once_each_get_their_own_template(admin):
    """A hub's `pre_spawn_hook` provisions in a thread per spawning learner: three at once
    each get a template of their own, migrated to the schema and owned by them. (Alembic
    keeps the running migration in module globals: unserialised, one thread's steps ran
    against another's database — "relation teams already exists".)"""
    from concurrent.futures import ThreadPoolExecutor

    names = [f"lt{i}_{_tag()}" for i in range(3)]
    try:
        with ThreadPoolExecutor(len(names)) as pool:
            made = list(pool.map(lambda n: classroom.provision(*admin, [n], secret=SECRET),
                                 names))
        assert [m[0].name for m in made] == names
        for name in names:
            assert template_name(name) in _owned_databases(admin[0], name)
            world_url = clone_database(made[names.index(name)][0].database_url)
            try:
                with psycopg.connect(world_url) as conn:
                    owners = {r[0] for r in conn.execute(
                        "SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")}
                assert owners == {name}
            finally:
                drop_database(world_url)
    finally:
        classroom.remove(*admin, [n for n in names
                                  if n in classroom.learners(*admin)])


def test_a_learner_drops_a_lab_database_that_a_process_not_theirs_is_in(admin, pair):
    """A learner's `DROP DATABASE … WITH (FORCE)` may not end a process of another role —
    an autovacuum worker belongs to none, and under load one was in a learner's lab
    database as the lab closed ("permission denied to terminate process"). The drop then
    ends the learner's own sessions and drops without FORCE, which stops autovacuum itself;
    a session it may not end (here the administrator's) is named as such, and once that
    one is gone the drop goes through."""
    a, _ = pair
    url = clone_database(a.database_url)
    mine = psycopg.connect(url)  # the learner's own session, left open: it is ended
    theirs = psycopg.connect(with_database(admin[0], url.rsplit("/", 1)[1].split("?")[0]))
    try:
        with pytest.raises(psycopg.errors.ObjectInUse, match="being accessed by other users"):
            drop_database(url)
    finally:
        theirs.close()
    drop_database(url)
    assert mine.closed or mine.broken or _gone(mine)
    assert url.rsplit("/", 1)[1].split("?")[0] not in _owned_databases(admin[0], a.name)


def _gone(conn: psycopg.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False
