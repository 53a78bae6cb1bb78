"""The judges of notebook 27's two exercises (ch. 27, inferred), beside its scenes
(`labs.scenes.ch27`):

- Exercise A has the learner write the isolation fixture, judged by `judge_isolation`
  (exercise `27.isolation`): three real tests side by side, then the databases and keys
  left behind counted;
- Exercise B asks for the `SCAN` pattern of exactly one task's job keys in a world
  (`judge_keys`, exercise `27.keys`), scanned here and in a world opened beside it with a
  task of the same id.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import psycopg

from labs.exercises import Verdict, exercise, failed, first_line, passed
from labs.i18n import listing, say
from labs.statements import LAB_QUERIES
from labs.worlds import own_world, world_context
from teamdesk.db.templates import with_database

if TYPE_CHECKING:
    from labs.lab import Lab
    from teamdesk.config import Settings


# ------------------------------------------------------------------ Exercise B: one task's keys

def _is_jobs_key(key: str, settings: Settings, task_id: str) -> bool:
    """Whether `key` is a key of one of `task_id`'s queue jobs in the world of `settings`:
    `<prefix>:<queue>:<task>-<run>` or a key beside it (`…:<task>-<run>:lock`, …)."""
    head = f"{settings.queue_prefix}:{settings.queue_name}:"
    if not key.startswith(head):
        return False
    job_id = key[len(head):].split(":", 1)[0]
    return re.fullmatch(rf"{re.escape(task_id)}-\d+", job_id) is not None


def _shown_keys(keys: set[str], settings: Settings) -> str:
    """Two of `keys`, sorted, the world's prefix written `<prefix>` (it is random)."""
    first = sorted(k.replace(settings.queue_prefix, "<prefix>", 1) for k in keys)
    return ", ".join(first[:2]) + (", …" if len(first) > 2 else "")


async def _pattern_of(fn: Any, settings: Settings, task_id: str) -> str | Verdict:
    """What the learner's function returns for one world, or the verdict on why not."""
    try:
        pattern = fn(settings, task_id)
    except Exception as err:  # the learner's code: an error is a verdict, not a crash
        return failed(say("ch27.keys.raised", "my_pattern raised {error}", error=first_line(err)))
    if not isinstance(pattern, str) or not pattern:
        return failed(say("ch27.keys.not-a-pattern", "my_pattern returned {value!r}: return a "
                          "SCAN pattern, a string", value=pattern))
    return pattern


async def _matched(client: Any, pattern: str) -> set[str]:
    return {k async for k in client.scan_iter(match=pattern, count=500)}


async def _one_export(lab: Lab) -> dict[str, Any]:
    """What the check cell passes, outside a notebook: a lab with one export dispatched, its
    job waiting (§2's `mine`)."""
    task = await lab.request_export({"status": ["OPEN"]})
    await lab.dispatch()
    return {"lab": lab, "task_id": task.id}


def _whole_queue(settings: Settings, task_id: str) -> str:
    """A plausible wrong answer: the queue's name, but no job id — every key of the queue."""
    return f"{settings.queue_prefix}:{settings.queue_name}:*"


def _task_id_anywhere(settings: Settings, task_id: str) -> str:
    """A plausible wrong answer: the task's id, wherever it is — in any world."""
    return f"*{task_id}*"


@exercise("27.keys", answer="my_pattern", solution="solution_pattern",
          wrong={"the whole queue": _whole_queue, "the task id anywhere": _task_id_anywhere},
          context=world_context("27-keys-judge", _one_export))
