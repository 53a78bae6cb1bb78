"""`teamdesk lab` as a learner meets it, checked without a browser: a real JupyterLab
started by the real command on a free port (against the test's own database, so it starts
no services), asked through its REST API, then stopped with Ctrl-C (SIGINT)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from devkit.jupyter_settings import LAB_HIDDEN_FILES, lab_hide_globs, use_lab_settings

START_TIMEOUT_S = 120  # migrate + seed + JupyterLab start, on a shared 2-core machine
STOP_TIMEOUT_S = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(base: str, token: str, path: str, *, follow: bool = True) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(f"{base}{path}",
                                     headers={"Authorization": f"token {token}"})
    opener = urllib.request.build_opener(*([] if follow else [_NoRedirect()]))
    try:
        with opener.open(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_hide_globs_keep_jupyters_defaults():
    """Hiding the harness files must not un-hide what Jupyter hides by default."""
    globs = lab_hide_globs()
    assert {"__pycache__", "*.pyc", *LAB_HIDDEN_FILES} <= set(globs)
    assert len(globs) == len(set(globs))


def test_lab_settings_path_goes_first_and_keeps_the_users():
    """Our labconfig dir comes first on JUPYTER_CONFIG_PATH; one the user set stays, once."""
    env = {"JUPYTER_CONFIG_PATH": "/etc/mine"}
    use_lab_settings(env)
    use_lab_settings(env)
    first, *rest = env["JUPYTER_CONFIG_PATH"].split(os.pathsep)
    assert rest == ["/etc/mine"]
    overrides = json.loads((Path(first) / "labconfig" / "default_setting_overrides.json")
                           .read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


def test_lab_in_a_hubs_server_points_to_the_lab_it_is_in(tmp_path):
    """In a terminal of a hub's server (which serves the lab with the same settings),
    `teamdesk lab` starts nothing: a second JupyterLab on 127.0.0.1 would be out of the
    hub's reach. It says where the learner's start page is, and starts no services."""
    env = {**os.environ, "JUPYTERHUB_SERVICE_PREFIX": "/user/ana/", "TEAMDESK_LANG": "zh",
           "TEAMDESK_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "devkit.cli", "lab", "--no-browser"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert "JupyterHub" in done.stderr and "my-notebooks/zh/00-start-here.ipynb" in done.stderr
    assert not (tmp_path / "data").exists()


@pytest.fixture
def lab_server(settings, tmp_path, request):
    """(base URL, token): `teamdesk lab --port <free> --no-browser` running; at teardown
    SIGINT, then every process it started must be gone. Parametrized indirectly with
    {"env": {...}, "args": [...]}: the locale variables and extra arguments of the run
    (none of the developer's locale leaks in)."""
    options = getattr(request, "param", {})
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "REDIS_URL": settings.redis_url, "TEAMDESK_QUEUE_PREFIX": settings.queue_prefix,
           # The test's own user settings and runtime files, not the developer's.
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    env.pop("JUPYTER_CONFIG_PATH", None)
    env.pop("DISPLAY", None)
    for name in ("LC_ALL", "LC_MESSAGES", "LANG", "TEAMDESK_LANG"):
        env.pop(name, None)
    env.update(options.get("env", {}))
    out = tmp_path / "lab.out"
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "devkit.cli", "lab", "--port",
                                 str(port), "--no-browser", *options.get("args", [])],
                                env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        token = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"teamdesk lab exited:\n{out.read_text()}"
            if token is None and (m := re.search(r"[?&]token=([^\s&]+)", out.read_text())):
                token = m.group(1)
            if token is not None:
                try:
                    if _get(base, token, "/api/status")[0] == 200:
                        break
                except OSError:
                    pass
            time.sleep(0.25)
        else:
            pytest.fail(f"JupyterLab did not answer within {START_TIMEOUT_S} s:\n"
                        f"{out.read_text()}")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "teamdesk lab started no JupyterLab process"
        yield base, token
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for p in [*children, psutil.Process(proc.pid)]:
                if p.is_running():
                    p.kill()
            raise
        _, alive = psutil.wait_procs(children, timeout=STOP_TIMEOUT_S)
        assert not alive, f"still running after Ctrl-C: {alive}"
        assert code == 0, out.read_text()


def _menu_language(base: str, token: str) -> str:
    """The locale JupyterLab's front end loads its menus in: the translation setting's
    value (the test's user settings are empty, so its default: the lab's override)."""
    status, _, body = _get(base, token,
                           "/lab/api/settings/@jupyterlab/translation-extension:plugin")
    assert status == 200
    setting = json.loads(body)
    assert "locale" not in setting["settings"], "a user setting would hide the lab's default"
    return setting["schema"]["properties"]["locale"]["default"]


