"""Working without the lab: a learner in VS Code (or another Jupyter) gets the same two
rooms as in `teamdesk lab` — the repository's `notebooks/` read-only (CI compares every
stored output), their own copies in `my-notebooks/` made by `teamdesk copies`, which
starts no service and no JupyterLab."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from devkit import cli, copies, notebook_cells

ROOT = Path(__file__).resolve().parents[2]


def _jsonc(text: str) -> dict:
    """VS Code's settings are JSON with `//` comment lines."""
    return json.loads("\n".join(line for line in text.splitlines()
                                if not line.lstrip().startswith("//")))


def _vscode_glob(pattern: str) -> re.Pattern[str]:
    """A workspace-relative VS Code glob as a regex: `**` any number of folders, `*` and
    `?` within one name."""
    out = ""
    for part in re.split(r"(\*\*/?|\*|\?)", pattern):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
            part, re.escape(part))
    return re.compile(out)


def _read_only_in_vscode(path: str) -> bool:
    settings = _jsonc((ROOT / ".vscode" / "settings.json").read_text(encoding="utf-8"))
    globs = [g for g, on in settings["files.readonlyInclude"].items() if on]
    return any(_vscode_glob(g).fullmatch(path) for g in globs)


def test_vscode_opens_every_repository_notebook_read_only_and_the_copies_writable():
    """`files.readonlyInclude` covers every file under notebooks/ — both editions, the
    catalogues — and none of the learner's copies, in either edition."""
    # The files on disk, not `git ls-files`: CI's second Python runs in a copy without .git.
    tracked = [p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").rglob("*")
               if p.is_file()]
    assert any(p.startswith("notebooks/zh/") for p in tracked) and len(tracked) > 20
    assert all(_read_only_in_vscode(p) for p in tracked), [
        p for p in tracked if not _read_only_in_vscode(p)]
    for mine in ("my-notebooks/26b-takeover-race.ipynb", "my-notebooks/zh/00-start-here.ipynb",
                 "README.md", "labs/lab.py"):
        assert not _read_only_in_vscode(mine), mine


def test_the_glob_reading_tells_one_folder_from_all():
    """The check above can fail: `notebooks/*` would leave the 中文 edition writable."""
    assert _vscode_glob("notebooks/*").fullmatch("notebooks/23-outbox.ipynb")
    assert not _vscode_glob("notebooks/*").fullmatch("notebooks/zh/23-outbox.ipynb")
    assert _vscode_glob("notebooks/**").fullmatch("notebooks/zh/23-outbox.ipynb")
    assert not _vscode_glob("notebooks/**").fullmatch("my-notebooks/zh/23-outbox.ipynb")


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks",
                    ignore=shutil.ignore_patterns("*.py", "*.cfg", "*.md"))
    # No service may start: a data folder here would show one did.
    monkeypatch.setenv("TEAMDESK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    return tmp_path


def test_copies_makes_the_learners_copies_without_services(project: Path, capsys):
    """`teamdesk copies --lang zh`: the 中文 copies in my-notebooks/zh/, the report in
    Chinese with where to work; `--lang en`: the English copies, no output stored in any
    (their sources store them); no service started, nothing written into notebooks/."""
    before = {p: p.read_bytes() for p in (project / "notebooks").rglob("*") if p.is_file()}
    assert cli.main(["copies", "--root", str(project), "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    made = sorted(p.name for p in (project / "my-notebooks" / "zh").glob("*.ipynb"))
    assert made == [s.name for s in copies.source_notebooks(project, "zh")] and len(made) == 11
    assert "my-notebooks/zh/" in out and "副本" in out, out
    assert cli.main(["copies", "--root", str(project), "--lang", "en"]) == 0
    stored = [s.name for s in copies.source_notebooks(project)
              if any(c.get("outputs") for c in notebook_cells.cells(s))]
    assert len(stored) >= 10, stored  # else the check below could not fail
    for name in stored:
        cells = notebook_cells.cells(project / "my-notebooks" / name)
        assert not any(c.get("outputs") for c in cells), name
    assert not (project / "data").exists()
    assert before == {p: p.read_bytes() for p in (project / "notebooks").rglob("*")
                      if p.is_file()}


def test_copies_fresh_puts_the_old_copy_aside(project: Path, capsys):
    """`--fresh 26b` as in `teamdesk lab`: the edited copy goes to .replaced/, a new one
    is made; a misspelt name is one line and exit 2, before anything is written."""
    assert cli.main(["copies", "--root", str(project), "--lang", "en"]) == 0
    mine = project / "my-notebooks" / "26b-takeover-race.ipynb"
    nb = json.loads(mine.read_text())
    nb["cells"][0]["source"] = "my notes"
    mine.write_text(json.dumps(nb))
    capsys.readouterr()
    assert cli.main(["copies", "--root", str(project), "--lang", "en", "--fresh", "26b"]) == 0
    assert "my notes" not in mine.read_text()
    aside = list((project / "my-notebooks" / copies.REPLACED_DIR).glob("26b-*"))
    assert len(aside) == 1 and "my notes" in aside[0].read_text()
    assert cli.main(["copies", "--root", str(project), "--fresh", "26z"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no notebook '26z'" in err and "Traceback" not in err


def test_copies_refuses_a_root_without_notebooks(tmp_path: Path, capsys):
    assert cli.main(["copies", "--root", str(tmp_path)]) == 2
    assert "has no notebooks/ folder" in capsys.readouterr().err
    assert not (tmp_path / "my-notebooks").exists()