async def judge_keys(fn: Any, *, lab: Lab, task_id: str) -> Verdict:
    """Exercise B: `fn(settings, task_id)` must give the SCAN pattern of exactly the keys of
    `task_id`'s queue jobs in the world of `settings` — none of the world's other keys (its
    queue's lists, counter, events) and none of another world's (ours: one prefix per
    world). Scanned on the shared server, for this lab and for a world opened beside it
    with an export of the same id (two worlds number their tasks alike), whose prefix the
    function is asked for too."""
    if not callable(fn):
        return failed(say("ch27.keys.not-a-function", "write my_pattern(settings, task_id) as a "
                          "function that returns the pattern"))
    mine = await _pattern_of(fn, lab.settings, task_id)
    if isinstance(mine, Verdict):
        return mine
    # The harness stages it, so its errors are checked at close (`own_world(check=True)`).
    async with own_world("27-keys-beside", settings=lab.settings, check=True,
                         tickets=10) as other:
        theirs = await other.request_export({"status": ["OPEN"]})
        await other.dispatch()
        found = await _matched(lab.redis, mine)
        own = {k for k in found if k.startswith(f"{lab.settings.queue_prefix}:")}
        jobs = {k async for k in lab.redis.scan_iter(
            match=f"{lab.settings.queue_prefix}:*") if _is_jobs_key(k, lab.settings, task_id)}
        beside = await _pattern_of(fn, other.settings, theirs.id)
        if isinstance(beside, Verdict):
            return beside
        found_beside = await _matched(other.redis, beside)
        jobs_beside = {k for k in found_beside if _is_jobs_key(k, other.settings, theirs.id)}
    facts = {"pattern": mine, "jobs": len(jobs), "same_id": theirs.id == task_id}
    problems = []
    if found - own:
        problems.append(say("ch27.keys.other-worlds", "it also matches keys of other worlds (the "
                            "world opened beside this one has a task {task} too: the ids "
                            "collide, the worlds do not)", task=theirs.id))
    if own - jobs:
        problems.append(say("ch27.keys.too-broad", "it also matches keys of this world that are "
                            "not the task's job: {keys}", keys=_shown_keys(own - jobs,
                                                                           lab.settings)))
    if jobs - own:
        problems.append(say("ch27.keys.misses", "it misses keys of the task's job: {keys}",
                            keys=_shown_keys(jobs - own, lab.settings)))
    if not problems and (not jobs_beside or found_beside != jobs_beside):
        problems.append(say("ch27.keys.not-beside", "asked for the world beside this one (its "
                            "settings), it does not find exactly its task's job: build the "
                            "pattern from the arguments, not from this world's values"))
    if problems:
        return failed(say("ch27.keys.not-yet", "not yet: {pattern!r}",
                          pattern=mine.replace(lab.settings.queue_prefix, "<prefix>")),
                      *problems, **facts)
    return passed(say("ch27.keys.exact", "exactly the task's job: the prefix keeps other worlds "
                      "out (the same task id lives beside this one), the queue's name and the job "
                      "id keep this world's other keys out"), **facts)


# ------------------------------------------------------------------ Exercise A: the fixture

#: The judge's three tests, run side by side with the learner's fixture: how many exports
#: each writes (different numbers, so a test that sees another's rows or jobs counts more
#: than it made) and whether it fails after it has written (its clean-up must still run).
ISOLATION_TESTS: dict[str, tuple[int, bool]] = {"A": (2, False), "B": (1, False),
                                                "C": (1, True)}


#: The learner's fixture: given the lab's settings, an async context manager yielding a
#: test's own `Settings`.
Fixture = Callable[["Settings"], contextlib.AbstractAsyncContextManager[Any]]


class FailedOnPurpose(AssertionError):
    """What the judge's test C raises after it has written: a test that fails."""


def _isolation_verdict(seen: dict[str, tuple[int, int]], leaks: list[str]) -> Verdict:
    """What three tests run side by side with a learner's fixture saw (test name → tasks
    in its ledger, waiting jobs in its queue) and each leak found, one line each."""
    if not leaks:
        return passed(say("ch27.fixture.isolates", "your fixture isolates: each test saw "
                          "only its own rows and jobs, and nothing was left behind — not even by "
                          "the test that failed"), seen=seen, leaks=leaks)
    return failed(say("ch27.fixture.leaks", "your fixture leaks:"), *leaks, seen=seen, leaks=leaks)


def _db_name(url: str) -> str:
    return url.partition("?")[0].rsplit("/", 1)[-1]


