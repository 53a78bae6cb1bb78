"""A class on a real JupyterHub: several learners, each with a server of their own, all
running labs at the same time on one shared PostgreSQL and one Redis.

The hub is `deploy/jupyterhub/jupyterhub_config.py` as an instructor runs it, with only what
a test must change overridden (`OVERRIDES`): its ports, test accounts (DummyAuthenticator)
instead of system users, each learner's home in a temporary folder
(SimpleLocalProcessSpawner), and a token for this test. The hook provisions each learner
(`devkit.hub.pre_spawn`), each server makes its lab root and serves it with the lab's
settings (`devkit.hub`, `devkit.jupyter_settings`), and the idle culler runs beside the hub.

Through the hub's proxy, as a browser would, the test checks what a learner is served (the
start page, their copies writable, the repository's notebooks read-only, the cited files
reachable through the lab root's links), then runs notebooks 24 and 26b in every learner's
server at once: the learner's own copy, each code cell in order, in a kernel of the hub.
Every cell must pass. The hook provisions each learner for real (`devkit.classroom`): their
labs run as a role of their own, not a superuser and within its connection limit, and no
learner can connect to a classmate's database, read or delete their keys, or FLUSHALL.
After `teamdesk classroom cleanup` the shared servers hold no lab database and no key, and
the most connections a lab database and a learner had at once are measured and printed —
the figures docs/classroom.md quotes.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
import redis
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from devkit import classroom, hub
from teamdesk.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_CONFIG = ROOT / "deploy" / "jupyterhub" / "jupyterhub_config.py"
#: Three learners, each running both notebooks: six labs at once on one server set.
LEARNERS = ("ana", "bo", "chen")
#: Two labs that run workers, races and gates (not the ones with a private Redis only).
NOTEBOOKS = ("24-reminders.ipynb", "26b-takeover-race.ipynb")
#: What docs/classroom.md tells an instructor to allow per open notebook.
CONNECTIONS_PER_LAB = 10
HUB_START_TIMEOUT_S = 60
SPAWN_TIMEOUT_S = 120  # three servers starting at once on a busy 2-core machine
CELL_TIMEOUT_S = 120  # as nbval's (tasklab.NBVAL_ARGS)

OVERRIDES = """\
# What tests/integration/test_hub.py changes of the deployed hub, and nothing else.
c = get_config()
load_subconfig({deploy!r})
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {learners!r}
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = {home!r}
c.Spawner.args = {args!r}
c.JupyterHub.services.append({{"name": "suite", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{
    "name": "suite", "services": ["suite"],
    "scopes": ["admin:users", "admin:servers", "access:servers", "list:services",
               "read:services"]}})
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Hub:
    base: str
    token: str
    home: Path
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    async def call(self, method: str, path: str, body: Any = None, *,
                   ok: tuple[int, ...] = (200, 201, 202, 204)) -> tuple[int, Any, dict]:
        """A REST call through the proxy with the test's token: (status, JSON, headers)."""
        request = HTTPRequest(f"{self.base}{path}", method=method, follow_redirects=False,
                              headers={"Authorization": f"token {self.token}"},
                              body=None if body is None else json.dumps(body),
                              allow_nonstandard_methods=True, request_timeout=60)
        try:
            resp = await AsyncHTTPClient().fetch(request)
            code, raw, headers = resp.code, resp.body, resp.headers
        except HTTPClientError as err:
            if err.response is None:
                raise
            code, raw, headers = err.code, err.response.body, err.response.headers
        assert code in ok, f"{method} {path}: {code} {raw[:500]!r}\n{self.tail()}"
        return code, json.loads(raw) if raw else None, dict(headers)


def _wait_for_hub(base: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + HUB_START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the hub exited:\n{log.read_text()[-6000:]}"
        try:
            with urllib.request.urlopen(f"{base}/hub/api/", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.25)
    pytest.fail(f"the hub did not answer within {HUB_START_TIMEOUT_S} s:\n"
                f"{log.read_text()[-6000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the hub (it stops the servers, the proxy and the culler it started);
    then every process it had started must be gone."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
    _, alive = psutil.wait_procs(family, timeout=30)
    for p in alive:
        p.kill()
    assert not alive, f"still running after the hub stopped: {alive}"


@pytest.fixture
def running_hub(service_settings: Settings, tmp_path: Path) -> Iterator[Hub]:
    """The deployed hub, running, with the suite's servers as the class's; at teardown
    stopped with everything it started."""
    if not shutil.which(hub.proxy_command()[0]):
        pytest.fail("no configurable-http-proxy, JupyterHub's proxy: `python3 tasklab.py test "
                    "tests/integration/test_hub.py` installs it")
    port, token = _free_port(), secrets.token_hex(24)
    config = tmp_path / "test_hub_config.py"
    config.write_text(OVERRIDES.format(
        deploy=str(DEPLOY_CONFIG), port=port, hub_port=_free_port(),
        proxy_api_port=_free_port(), learners=set(LEARNERS),
        home=str(tmp_path / "home" / "{username}"), token=token,
        args=["--allow-root"] if os.geteuid() == 0 else []))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "TEAMDESK_LANG", "LC_"))}
    env.update({"LANG": "C.UTF-8", "PYTHONPATH": str(ROOT),
                "TEAMDESK_HUB_STATE": str(tmp_path / "state"),
                # The hook's provisioning derives each learner's passwords from this
                # class's secret (not the hub user's ~/.config/teamdesk/class-secret).
                "TEAMDESK_CLASS_SECRET_FILE": str(tmp_path / "class-secret"),
                hub.ADMIN_DATABASE_URL_ENV: service_settings.database_url,
                hub.ADMIN_REDIS_URL_ENV: service_settings.redis_url})
    log = tmp_path / "hub.log"
    jupyterhub = Path(sys.executable).with_name("jupyterhub")
    with log.open("w") as sink:
        proc = subprocess.Popen([str(jupyterhub), "-f", str(config)], cwd=tmp_path, env=env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for_hub(base, proc, log)
        yield Hub(base, token, tmp_path / "home", log)
    finally:
        try:
            _stop(proc)
        finally:
            # The learners the hook provisioned leave the suite's servers as they found
            # them (roles, databases, Redis users): other tests of this worker use them.
            known = classroom.learners(service_settings.database_url,
                                       service_settings.redis_url)
            classroom.remove(service_settings.database_url, service_settings.redis_url,
                             [n for n in LEARNERS if n in known])


# --- a kernel of the hub, driven through its websocket as JupyterLab does ---------------

@dataclass
class CellRun:
    ok: bool
    #: The error's name and value, and the text the cell printed before it.
    error: str = ""
    stdout: list[str] = field(default_factory=list)


class Kernel:
    """A kernel's channels over the proxied websocket (Jupyter's JSON messages, v5.3)."""

    def __init__(self, ws: WebSocketClientConnection) -> None:
        self.ws = ws
        self.session = uuid.uuid4().hex

    @classmethod
    async def connect(cls, hub_: Hub, user: str, kernel_id: str) -> Kernel:
        url = (f"{hub_.base.replace('http', 'ws', 1)}/user/{user}/api/kernels/{kernel_id}/"
               f"channels?session_id={uuid.uuid4().hex}")
        ws = await websocket_connect(HTTPRequest(
            url, headers={"Authorization": f"token {hub_.token}"}, request_timeout=60),
            max_message_size=64 * 1024 * 1024)
        kernel = cls(ws)
        await kernel.request("kernel_info_request", {}, timeout=60)
        return kernel

    async def request(self, msg_type: str, content: dict, timeout: float) -> CellRun:
        """Send one shell request; wait for its reply and for the kernel to be idle."""
        msg_id = uuid.uuid4().hex
        await self.ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "session": self.session,
                       "username": "test_hub", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "channel": "shell",
            "buffers": []}))
        run, reply, idle = CellRun(ok=True), None, False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            raw = await asyncio.wait_for(self.ws.read_message(), deadline - time.monotonic())
            if raw is None:
                raise ConnectionError(f"the kernel's websocket closed: {self.ws.close_reason}")
            if isinstance(raw, bytes):
                continue  # a message with binary buffers (a widget's): not ours to read
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, body = msg["msg_type"], msg["content"]
            if msg["channel"] == "shell":
                reply = body
            elif kind == "status" and body.get("execution_state") == "idle":
                idle = True
            elif kind == "stream":
                run.stdout.append(body.get("text", ""))
            elif kind == "error":
                run.error = f"{body.get('ename')}: {body.get('evalue')}"
        if reply.get("status") == "error":
            run.ok = False
            run.error = run.error or f"{reply.get('ename')}: {reply.get('evalue')}"
        return run

    async def execute(self, code: str, timeout: float = CELL_TIMEOUT_S) -> CellRun:
        return await self.request("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True}, timeout)


#: What the learner's kernel is given, read inside it.
PROBE = ("import json, os\nprint(json.dumps({'cwd': os.getcwd(), **{k: os.environ.get(k) "
         "for k in ('DATABASE_URL', 'REDIS_URL', 'TEAMDESK_QUEUE_PREFIX', "
         "'TEAMDESK_DATA_DIR', 'TEAMDESK_ADMIN_DATABASE_URL', 'TEAMDESK_ADMIN_REDIS_URL')}}))")


@dataclass
class NotebookRun:
    user: str
    notebook: str
    seconds: float = 0.0
    cells: int = 0
    #: The first failing cell: its number among the code cells, its error and output.
    failure: str = ""
    environment: dict[str, Any] = field(default_factory=dict)


async def _run_notebook(hub_: Hub, user: str, notebook: str) -> NotebookRun:
    """The learner's copy of `notebook`, every code cell in order, in a new kernel of their
    server (a session, as JupyterLab opens one); stops at the first failing cell."""
    run = NotebookRun(user, notebook)
    path = f"my-notebooks/{notebook}"
    _, model, _ = await hub_.call("GET", f"/user/{user}/api/contents/{path}")
    cells = [c for c in model["content"]["cells"] if c["cell_type"] == "code"]
    _, session, _ = await hub_.call("POST", f"/user/{user}/api/sessions", {
        "path": path, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}})
    started = time.monotonic()
    try:
        kernel = await Kernel.connect(hub_, user, session["kernel"]["id"])
        try:
            probe = await kernel.execute(PROBE)
            assert probe.ok, probe.error
            run.environment = json.loads("".join(probe.stdout))
            for number, cell in enumerate(cells):
                result = await kernel.execute("".join(cell["source"]))
                run.cells += 1
                if not result.ok and "raises-exception" not in cell["metadata"].get("tags", []):
                    run.failure = (f"code cell {number}: {result.error}\n"
                                   f"{''.join(result.stdout)[-2000:]}")
                    break
        finally:
            kernel.ws.close()
    finally:
        run.seconds = time.monotonic() - started
        await hub_.call("DELETE", f"/user/{user}/api/sessions/{session['id']}")
    return run