@pytest.mark.parametrize("lab_server", [{"env": {"LANG": "zh_CN.UTF-8"}}], indirect=True)
def test_lab_opens_start_here_without_news_prompt_or_harness_files(lab_server):
    """What a learner's browser gets from `teamdesk lab` on a machine whose locale is
    Chinese: `/` leads to the 中文 edition's 00-start-here, their own copy; the
    lab's root is the project, so the files the notebooks cite are listed (RULES.md,
    teamdesk/, labs/) but not the dot-folders; the listing of notebooks/ has the chapters
    but not the nbval harness; the
    notification settings say never fetch news (so no "official Jupyter news?" prompt)
    and never check for updates."""
    base, token = lab_server

    status, headers, _ = _get(base, token, "/", follow=False)
    assert status in (301, 302), status
    assert headers["Location"].split("?")[0].endswith(
        "/lab/tree/my-notebooks/zh/00-start-here.ipynb")
    status, _, body = _get(base, token, "/api/contents/my-notebooks/zh/00-start-here.ipynb")
    assert status == 200
    assert "你将学到" in json.dumps(json.loads(body)["content"], ensure_ascii=False)

    status, _, body = _get(base, token, "/api/contents?content=1")
    assert status == 200
    top = {item["name"] for item in json.loads(body)["content"]}
    assert {"notebooks", "my-notebooks", "RULES.md", "teamdesk", "labs", "README.md"} <= top, top
    assert not {n for n in top if n.startswith(".")}, top
    status, _, body = _get(base, token, "/api/contents/teamdesk/tasks/queries.sql?content=0")
    assert status == 200, "a file the notebooks cite is not reachable from the lab's root"

    status, _, body = _get(base, token, "/api/contents/notebooks?content=1")
    assert status == 200
    names = {item["name"] for item in json.loads(body)["content"]}
    assert {"00-start-here.ipynb", "26b-takeover-race.ipynb", "README.md"} <= names
    assert not names & set(LAB_HIDDEN_FILES), names & set(LAB_HIDDEN_FILES)
    assert all(Path(__file__).parents[2].joinpath("notebooks", n).exists()
               for n in ("conftest.py", "sanitize.cfg"))  # still there for nbval, not listed

    status, _, body = _get(base, token,
                           "/lab/api/settings/@jupyterlab/apputils-extension:notification")
    assert status == 200
    props = json.loads(body)["schema"]["properties"]
    assert props["fetchNews"]["default"] == "false"
    assert props["checkForUpdates"]["default"] is False

    # The 中文 edition's JupyterLab speaks Chinese: its menus load zh_CN, which the
    # installed language pack serves (the words of the File and Edit menus included).
    assert _menu_language(base, token) == "zh_CN"
    status, _, body = _get(base, token, "/lab/api/translations/zh_CN")
    pack = json.loads(body)
    assert status == 200 and pack["message"] == "", pack["message"]
    words = pack["data"]["jupyterlab"]  # gettext keys: context, U+0004, the English
    assert words["menu\x04File"] == ["文件"] and words["menu\x04Edit"] == ["编辑"]


def _put(base: str, token: str, path: str, model: dict) -> int:
    request = urllib.request.Request(f"{base}{path}", data=json.dumps(model).encode(),
                                     method="PUT",
                                     headers={"Authorization": f"token {token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("lab_server", [
    {"env": {"LANG": "zh_CN.UTF-8"}, "args": ["--lang", "en"]}], indirect=True)
def test_the_learner_works_in_own_copies_and_the_repository_is_read_only(lab_server):
    """What the lab serves a learner who asked for English (`--lang en` beats the Chinese
    locale): English menus; their own copies in my-notebooks/ (made on first use
    in the checkout, never overwritten; no stored output, so no answer shows before its
    cell runs), writable; the repository's notebooks/ read-only, a save refused with a
    pointer to the learner's copy, the file unchanged."""
    base, token = lab_server
    status, _, body = _get(base, token, "/api/contents/my-notebooks/26b-takeover-race.ipynb")
    assert status == 200
    mine = json.loads(body)
    assert mine["writable"] is True
    code = [c for c in mine["content"]["cells"] if c["cell_type"] == "code"]
    assert code and all(not c["outputs"] for c in code)

    repo = Path(__file__).parents[2] / "notebooks" / "26b-takeover-race.ipynb"
    before = repo.read_bytes()
    status, _, body = _get(base, token, "/api/contents/notebooks/26b-takeover-race.ipynb")
    theirs = json.loads(body)
    assert status == 200 and theirs["writable"] is False
    assert any(c.get("outputs") for c in theirs["content"]["cells"])  # a finished run
    assert _put(base, token, "/api/contents/notebooks/26b-takeover-race.ipynb",
                {"type": "notebook", "format": "json", "content": mine["content"]}) == 403
    assert repo.read_bytes() == before

    # English keeps English menus, said outright: the Chinese locale of this machine
    # (LANG) would otherwise pick the installed 中文 language pack.
    assert _menu_language(base, token) == "en"
