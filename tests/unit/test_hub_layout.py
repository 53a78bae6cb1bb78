"""A learner's lab root on a hub (`devkit.hub`): links to the shared repository, their own
`my-notebooks/` beside them, nothing of theirs overwritten; and the hub's hook, which puts
the provisioned learner's URLs into their server's environment."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import tasklab
from devkit import copies, hub

ROOT = Path(__file__).resolve().parents[2]


def _notebook(path: Path, text: str) -> None:
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {}, "source": text, "execution_count": 1,
         "outputs": [{"output_type": "stream", "name": "stdout", "text": "answer"}]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small checkout: two notebooks, a file they cite, and what a lab never links."""
    repo = tmp_path / "srv" / "teamdesk"
    (repo / "notebooks").mkdir(parents=True)
    _notebook(repo / "notebooks" / "00-start-here.ipynb", "print(1)")
    _notebook(repo / "notebooks" / "24-reminders.ipynb", "print(2)")
    (repo / "teamdesk" / "tasks").mkdir(parents=True)
    (repo / "teamdesk" / "tasks" / "queries.sql").write_text("-- claim --\n")
    (repo / "RULES.md").write_text("rules\n")
    for name in (".venv", ".teamdesk", "my-notebooks", "build", "x.egg-info"):
        (repo / name).mkdir()
    return repo


def test_a_lab_root_links_the_repository_and_holds_the_learners_copies(repo, tmp_path):
    root = tmp_path / "home" / "ana" / hub.LAB_FOLDER
    report = hub.prepare_root(repo, root)
    assert sorted(report.created) == ["00-start-here.ipynb", "24-reminders.ipynb"]
    assert sorted(p.name for p in root.iterdir()) == ["RULES.md", "my-notebooks", "notebooks",
                                                      "teamdesk"]
    assert (root / "notebooks").resolve() == repo / "notebooks"
    mine = root / copies.LEARNER_DIR
    assert mine.is_dir() and not mine.is_symlink()
    # A copy cites files relative to the root, one level up from its folder: as in a checkout.
    assert (mine / ".." / "teamdesk" / "tasks" / "queries.sql").read_text() == "-- claim --\n"
    copy = json.loads((mine / "24-reminders.ipynb").read_text())
    assert copy["cells"][0]["outputs"] == []


def test_a_second_start_keeps_the_learners_work_and_follows_the_repository(repo, tmp_path):
    root = tmp_path / "home" / "ana" / hub.LAB_FOLDER
    hub.prepare_root(repo, root)
    (root / copies.LEARNER_DIR / "24-reminders.ipynb").write_text("my work")
    (root / "RULES.md").unlink()
    (root / "RULES.md").write_text("my own notes\n")  # a file of theirs with that name
    (root / "elsewhere").symlink_to(tmp_path)  # a link of theirs
    (repo / "docs").mkdir()  # the repository gained an entry and lost one
    (repo / "teamdesk" / "tasks" / "queries.sql").unlink()
    (repo / "teamdesk" / "tasks").rmdir()
    (repo / "teamdesk").rmdir()
    report = hub.prepare_root(repo, root)
    assert report.created == [] and len(report.kept) == 2
    assert (root / copies.LEARNER_DIR / "24-reminders.ipynb").read_text() == "my work"
    assert (root / "RULES.md").read_text() == "my own notes\n"
    assert (root / "elsewhere").resolve() == tmp_path
    assert (root / "docs").resolve() == repo / "docs"
    assert not os.path.lexists(root / "teamdesk")


def test_the_lab_root_is_the_spawners_notebook_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub.lab_root({}) == tmp_path / hub.LAB_FOLDER
    assert hub.lab_root({"JUPYTERHUB_ROOT_DIR": "~/class"}) == tmp_path / "class"


def test_the_proxy_is_found_where_tasklab_installs_it():
    assert Path(hub.proxy_command(tasklab.VENV)[0]) in (tasklab.PROXY_BIN,
                                                         Path("configurable-http-proxy"))
    assert tasklab.needs_proxy([]) and tasklab.needs_proxy(["tests", "-n", "6"])
    assert tasklab.needs_proxy(["tests/integration/test_hub.py::test_x", "-x"])
    assert not tasklab.needs_proxy(["tests/unit", "-k", "hub"])


@dataclass
class _Learner:
    name: str
    url: str

    def environment(self) -> dict[str, str]:
        return {"DATABASE_URL": self.url, "REDIS_URL": "redis://r", "TEAMDESK_QUEUE_PREFIX":
                f"td:{self.name}"}


@dataclass
class _Spawner:
    user: object
    environment: dict[str, str] = field(default_factory=lambda: {"JUPYTER_CONFIG_PATH": "/c"})
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("hub"))


@dataclass
class _User:
    name: str


async def test_the_hook_provisions_the_learner_with_the_hubs_admin_urls(monkeypatch):
    asked: list[tuple] = []

    def provision(database_url, redis_url, names):
        asked.append((database_url, redis_url, list(names)))
        return [_Learner(n, f"postgresql://{n}@db/{n}") for n in names]

    spawner = _Spawner(_User("ana"))
    monkeypatch.delenv(hub.ADMIN_REDIS_URL_ENV, raising=False)
    monkeypatch.setenv(hub.ADMIN_DATABASE_URL_ENV, "postgresql://admin@db/postgres")
    with pytest.raises(RuntimeError, match=hub.ADMIN_REDIS_URL_ENV):
        await hub.pre_spawn(spawner, provision)
    monkeypatch.setenv(hub.ADMIN_REDIS_URL_ENV, "redis://admin@r")
    await hub.pre_spawn(spawner, provision)
    assert asked == [("postgresql://admin@db/postgres", "redis://admin@r", ["ana"])]
    assert spawner.environment == {"JUPYTER_CONFIG_PATH": "/c",
                                   "DATABASE_URL": "postgresql://ana@db/ana",
                                   "REDIS_URL": "redis://r", "TEAMDESK_QUEUE_PREFIX": "td:ana"}
