"""`teamdesk lab`: the embedded services, the schema and the demo data, then JupyterLab.

JupyterLab's root is the checkout, so every file a notebook cites is one click away. It
opens on the learner's own copy of 00 (`my-notebooks/00-start-here.ipynb`, made
spoiler-free on first use by `devkit.copies`; `--fresh 26b` or `--fresh all` replaces a
copy, keeping the old one aside), serves the repository's `notebooks/` read-only
(`devkit.contents`: they are CI's regression source), shows no Jupyter news prompt and
hides the nbval harness files: the lab's Jupyter settings, which live in a config folder
every way in loads (`devkit.jupyter_settings`), a hub's servers too. Its command line holds
only this run's own: port, address, root, browser; the token goes through the
environment, never argv (S1). Ctrl-C stops JupyterLab, and the command's
claim on the services ends with it (`devkit.cli`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from devkit import copies, i18n
from devkit.jupyter_settings import LAB_LANG_ENV, lab_lang, on_hub, start_notebook, use_lab_settings
from teamdesk.cli import PORT, SettingsResolver, seed_team


def project_dir() -> Path:
    """The lab's root: the checkout, so every file a notebook cites (`RULES.md`,
    `teamdesk/tasks/queries.sql`, `labs/scenes/…`) is one click away in the file browser."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "notebooks").is_dir() else Path.cwd()


#: The default port, and how many after it the lab tries when it is taken.
DEFAULT_PORT = 8888
SPARE_PORTS = 10


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether JupyterLab could listen on `port` now (a bind, then let go at once)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(given: int | None, free: Callable[[int], bool] = port_free) -> int:
    """The port to serve on, known before the link is printed: a port the learner gave
    (`--port`, `TEAMDESK_LAB_PORT`) must be free, or the lab stops with what to do; the
    default 8888 gives way to the next free one, so a Jupyter already on 8888 never gets
    the link meant for this lab."""
    if given is not None:
        if not free(given):
            raise SystemExit(f"teamdesk lab: port {given} is in use (another Jupyter?): stop "
                             "what listens there, or choose another with --port")
        return given
    for port in range(DEFAULT_PORT, DEFAULT_PORT + SPARE_PORTS):
        if free(port):
            return port
    raise SystemExit(f"teamdesk lab: ports {DEFAULT_PORT}–{DEFAULT_PORT + SPARE_PORTS - 1} "
                     "are all in use: choose a free one with --port")


def opens_browser(no_browser: bool, environ: Mapping[str, str],
                  platform: str = sys.platform) -> bool:
    """Whether JupyterLab should open the learner's browser: on macOS and Windows always
    (no DISPLAY there), in WSL (its browser is Windows'), on a Linux desktop (X11 or
    Wayland); never with --no-browser, over SSH without a display, or in a container."""
    if no_browser:
        return False
    if platform == "darwin" or platform.startswith("win"):
        return True
    return any(environ.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "WSL_DISTRO_NAME"))