async def _one_test(fixture: Fixture, base: Settings, name: str,
                    barrier: asyncio.Barrier, yielded: dict[str, Any]) -> tuple[int, int]:
    """A small integration test as the suite writes one: seed a team, request exports,
    dispatch them into the queue, then — once every test has written — count what it
    sees. Test C then fails, as a test does."""
    from teamdesk.config import Settings
    from teamdesk.db.engine import create_engine, session_factory
    from teamdesk.seed import seed_demo
    from teamdesk.services.exports import request_export
    from teamdesk.tasks.dispatcher import dispatch_tasks
    from teamdesk.tasks.queue import create_task_queue

    exports, fails = ISOLATION_TESTS[name]
    try:
        async with fixture(base) as settings:
            yielded[name] = settings
            if not isinstance(settings, Settings):
                raise TypeError(f"the fixture must yield the test's Settings, not "
                                f"{type(settings).__name__}")
            engine = create_engine(settings.database_url)
            queue = create_task_queue(settings)
            try:
                async with session_factory(engine)() as session:
                    team = f"iso{name.lower()}"  # one team per test: a shared database works
                    await seed_demo(session, team_id=team, tickets=3)
                    for _ in range(exports):
                        await request_export(session, team, "ben", {"status": ["OPEN"]})
                await dispatch_tasks(queue, settings)
                await barrier.wait()  # every test has written before any looks
                with psycopg.connect(settings.database_url) as conn:
                    rows = conn.execute(LAB_QUERIES["task_count"]).fetchone()[0]
                jobs = (await queue.getJobCounts("waiting"))["waiting"]
                if fails:
                    raise FailedOnPurpose(f"test {name} fails after writing")
                return rows, jobs
            finally:
                await queue.close()
                await engine.dispose()
    except BaseException:
        await barrier.abort()  # the others must not wait for a test that is gone
        raise


def _left_behind(what: str, names: list[str], counts: dict[str, int] | None = None
                 ) -> list[str]:
    """One line for what the tests `names` left behind, saying whose clean-up did not run:
    every test's (no clean-up at all) or only the failing one's (not in `finally`)."""
    if not names:
        return []
    what = {"database(s)": say("ch27.left.databases", "database(s)"),
            "Redis keys": say("ch27.left.keys", "Redis keys")}.get(what, what)
    whose = (say("ch27.left.tests", "tests {tests}", tests=listing(names)) if len(names) > 1
             else say("ch27.left.test", "test {tests}", tests=listing(names)))
    things = (say("ch27.left.counted", "{count} {what} of {whose}",
                  count=max(counts[n] for n in names), what=what, whose=whose) if counts
              else say("ch27.left.all", "the {what} of {whose}", what=what, whose=whose))
    if all(ISOLATION_TESTS[n][1] for n in names):
        return [say("ch27.left.not-in-finally", "left behind: {things} — the test failed and "
                    "its clean-up never ran: put the clean-up in `finally`", things=things)]
    return [say("ch27.left.no-clean-up", "left behind: {things} — no clean-up removed them",
                things=things)]


def _what_they_saw(seen: dict[str, tuple[int, int]], ours: dict[str, Any]) -> list[str]:
    """A line for each test that counted rows or jobs it did not write: another test's."""
    leaks = []
    prefixes = [s.queue_prefix for s in ours.values()]
    for name, (rows, jobs) in seen.items():
        made = ISOLATION_TESTS[name][0]
        if rows != made:
            leaks.append(say("ch27.saw.shared-database", "rows: test {name} saw {rows} tasks in "
                             "its database, it wrote {made} — the tests share a database",
                             name=name, rows=rows, made=made))
        if jobs != made and prefixes.count(ours[name].queue_prefix) > 1:
            leaks.append(say("ch27.saw.shared-prefix", "jobs: test {name} saw {jobs} jobs in its "
                             "queue, it added {made} — the tests share the queue prefix "
                             "{prefix!r}", name=name, jobs=jobs, made=made,
                             prefix=ours[name].queue_prefix))
        elif jobs != made:
            leaks.append(say("ch27.saw.others-rows", "jobs: test {name} saw {jobs} jobs in its "
                             "queue, it added {made} — its dispatcher found the other tests' rows "
                             "in the shared database", name=name, jobs=jobs, made=made))
    return leaks


@contextlib.asynccontextmanager
async def _shared_database(base: Settings) -> AsyncIterator[Settings]:
    """A wrong fixture: a prefix of its own, removed in `finally`, but `base`'s database —
    every test counts the others' rows, and its dispatcher enqueues them too."""
    from teamdesk.tasks.queue import delete_prefix, redis_client

    settings = base.replace(queue_prefix=base.queue_prefix_for(f"ex27{uuid.uuid4().hex[:10]}"))
    try:
        yield settings
    finally:
        client = redis_client(settings)
        try:
            await delete_prefix(client, settings.queue_prefix)
        finally:
            await client.aclose()