# --- the class's servers, observed -------------------------------------------------------

def _databases(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}


def _keys(url: str) -> set[str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        return set(client.scan_iter(count=1000))
    finally:
        client.close()


class _ConnectionWatch(threading.Thread):
    """Samples pg_stat_activity while the notebooks run: the most connections seen at once
    to each database that was not there before (the labs' clones), and by each role to
    those databases (with real provisioning a role is a learner, with all their labs). A
    measurement, not a synchronisation: nothing waits on it."""

    def __init__(self, url: str, existing: set[str]) -> None:
        super().__init__(daemon=True)
        self.url, self.existing = url, existing
        self.peak: dict[str, int] = {}
        self.peak_by_role: dict[str, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.done.wait(0.2):
                roles: dict[str, int] = {}
                for db, role, n in conn.execute(
                        "SELECT datname, usename, count(*) FROM pg_stat_activity "
                        "WHERE datname IS NOT NULL AND usename IS NOT NULL "
                        "GROUP BY datname, usename"):
                    if db not in self.existing:
                        self.peak[db] = max(n, self.peak.get(db, 0))
                        roles[role] = roles.get(role, 0) + n
                for role, n in roles.items():
                    self.peak_by_role[role] = max(n, self.peak_by_role.get(role, 0))


# --- the test ---------------------------------------------------------------------------

async def _spawn(hub_: Hub, user: str) -> float:
    """Start `user`'s server through the hub's REST API; seconds until it is ready."""
    started = time.monotonic()
    await hub_.call("POST", f"/hub/api/users/{user}/server")
    while time.monotonic() - started < SPAWN_TIMEOUT_S:
        _, model, _ = await hub_.call("GET", f"/hub/api/users/{user}")
        server = model["servers"].get("")
        if server and server["ready"]:
            return time.monotonic() - started
        assert server and server["pending"], f"{user}'s server did not start:\n{hub_.tail()}"
        await asyncio.sleep(0.5)
    pytest.fail(f"{user}'s server was not ready within {SPAWN_TIMEOUT_S} s:\n{hub_.tail()}")


async def _check_what_a_learner_is_served(hub_: Hub, user: str) -> None:
    """The lab's settings in a hub's server: the start page is the learner's copy of 00;
    their copies are theirs (writable, no stored answers); the repository's notebooks are
    read-only and a save is refused; the harness files are not listed; a file the
    notebooks cite is reached through the lab root's links."""
    api = f"/user/{user}/api/contents"
    _, _, headers = await hub_.call("GET", f"/user/{user}/", ok=(301, 302))
    assert headers["Location"].split("?")[0].endswith(
        f"/user/{user}/lab/tree/my-notebooks/00-start-here.ipynb"), headers["Location"]
    _, mine, _ = await hub_.call("GET", f"{api}/my-notebooks/26b-takeover-race.ipynb")
    assert mine["writable"] is True
    assert all(not c["outputs"] for c in mine["content"]["cells"] if c["cell_type"] == "code")
    _, theirs, _ = await hub_.call("GET", f"{api}/notebooks/26b-takeover-race.ipynb")
    assert theirs["writable"] is False
    assert any(c.get("outputs") for c in theirs["content"]["cells"])
    await hub_.call("PUT", f"{api}/notebooks/26b-takeover-race.ipynb",
                    {"type": "notebook", "format": "json", "content": mine["content"]},
                    ok=(403,))
    _, listing, _ = await hub_.call("GET", f"{api}/notebooks")
    names = {item["name"] for item in listing["content"]}
    assert "24-reminders.ipynb" in names and not names & {"conftest.py", "sanitize.cfg"}
    _, top, _ = await hub_.call("GET", api)
    assert {"notebooks", "my-notebooks", "teamdesk", "RULES.md"} <= {
        item["name"] for item in top["content"]}
    await hub_.call("GET", f"{api}/teamdesk/tasks/queries.sql?content=0")
    root = hub_.home / user / hub.LAB_FOLDER
    assert (root / "notebooks").is_symlink() and not (root / "my-notebooks").is_symlink()


async def test_a_class_runs_its_labs_at_once_on_a_real_hub(running_hub: Hub,
                                                           service_settings: Settings):
    """Three learners on the deployed hub, each running 24 and 26b at once in kernels of
    their own server: every cell passes, each kernel has its learner's URLs and none of
    the administrator's, no lab holds more than CONNECTIONS_PER_LAB connections, and the
    shared servers keep no database and no key of theirs."""
    hub_, timings = running_hub, {}
    database_url, redis_url = service_settings.database_url, service_settings.redis_url
    databases_before, keys_before = _databases(database_url), _keys(redis_url)
    started = time.monotonic()
    spawned = await asyncio.gather(*(_spawn(hub_, user) for user in LEARNERS))
    timings["servers ready"] = max(spawned)
    _, services, _ = await hub_.call("GET", "/hub/api/services")
    assert services["idle-culler"]["pid"], "the hub runs no idle culler"
    await asyncio.gather(*(_check_what_a_learner_is_served(hub_, user) for user in LEARNERS))

    watch = _ConnectionWatch(database_url, databases_before)
    watch.start()
    ran = time.monotonic()
    try:
        runs = await asyncio.gather(*(_run_notebook(hub_, user, nb)
                                      for user in LEARNERS for nb in NOTEBOOKS))
    finally:
        watch.done.set()
        watch.join(5)
    timings["notebooks"] = time.monotonic() - ran
    timings["total"] = time.monotonic() - started

    failures = [f"{r.user} {r.notebook}: {r.failure}" for r in runs if r.failure]
    assert not failures, "\n\n".join(failures)
    print(f"\nhub: {', '.join(f'{k} {v:.0f} s' for k, v in timings.items())}; per notebook "
          + ", ".join(f"{r.user}/{r.notebook[:3]} {r.seconds:.0f} s" for r in runs))
    print(f"peak PostgreSQL connections per lab database: {sorted(watch.peak.values())}; "
          f"per role, all its labs together: {watch.peak_by_role}")
    for r in runs:
        env, root = r.environment, hub_.home / r.user / hub.LAB_FOLDER
        assert env["cwd"] == str(root / "my-notebooks"), env
        assert env["TEAMDESK_DATA_DIR"] == str(root / ".teamdesk"), env
        assert env["DATABASE_URL"] and env["REDIS_URL"], env
        assert r.user in env["TEAMDESK_QUEUE_PREFIX"], env
        assert env["TEAMDESK_ADMIN_DATABASE_URL"] is None is env["TEAMDESK_ADMIN_REDIS_URL"]
    assert len({r.environment["TEAMDESK_QUEUE_PREFIX"] for r in runs}) == len(LEARNERS)

    assert len(watch.peak) >= len(runs), "the labs did not run side by side"
    assert max(watch.peak.values()) <= CONNECTIONS_PER_LAB, watch.peak
    # The hook provisioned each learner: their labs ran as their own role, within its limit.
    assert set(watch.peak_by_role) == set(LEARNERS), watch.peak_by_role
    assert max(watch.peak_by_role.values()) <= classroom.CONNECTION_LIMIT, watch.peak_by_role
    envs = {r.user: r.environment for r in runs}
    for me, classmate in zip(LEARNERS, LEARNERS[1:] + LEARNERS[:1], strict=True):
        _check_confined(me, envs[me], classmate, envs[classmate])

    # Nothing a lab made is left once the class is cleaned up: each learner keeps their
    # own database and template (until `remove`), no lab clone and no key.
    report = classroom.cleanup(database_url, redis_url, LEARNERS)
    print("cleanup after class:", {r.name: (len(r.databases), r.keys) for r in report})
    kept = {db for db in _databases(database_url) - databases_before
            if not any(db == u or (db.endswith(f"_{u}") and db.startswith("teamdesk_tpl_"))
                       for u in LEARNERS)}
    assert kept == set()
    assert _keys(redis_url) - keys_before == set()


def _check_confined(me: str, mine: dict[str, Any], classmate: str, theirs: dict[str, Any]
                    ) -> None:
    """Learner `me`, with the URLs their kernel was given: no superuser; cannot connect
    to `classmate`'s database; cannot read or delete `classmate`'s keys, nor FLUSHALL."""
    with psycopg.connect(mine["DATABASE_URL"], autocommit=True) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                            ).fetchone() == (False,)
    their_db = psycopg.conninfo.conninfo_to_dict(theirs["DATABASE_URL"])["dbname"]
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(psycopg.conninfo.make_conninfo(mine["DATABASE_URL"], dbname=their_db))
    key = f"{theirs['TEAMDESK_QUEUE_PREFIX']}:confinement-probe"
    owner = redis.Redis.from_url(theirs["REDIS_URL"])
    intruder = redis.Redis.from_url(mine["REDIS_URL"])
    try:
        owner.set(key, "theirs")
        for attempt in (lambda: intruder.get(key), lambda: intruder.delete(key),
                        lambda: intruder.flushall()):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
        assert owner.get(key) == b"theirs", f"{me} changed {classmate}'s key"
    finally:
        owner.delete(key)
        owner.close()
        intruder.close()
