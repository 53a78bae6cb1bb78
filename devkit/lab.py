"""`teamdesk lab`: the embedded services, the schema and the demo data, then JupyterLab.

JupyterLab's root is the checkout, so every file a notebook cites is one click away. It
opens on the learner's own copy of 00 (`my-notebooks/00-start-here.ipynb`, made
spoiler-free on first use by `devkit.copies`; `--fresh 26b` or `--fresh all` replaces a
copy, keeping the old one aside), serves the repository's `notebooks/` read-only
(`devkit.contents`: they are CI's regression source), shows no Jupyter news prompt (our
settings overrides in `devkit/jupyter/labconfig/`) and hides the nbval harness files. The token
goes through the environment, never argv (S1). Ctrl-C stops JupyterLab, and the command's
claim on the services ends with it (`devkit.cli`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import MutableMapping
from pathlib import Path

from devkit import copies, i18n
from teamdesk.cli import PORT, SettingsResolver, seed_team


def project_dir() -> Path:
    """The lab's root: the checkout, so every file a notebook cites (`RULES.md`,
    `teamdesk/tasks/queries.sql`, `labs/scenes/…`) is one click away in the file browser."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "notebooks").is_dir() else Path.cwd()


#: The notebook a learner's browser opens on, relative to the lab's root: their own copy.
START_NOTEBOOK = f"{copies.LEARNER_DIR}/00-start-here.ipynb"


def start_notebook(lang: str = "en") -> str:
    """`START_NOTEBOOK` of edition `lang` (`my-notebooks/zh/00-start-here.ipynb`)."""
    return START_NOTEBOOK if lang == "en" else f"{copies.LEARNER_DIR}/{lang}/00-start-here.ipynb"


#: JupyterLab settings the lab ships: `labconfig/default_setting_overrides.json` there turns
#: off the "Would you like to receive official Jupyter news?" prompt and the update check
#: (jupyterlab_server layers such files from every Jupyter config dir over the defaults).
LAB_CONFIG_DIR = Path(__file__).resolve().parent / "jupyter"

#: Files of the nbval harness that live in `notebooks/` but are not for learners, and build
#: output. Dot-folders (`.venv`, `.teamdesk`, caches) are hidden by Jupyter already.
LAB_HIDDEN_FILES: tuple[str, ...] = ("conftest.py", "sanitize.cfg", "*.egg-info", "build")


def lab_hide_globs() -> list[str]:
    """Jupyter's own hidden-file globs (`__pycache__`, `*.pyc`, …) plus the harness files.
    Extended, not replaced: setting the trait drops its defaults."""
    from jupyter_server.services.contents.manager import ContentsManager

    defaults = list(ContentsManager.class_traits()["hide_globs"].default())
    return [*defaults, *(g for g in LAB_HIDDEN_FILES if g not in defaults)]


def lab_ui_args(lang: str = "en") -> list[str]:
    """What a learner first sees: their copy of 00-start-here open (in edition `lang`), the
    repository's notebooks read-only, the harness files not listed."""
    return [f"--LabApp.default_url=/lab/tree/{start_notebook(lang)}",
            "--ServerApp.contents_manager_class=devkit.contents.LabContentsManager",
            *(f"--ContentsManager.hide_globs={g}" for g in lab_hide_globs())]


def use_lab_settings(environ: MutableMapping[str, str]) -> None:
    """Put `LAB_CONFIG_DIR` first on `JUPYTER_CONFIG_PATH`, so JupyterLab (our child)
    applies our settings overrides, and no news prompt appears. A path the user already
    set is kept after ours; nothing is written outside the project."""
    paths = [str(LAB_CONFIG_DIR), *filter(None, environ.get(
        "JUPYTER_CONFIG_PATH", "").split(os.pathsep))]
    environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(dict.fromkeys(paths))


def cmd_lab(args: argparse.Namespace, resolve: SettingsResolver) -> int:
    """`teamdesk lab`: services + schema + demo data, then JupyterLab until Ctrl-C."""
    from teamdesk.db.migrate import upgrade

    root = project_dir()
    lang = args.lang or i18n.system_lang()
    # The learner's copies first: a misspelt --fresh name fails before anything starts.
    report = (copies.fresh_copies(root, args.fresh, lang) if args.fresh
              else copies.ensure_copies(root, lang))
    print(copies.describe(report, root, lang))
    print("starting services (embedded PostgreSQL + Redis unless DATABASE_URL/REDIS_URL set)…")
    settings = resolve()
    upgrade(settings.database_url)
    print(asyncio.run(seed_team(settings, "acme", 300, 23)))
    port = str(args.port or os.environ.get("TEAMDESK_LAB_PORT") or 8888)
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    cmd = [jupyter, "lab", f"--ServerApp.root_dir={root}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", *lab_ui_args(lang)]
    use_lab_settings(os.environ)
    if args.no_browser or not os.environ.get("DISPLAY"):
        cmd.append("--no-browser")
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    # S1: the token goes through the environment (JUPYTER_TOKEN), not argv, which `ps`
    # shows to every local account.
    token = secrets.token_hex(16)
    mine = copies.learner_dir(root, lang).relative_to(root)
    other = "en" if lang == "zh" else "zh"
    edition = i18n.say("lab.edition", "English", lang=lang)  # the edition in its own words
    print(f"lab root {root}: your notebooks ({edition}) are "
          f"in {mine}/ (yours to edit); notebooks/ shows a finished run, read-only; "
          f"--lang {other} opens the other edition")
    print(f"open http://127.0.0.1:{port}/lab/tree/{start_notebook(lang)}?token={token}")
    print("Ctrl-C stops JupyterLab and releases the services")

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGINT even if our parent started us with it ignored; SIGTERM from a supervisor.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    # Own session: Ctrl-C reaches only us, and we stop Jupyter without its y/n prompt.
    proc = subprocess.Popen(cmd, start_new_session=True,
                            env={**os.environ, "JUPYTER_TOKEN": token})
    try:
        return proc.wait()
    except KeyboardInterrupt:
        print("\nstopping JupyterLab…")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0


def add_lab(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = sub.add_parser("lab", help="open the notebooks in JupyterLab")
    lab.add_argument("--port", type=PORT, help="default $TEAMDESK_LAB_PORT or 8888")
    lab.add_argument("--no-browser", action="store_true")
    lab.add_argument("--fresh", nargs="+", metavar="NOTEBOOK",
                     help="replace your copy of these notebooks (e.g. 26b, or all) with a "
                          f"fresh one; the old copy goes to {copies.LEARNER_DIR}/"
                          f"{copies.REPLACED_DIR}/")
    lab.add_argument("--lang", choices=i18n.LANGS,
                     help="the edition to open: zh (中文) or en; default from the system "
                          "locale (zh* → zh)")
    lab.set_defaults(func=cmd_lab)
