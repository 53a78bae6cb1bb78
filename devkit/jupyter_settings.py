"""The lab's Jupyter server settings: one set, for every way in.

`devkit/jupyter/jupyter_server_config.py` applies them (`configure`) in every Jupyter
server that has `devkit/jupyter/` on its `JUPYTER_CONFIG_PATH` (`use_lab_settings`):

- the JupyterLab that `teamdesk lab` starts on a laptop (`devkit.lab`);
- a class's JupyterHub single-user server, `jupyterhub-singleuser` (`devkit.hub`,
  `deploy/jupyterhub/`), so a hub serves the lab itself and never starts a nested one;
- a plain `jupyter lab` or `jupyter server` started with that config path.

What they set: the repository's notebooks read-only (`devkit.contents`), the nbval harness
files not listed, the learner's copy of 00 as the start page in the edition they read,
JupyterLab's own menus in that edition's language (`use_edition_locale`), and, on a hub,
idle kernels shut down so their database connections go back to the class's server. What
differs per invocation — port, address, root folder, browser, token — stays with whoever
starts the server. The same folder holds JupyterLab's settings overrides (`labconfig/`: no
"official Jupyter news?" prompt, no update check), and one folder per edition holds the
language override (`editions/zh/labconfig/`: 中文 menus from the zh-CN language pack).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from devkit import copies, i18n

#: The Jupyter config folder of the lab: `jupyter_server_config.py` and `labconfig/`.
LAB_CONFIG_DIR = Path(__file__).resolve().parent / "jupyter"

#: The notebook a learner's browser opens on, relative to the lab's root: their own copy.
START_NOTEBOOK = f"{copies.LEARNER_DIR}/00-start-here.ipynb"

#: Files of the nbval harness that live in `notebooks/` but are not for learners, and build
#: output. Dot-folders (`.venv`, `.teamdesk`, caches) are hidden by Jupyter already.
LAB_HIDDEN_FILES: tuple[str, ...] = ("conftest.py", "sanitize.cfg", "*.egg-info", "build")

#: The edition the lab opens on (`en`, `zh`): what `teamdesk lab --lang` chose. Only the
#: start page reads it; the kernels keep choosing their words by the notebook's folder.
LAB_LANG_ENV = "TEAMDESK_LAB_LANG"

#: On a hub, a kernel idle this long (s) is shut down, with its notebook open in a tab or
#: not: the lab it opened holds several PostgreSQL connections to the class's one server
#: (docs/classroom.md budgets 10 per open notebook). A learner back from a break re-runs
#: the notebook from the top, which every notebook is written for (a fresh world each time).
#: `TEAMDESK_KERNEL_IDLE_TIMEOUT` (s, 0 = never) overrides it, on a laptop too.
HUB_KERNEL_IDLE_TIMEOUT_S = 30 * 60
KERNEL_IDLE_TIMEOUT_ENV = "TEAMDESK_KERNEL_IDLE_TIMEOUT"
#: How often (s) the server looks for idle kernels.
KERNEL_CULL_INTERVAL_S = 60


def start_notebook(lang: str = "en") -> str:
    """`START_NOTEBOOK` of edition `lang` (`my-notebooks/zh/00-start-here.ipynb`)."""
    return START_NOTEBOOK if lang == "en" else f"{copies.LEARNER_DIR}/{lang}/00-start-here.ipynb"


def lab_lang(environ: Mapping[str, str]) -> str:
    """The edition the lab opens on: `TEAMDESK_LAB_LANG` (`teamdesk lab --lang`), else
    `TEAMDESK_LANG` (a learner's or a hub's choice for everything), else the system
    locale's (`devkit.i18n.system_lang`)."""
    for name in (LAB_LANG_ENV, "TEAMDESK_LANG"):
        if environ.get(name) in i18n.LANGS:
            return environ[name]
    return i18n.system_lang(environ)


def on_hub(environ: Mapping[str, str]) -> bool:
    """Whether this is a JupyterHub single-user server (its spawner sets the prefix)."""
    return bool(environ.get("JUPYTERHUB_SERVICE_PREFIX"))