def cmd_lab(args: argparse.Namespace, resolve: SettingsResolver) -> int:
    """`teamdesk lab`: services + schema + demo data, then JupyterLab until Ctrl-C."""
    from teamdesk.db.migrate import upgrade

    if on_hub(os.environ):
        # A terminal of a hub's server: that server is the lab already (it loads the same
        # settings), and a second one on 127.0.0.1 would be out of the hub's reach.
        print("teamdesk lab: this is a JupyterHub server, which is the lab already: open "
              f"{start_notebook(lab_lang(os.environ))} in its file browser", file=sys.stderr)
        return 2
    root = project_dir()
    lang = args.lang or lab_lang(os.environ)
    given = args.port or os.environ.get("TEAMDESK_LAB_PORT")
    if given and not (str(given).isdigit() and 0 < int(given) < 65536):
        raise SystemExit(f"teamdesk lab: TEAMDESK_LAB_PORT must be a port number "
                         f"(1-65535), not {given!r}")
    # Before anything starts: a port in use fails at once, not after the services.
    port = str(choose_port(int(given) if given else None))
    # The learner's copies first: a misspelt --fresh name fails before anything starts.
    _make_copies(root, args, lang)
    print("starting services (embedded PostgreSQL + Redis unless DATABASE_URL/REDIS_URL set)…")
    settings = resolve()
    upgrade(settings.database_url)
    print(asyncio.run(seed_team(settings, "acme", 300, 23)))
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    # Only what is this run's own goes on the command line; the lab's settings (start
    # page, read-only notebooks, hidden files) come from its config folder, the same for a
    # hub's servers (devkit.jupyter_settings).
    cmd = [jupyter, "lab", f"--ServerApp.root_dir={root}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    use_lab_settings(os.environ)
    if not opens_browser(args.no_browser, os.environ):
        cmd.append("--no-browser")
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    # S1: the token goes through the environment (JUPYTER_TOKEN), not argv, which `ps`
    # shows to every local account.
    token = secrets.token_hex(16)
    other = "en" if lang == "zh" else "zh"
    edition = i18n.say("lab.edition", "English", lang=lang)  # the edition in its own words
    print(f"lab root {root} ({edition}); --lang {other} opens the other edition")
    print(f"open http://127.0.0.1:{port}/lab/tree/{start_notebook(lang)}?token={token}")
    print("Ctrl-C stops JupyterLab and releases the services")

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGINT even if our parent started us with it ignored; SIGTERM from a supervisor.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    # Own session: Ctrl-C reaches only us, and we stop Jupyter without its y/n prompt.
    proc = subprocess.Popen(cmd, start_new_session=True,
                            env={**os.environ, "JUPYTER_TOKEN": token, LAB_LANG_ENV: lang})
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


def cmd_copies(args: argparse.Namespace, resolve: SettingsResolver) -> int:
    """`teamdesk copies`: the learner's copies (`devkit.copies`), made or brought up to
    date exactly as `teamdesk lab` does first, without starting any service or JupyterLab:
    for a learner who works in VS Code or another Jupyter (where `notebooks/` must stay
    untouched: the workspace marks it read-only, `.vscode/settings.json`)."""
    root = Path(args.root).resolve() if args.root else project_dir()
    if not (root / "notebooks").is_dir():
        raise ValueError(f"{root} has no notebooks/ folder: give the lab's root with --root")
    _make_copies(root, args, args.lang or lab_lang(os.environ))
    return 0


def _make_copies(root: Path, args: argparse.Namespace, lang: str) -> None:
    """The learner's copies of edition `lang` in `root`: the `--fresh` ones made anew, else
    all made or brought up to date; then what was done and where they are, in `lang`. The
    first step of `teamdesk lab` and all of `teamdesk copies`."""
    report = (copies.fresh_copies(root, args.fresh, lang) if args.fresh
              else copies.ensure_copies(root, lang))
    print(copies.describe(report, root, lang))
    print(i18n.say("lab.copies.where", "work in {where}/ (yours to edit); notebooks/ holds a "
                   "finished run and is CI's, read-only", lang=lang,
                   where=copies.learner_dir(root, lang).relative_to(root)))


def _add_copies_args(parser: argparse.ArgumentParser, edition: str) -> None:
    """`--fresh` and `--lang`, the same for `teamdesk copies` and `teamdesk lab` (the lab
    makes the same copies before it opens them)."""
    parser.add_argument("--fresh", nargs="+", metavar="NOTEBOOK",
                        help="replace your copy of these notebooks (e.g. 26b, or all) with a "
                             f"fresh one; the old copy goes to {copies.LEARNER_DIR}/"
                             f"{copies.REPLACED_DIR}/")
    parser.add_argument("--lang", choices=i18n.LANGS,
                        help=f"{edition}; default $TEAMDESK_LANG, else from the system locale "
                             "(zh* → zh)")


def add_copies(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("copies", help="make your own copies of the notebooks (my-notebooks/) "
                       "without starting JupyterLab")
    _add_copies_args(c, "the edition: zh (中文, my-notebooks/zh/) or en")
    c.add_argument("--root", help="the lab's root, holding notebooks/ (default: this checkout)")
    c.set_defaults(func=cmd_copies)


def add_lab(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = sub.add_parser("lab", help="open the notebooks in JupyterLab")
    lab.add_argument("--port", type=PORT,
                     help="default $TEAMDESK_LAB_PORT, else 8888 or the next free port after it")
    lab.add_argument("--no-browser", action="store_true")
    _add_copies_args(lab, "the edition to open: zh (中文) or en")
    lab.set_defaults(func=cmd_lab)
