"""The course website's builder (`devkit.site`) without Sphinx or a kernel: links between
the course's pages, what a notebook page shows, the 中文 runs kept between builds, and
`tasklab.py site`. The real build is tests/integration/test_site.py."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

import tasklab
from devkit import site

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def where():
    return site.checkout_map(site.editions(), site.chapters())


def test_links_within_an_edition_name_the_staged_page(where):
    """The English kit's links to the rules and a chapter, written from docs/teaching/,
    become paths from the staged page (teaching/ under the site's root), as Sphinx resolves
    them (and warns on, failing the build, if wrong); the course map's stays as it is."""
    readme = ROOT / "docs" / "teaching" / "README.md"
    text = ("[`course-map.md`](course-map.md), [rules](../../RULES.md#s2) and "
            "[23](../../notebooks/23-outbox.ipynb)")
    out = site.relink(text, readme, "en", where, "teaching/README")
    assert out == ("[`course-map.md`](course-map.md), [rules](../RULES.md#s2) and "
                   "[23](../notebooks/23-outbox.ipynb)")
    rules = ROOT / "RULES.md"
    assert site.relink("[kit](docs/teaching/README.md)", rules, "en", where, "RULES") == (
        "[kit](teaching/README.md)")


def test_links_to_the_other_edition_become_urls_of_its_pages(where):
    readme = ROOT / "docs" / "teaching" / "README.md"
    out = site.relink("[`zh/course-map.md`](zh/course-map.md)", readme, "en", where,
                      "teaching/README")
    assert out == "[`zh/course-map.md`](edition:../../zh/teaching/course-map.html)"
    zh_readme = ROOT / "docs" / "teaching" / "zh" / "README.md"
    out = site.relink("[w](../workshop-half-day.md) [c](../../classroom.md)", zh_readme, "zh",
                      where, "teaching/README")
    assert out == ("[w](edition:../../en/teaching/workshop-half-day.html) "
                   "[c](edition:../../en/classroom.html)")
    assert site.relink("[English](RULES.md)", ROOT / "RULES.zh-CN.md", "zh", where,
                       "RULES") == "[English](edition:../en/RULES.html)"


def test_other_links_are_left_alone(where):
    text = "[web](https://example.org/x.md) [here](#how-to-present) ![img](pic.png) [x](nope.md)"
    assert site.relink(text, ROOT / "RULES.md", "en", where, "RULES") == text


def test_a_page_leaves_presenter_notes_out_and_folds_hidden_sources():
    nb = nbformat.read(ROOT / "notebooks" / "26b-takeover-race.ipynb", as_version=4)
    shown = site.site_notebook(nb)
    tags = [c.metadata.get("tags", []) for c in shown.cells]
    assert not any("presenter" in t for t in tags)
    assert len(shown.cells) == len(nb.cells) - sum(
        "presenter" in c.metadata.get("tags", []) for c in nb.cells)
    assert all("hide-input" in t for t in tags if "solution" in t)
    assert any("presenter" in c.metadata.get("tags", []) for c in nb.cells)  # untouched


def _fake_run(calls: list[str], fail: str | None = None):
    def executor(nb, env, cwd, log):
        name = nb.cells[0].source.splitlines()[0]
        calls.append(name)
        assert "TEAMDESK_LANG" not in env and cwd.name == "zh"  # zh by its folder
        if fail and fail in name:
            raise RuntimeError("An error occurred while executing the following cell:\n"
                               "------------------\n# step: show the board\nboard()\n"
                               "------------------\n\nTraceback …\n"
                               "AssertionError: the board is empty\n")
        _first_code(nb).outputs = [nbformat.v4.new_output("stream", text="完成\n")]
    return executor


def _first_code(nb):
    return next(c for c in nb.cells if c.cell_type == "code")


def test_a_run_is_kept_until_its_notebook_or_the_code_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("TEAMDESK_LANG", "en")  # a learner's choice is not the 中文 run's
    calls: list[str] = []
    names = ["00-start-here", "24-reminders"]
    lanes = [tmp_path / "a", tmp_path / "b"]
    args = dict(cache=tmp_path / "runs", lanes=lanes, report=lambda m: None,
                executor=_fake_run(calls), hold=lambda folder: None)
    first = site.run_zh(names, **args)
    assert sorted(first) == names and len(calls) == 2
    assert _first_code(first["24-reminders"]).outputs[0].text == "完成\n"
    again = site.run_zh(names, **args)
    assert len(calls) == 2 and _first_code(again["00-start-here"]).outputs
    monkeypatch.setattr(site, "run_inputs_digest", lambda root=ROOT: "other code")
    # `--only`: a stale run of a notebook not named is neither run nor shown.
    assert site.run_zh(names, **args, only=["00-start-here"]).keys() == {"00-start-here"}
    assert len(calls) == 3
    assert site.run_zh(names, **args, only=[]).keys() == {"00-start-here"}
    assert len(calls) == 3


def test_a_cut_write_leaves_the_kept_run_whole(tmp_path, monkeypatch):
    """A kept run is written whole or not at all: a write that fails half-way (here, text
    that cannot be encoded) leaves the last run as it was, and the next build reads it."""
    args = dict(cache=tmp_path / "runs", lanes=[tmp_path / "a"], report=lambda m: None,
                executor=_fake_run([]), hold=lambda folder: None)
    site.run_zh(["24-reminders"], **args)
    kept = tmp_path / "runs" / "24-reminders.ipynb"
    before = kept.read_bytes()
    monkeypatch.setattr(site, "run_inputs_digest", lambda root=ROOT: "other code")
    monkeypatch.setattr(nbformat, "writes", lambda nb, *a, **k: '{"cells": [\ud800')
    with pytest.raises(UnicodeEncodeError):
        site.run_zh(["24-reminders"], **args)
    monkeypatch.undo()
    assert kept.read_bytes() == before and [p.name for p in kept.parent.glob(".*")] == []
    assert site.run_zh(["24-reminders"], **args).keys() == {"24-reminders"}


def test_a_failed_run_names_the_notebook_and_the_error(tmp_path):
    with pytest.raises(site.SiteError) as err:
        site.run_zh(["24-reminders"], tmp_path / "runs", [tmp_path / "a"], lambda m: None,
                    executor=_fake_run([], fail="24"), hold=lambda folder: None)
    assert "notebooks/zh/24-reminders.ipynb failed at the cell `# step: show the board`" in (
        err.value.problem)
    assert "AssertionError: the board is empty" in err.value.problem
    assert "tasklab.py test notebooks/24-reminders.ipynb" in err.value.fix
    assert not (tmp_path / "runs" / "24-reminders.ipynb").exists()


def test_a_lane_whose_servers_fail_stops_the_other_lanes(tmp_path, monkeypatch):
    """When one lane's servers cannot start, the other lanes run no further notebook: the
    error comes out as the servers raised it, not after every remaining run. The gate: the
    healthy lane asks for its first notebook only once the failing lane has finished."""
    futures, both = [], threading.Event()

    class Pool(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            futures.append(super().submit(fn, *args, **kwargs))
            if len(futures) == 2:
                both.set()
            return futures[-1]

    def hold(folder):
        if folder.name == "b":
            raise site.services.ServiceError("the Redis server of b did not start")
        assert both.wait(30)
        futures[1].exception(timeout=30)  # lane b is over

    calls: list[str] = []
    monkeypatch.setattr(site, "ThreadPoolExecutor", Pool)
    with pytest.raises(site.services.ServiceError, match="Redis server of b"):
        site.run_zh(["00-start-here", "23-outbox", "24-reminders"], tmp_path / "runs",
                    [tmp_path / "a", tmp_path / "b"], lambda m: None,
                    executor=_fake_run(calls), hold=hold)
    assert calls == []


def test_a_lane_holds_the_servers_of_its_folder_unless_the_urls_are_set(tmp_path, monkeypatch):
    """A lane starts (or reuses) the embedded servers of its own folder, owned by the build;
    with DATABASE_URL and REDIS_URL set it starts none, as every command of the lab."""
    started = []
    monkeypatch.setattr(site.services, "ensure_services",
                        lambda **kwargs: started.append(kwargs))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    site._hold_servers(tmp_path / "a")
    assert started == [{"owner_pid": os.getpid(), "root": tmp_path / "a"}]
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:p@db/x")
    monkeypatch.setenv("REDIS_URL", "redis://cache:6379/0")
    site._hold_servers(tmp_path / "b")
    assert len(started) == 1


def test_a_failure_or_a_server_error_shows_no_password(monkeypatch, capsys):
    """S2: a 中文 run that failed on a URL with a password, and an error of the embedded
    servers, come out with the password masked."""
    err = RuntimeError("---\nbus.ping()\n---\n"
                       "ConnectionError: cannot reach redis://:hunter2@localhost:6390/0")
    failed = site._failure("24-reminders", err)
    assert "redis://:" in failed.problem and "hunter2" not in failed.problem

    def down(**kwargs):
        raise site.services.ServiceError("postgresql://lab:hunter2@localhost:5433/lab refused")
    monkeypatch.setattr(site, "build", down)
    assert site.main(["--only", "24-reminders"]) == 1
    out = capsys.readouterr().err
    assert "postgresql://lab:" in out and "hunter2" not in out


def test_only_takes_a_short_name_as_the_other_commands_do(monkeypatch):
    """`--only 23` runs 23-outbox, as `teamdesk slides 26b` and `copies --fresh 26b` read
    a chapter's number."""
    asked: list[list[str]] = []
    monkeypatch.setattr(site, "build", lambda out, run, report: asked.append(run)
                        or SimpleNamespace(unrun=[]))
    assert site.main(["--only", "23", "24-reminders.ipynb"]) == 0
    assert asked == [["23-outbox", "24-reminders"]]


def test_an_unknown_notebook_is_one_line(capsys):
    assert site.main(["--only", "99-nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("[site] error: no notebook '99-nope'")
    assert "\n[site] fix: choose one of 00, 23," in err
    assert "Traceback" not in err


def test_tasklab_site_runs_the_builder_in_the_venv(monkeypatch):
    ran: list[list[str]] = []
    monkeypatch.setattr(tasklab, "ensure_venv", lambda: None)
    monkeypatch.setattr(tasklab, "run", lambda args: ran.append(args) or 0)
    assert tasklab.main(["site", "--only", "23-outbox"]) == 0
    assert ran == [[str(tasklab.BIN / "python"), "-m", "devkit.site", "--only", "23-outbox"]]
    assert "tasklab.py site" in tasklab.__doc__


def test_a_line_break_between_chinese_characters_is_not_a_space():
    text = "把任务投进\n  投递器、\n“接手”\nWorker 和\n`code`\n```python\n# 中文\n注释\n```\n中\n文"
    assert site.join_cjk_lines(text) == (
        "把任务投进投递器、“接手”\nWorker 和\n`code`\n```python\n# 中文\n注释\n```\n中文")