def kernel_idle_timeout(environ: Mapping[str, str]) -> int:
    """Seconds an idle kernel lives (0 = for ever): `TEAMDESK_KERNEL_IDLE_TIMEOUT`, else
    `HUB_KERNEL_IDLE_TIMEOUT_S` on a hub, else 0 (a laptop's lab uses its own servers)."""
    value = environ.get(KERNEL_IDLE_TIMEOUT_ENV, "").strip()
    if not value:
        return HUB_KERNEL_IDLE_TIMEOUT_S if on_hub(environ) else 0
    if not value.isdigit():
        raise ValueError(f"{KERNEL_IDLE_TIMEOUT_ENV}={value!r} must be a whole number of "
                         "seconds (0: never shut an idle kernel down)")
    return int(value)


def lab_hide_globs() -> list[str]:
    """Jupyter's own hidden-file globs (`__pycache__`, `*.pyc`, …) plus the harness files.
    Extended, not replaced: setting the trait drops its defaults."""
    from jupyter_server.services.contents.manager import ContentsManager

    defaults = list(ContentsManager.class_traits()["hide_globs"].default())
    return [*defaults, *(g for g in LAB_HIDDEN_FILES if g not in defaults)]


def configure(c: Any, environ: Mapping[str, str] = os.environ) -> None:
    """Apply the lab's settings to Jupyter config `c` (what `get_config()` returns in a
    config file). The start page twice: `jupyter lab` redirects `/` to JupyterLab's own
    setting, a hub's single-user server to the server's."""
    c.ServerApp.contents_manager_class = "devkit.contents.LabContentsManager"
    c.ContentsManager.hide_globs = lab_hide_globs()
    c.ServerApp.default_url = c.LabApp.default_url = (
        f"/lab/tree/{start_notebook(lab_lang(environ))}")
    timeout = kernel_idle_timeout(environ)
    if timeout:
        c.MappingKernelManager.cull_idle_timeout = timeout
        c.MappingKernelManager.cull_interval = min(KERNEL_CULL_INTERVAL_S, timeout)
        c.MappingKernelManager.cull_connected = True  # an open tab is not a learner
        c.MappingKernelManager.cull_busy = False  # a long chaos run is not idle


#: One Jupyter config folder per edition, holding only its `labconfig/` language override:
#: the `locale` of JupyterLab's `@jupyterlab/translation-extension:plugin` setting, the
#: edition's `i18n.LOCALES` (the 中文 one needs the `jupyterlab-language-pack-zh-CN`
#: package, in the `lab` extra). English is said outright, not left at JupyterLab's
#: "default", which follows the server's system locale: a Chinese laptop's `--lang en` lab
#: would otherwise show Chinese menus.
EDITIONS_CONFIG_DIR = LAB_CONFIG_DIR / "editions"


def edition_config_dir(lang: str) -> Path:
    """The config folder whose `labconfig/default_setting_overrides.json` sets JupyterLab's
    language to edition `lang`'s (`i18n.LOCALES`)."""
    return EDITIONS_CONFIG_DIR / lang


def use_edition_locale(environ: MutableMapping[str, str]) -> None:
    """Put the lab's edition's language override (`edition_config_dir(lab_lang(environ))`)
    first on `JUPYTER_CONFIG_PATH` (another edition's taken off), so JupyterLab's menus
    speak the edition. The config file calls it in the server's own process, before
    JupyterLab reads its settings overrides from the config path — which happens once,
    when its handlers are set up. An override is a default: a language the
    learner picks in *Settings → Language* (their user settings) still wins. Nothing is
    written outside the project."""
    lang = lab_lang(environ)
    others = [p for p in environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)
              if p and Path(p).parent != EDITIONS_CONFIG_DIR]
    environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        dict.fromkeys([str(edition_config_dir(lang)), *others]))


def use_lab_settings(environ: MutableMapping[str, str]) -> None:
    """Put `LAB_CONFIG_DIR` first on `JUPYTER_CONFIG_PATH`, so a Jupyter server started
    with `environ` applies the lab's settings. A path the user already set is kept after
    ours; nothing is written outside the project."""
    paths = [str(LAB_CONFIG_DIR), *filter(None, environ.get(
        "JUPYTER_CONFIG_PATH", "").split(os.pathsep))]
    environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(dict.fromkeys(paths))