@contextlib.asynccontextmanager
async def _cleanup_not_in_finally(base: Settings) -> AsyncIterator[Settings]:
    """A wrong fixture: a clone and a prefix of its own, removed after `yield` but not in
    `finally` — the test that fails skips its clean-up."""
    from teamdesk.db.templates import clone_database, drop_database
    from teamdesk.tasks.queue import delete_prefix, redis_client

    url = clone_database(base.database_url, prefix="teamdesk_ex27")
    settings = base.replace(database_url=url,
                            queue_prefix=base.queue_prefix_for(f"ex27{uuid.uuid4().hex[:10]}"))
    yield settings
    client = redis_client(settings)
    await delete_prefix(client, settings.queue_prefix)
    await client.aclose()
    drop_database(url)


async def _lab_settings(lab: Lab) -> dict[str, Any]:
    """What the check cell passes, outside a notebook: the settings of a lab of its own
    as `base` (the judge never touches base's own database or prefix)."""
    return {"base": lab.settings}


@exercise("27.isolation", answer="my_isolation", solution="solution_isolation",
          wrong={"a shared database": _shared_database,
                 "a clean-up outside finally": _cleanup_not_in_finally},
          context=world_context("27-isolation-judge", _lab_settings))
async def judge_isolation(fixture: Any, *, base: Settings, timeout: float = 60) -> Verdict:
    """Run the three tests of `ISOLATION_TESTS` side by side, each inside
    `fixture(base)` (an async context manager yielding the test's `Settings`), then count
    for real what they saw and what is left: each yielded database still in `pg_database`,
    each yielded prefix's keys in Redis. Whatever the fixture left behind is removed
    afterwards (never `base`'s own database or prefix: those belong to the lab).

    A leak is named: a test that saw another's rows (a shared database) or jobs (a shared
    prefix), a database or keys left behind, and whether it was the failing test's (a
    clean-up that is not in `finally`)."""
    import redis.asyncio as aioredis

    from teamdesk.db.templates import drop_database
    from teamdesk.tasks.queue import delete_prefix

    barrier = asyncio.Barrier(len(ISOLATION_TESTS))
    yielded: dict[str, Any] = {}
    async with asyncio.timeout(timeout):
        outcomes = await asyncio.gather(
            *(_one_test(fixture, base, name, barrier, yielded) for name in ISOLATION_TESTS),
            return_exceptions=True)
    seen: dict[str, tuple[int, int]] = {}
    leaks: list[str] = []
    for name, outcome in zip(ISOLATION_TESTS, outcomes, strict=True):
        fails = ISOLATION_TESTS[name][1]
        if isinstance(outcome, tuple):
            seen[name] = outcome
        elif not (fails and isinstance(outcome, FailedOnPurpose)) and not isinstance(
                outcome, asyncio.BrokenBarrierError):
            leaks.append(say("ch27.isolation.could-not-run", "test {name} could not run: "
                             "{error_type}: {error}", name=name,
                             error_type=type(outcome).__name__, error=outcome))
    ours = {name: s for name, s in yielded.items() if hasattr(s, "database_url")}
    prefixes = [s.queue_prefix for s in ours.values()]
    leaks += _what_they_saw(seen, ours)
    base_db, base_prefix = _db_name(base.database_url), base.queue_prefix
    dbs = {name: _db_name(s.database_url) for name, s in ours.items()}
    with psycopg.connect(with_database(base.database_url, "postgres")) as conn:
        existing = {row[0] for row in conn.execute(
            LAB_QUERIES["databases_left"], {"names": sorted(set(dbs.values()) - {base_db})})}
    client = aioredis.Redis.from_url(base.redis_url, decode_responses=True)
    try:
        keys = {p: len([k async for k in client.scan_iter(match=f"{p}:*")])
                for p in set(prefixes) - {base_prefix}}
        leaks += _left_behind("database(s)", [n for n in ours if dbs[n] in existing])
        leaks += _left_behind("Redis keys", [n for n in ours if keys.get(ours[n].queue_prefix)],
                              {n: keys.get(ours[n].queue_prefix, 0) for n in ours})
        for name in ours:  # the judge removes what the fixture left
            if dbs[name] in existing:
                drop_database(ours[name].database_url)
                existing.discard(dbs[name])
        for prefix, count in keys.items():
            if count and prefix and not any(c in prefix for c in "*?[]"):
                await delete_prefix(client, prefix)
    finally:
        await client.aclose()
    return _isolation_verdict(seen, list(dict.fromkeys(leaks)))
