"""The lab's Jupyter settings (`devkit.jupyter_settings`): one config file that every way in
loads — `teamdesk lab`, a hub's single-user server, a plain `jupyter lab` — and what it
sets in each case."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from traitlets.config import Config, PyFileConfigLoader

from devkit.i18n import LOCALES
from devkit.jupyter_settings import (
    EDITIONS_CONFIG_DIR,
    HUB_KERNEL_IDLE_TIMEOUT_S,
    LAB_CONFIG_DIR,
    LAB_HIDDEN_FILES,
    configure,
    edition_config_dir,
    lab_hide_globs,
    use_edition_locale,
)

ON_HUB = {"JUPYTERHUB_SERVICE_PREFIX": "/user/ana/"}


def _configured(environ: dict[str, str]) -> Config:
    c = Config()
    configure(c, {"LANG": "en_US.UTF-8", **environ})
    return c


def test_the_config_file_applies_the_lab_settings(monkeypatch):
    """The file Jupyter loads from the lab's config folder sets what `configure` sets, and
    puts the edition's language override on the server's config path."""
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    monkeypatch.delenv("TEAMDESK_KERNEL_IDLE_TIMEOUT", raising=False)
    monkeypatch.setenv("TEAMDESK_LAB_LANG", "zh")
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(LAB_CONFIG_DIR))  # undone after the test
    loaded = PyFileConfigLoader("jupyter_server_config.py", path=str(LAB_CONFIG_DIR)).load_config()
    assert loaded.ServerApp.contents_manager_class == "devkit.contents.LabContentsManager"
    assert loaded.ContentsManager.hide_globs == lab_hide_globs()
    assert loaded.ServerApp.default_url.endswith("/zh/00-start-here.ipynb")
    assert os.environ["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [
        str(edition_config_dir("zh")), str(LAB_CONFIG_DIR)]


def _menu_locale(environ: dict[str, str], monkeypatch, tmp_path) -> str:
    """The locale JupyterLab's settings would default to in a server whose environment is
    `environ` once the config file ran: read by jupyterlab_server's own override loader
    (the one its settings handlers use), over the config path `use_edition_locale` left."""
    from jupyterlab_server.settings_utils import _get_overrides

    use_edition_locale(environ)
    use_edition_locale(environ)  # the config file may be read twice: nothing doubles
    paths = environ["JUPYTER_CONFIG_PATH"].split(os.pathsep)
    assert len(paths) == len(set(paths))
    assert sum(Path(p).parent == EDITIONS_CONFIG_DIR for p in paths) == 1
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", environ["JUPYTER_CONFIG_PATH"])
    overrides, error = _get_overrides(str(tmp_path / "app-settings"))
    assert not error
    # The lab's other overrides stay in force beside the language.
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    return overrides["@jupyterlab/translation-extension:plugin"]["locale"]


def test_jupyterlabs_menus_speak_the_edition(monkeypatch, tmp_path):
    """The 中文 edition's JupyterLab defaults to zh_CN (the zh-CN language pack's menus), the
    English one to en — said outright, so a Chinese laptop's `--lang en` keeps English
    menus; `--lang` beats TEAMDESK_LANG, which beats the locale, as for the start page."""
    base = {"JUPYTER_CONFIG_PATH": os.pathsep.join([str(LAB_CONFIG_DIR), "/etc/mine"])}
    cases = [({"LANG": "en_US.UTF-8"}, "en"), ({"LANG": "zh_CN.UTF-8"}, "zh_CN"),
             ({"TEAMDESK_LANG": "zh", "LANG": "C"}, "zh_CN"),
             ({"TEAMDESK_LAB_LANG": "en", "LANG": "zh_CN.UTF-8"}, "en")]
    for environ, locale in cases:
        assert _menu_locale({**base, **environ}, monkeypatch, tmp_path) == locale, environ
    # A server of the other edition started from this environment: the override follows.
    env = {**base, "TEAMDESK_LAB_LANG": "zh"}
    assert _menu_locale(env, monkeypatch, tmp_path) == "zh_CN"
    env["TEAMDESK_LAB_LANG"] = "en"
    assert _menu_locale(env, monkeypatch, tmp_path) == "en"
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[1:] == [str(LAB_CONFIG_DIR), "/etc/mine"]


def test_each_editions_override_file_says_its_locale():
    """One folder per edition, each with the locale `i18n.LOCALES` names, and the
    editions are the lab's."""
    assert set(LOCALES) == {p.name for p in EDITIONS_CONFIG_DIR.iterdir()}
    for lang, locale in LOCALES.items():
        file = edition_config_dir(lang) / "labconfig" / "default_setting_overrides.json"
        assert json.loads(file.read_text()) == {
            "@jupyterlab/translation-extension:plugin": {"locale": locale}}


def test_the_start_page_is_the_learners_copy_in_their_edition():
    """`teamdesk lab --lang` (TEAMDESK_LAB_LANG) beats TEAMDESK_LANG, which beats the
    locale."""
    en, zh = "/lab/tree/my-notebooks/00-start-here.ipynb", \
        "/lab/tree/my-notebooks/zh/00-start-here.ipynb"
    assert _configured({}).ServerApp.default_url == en
    assert _configured({"LANG": "zh_CN.UTF-8"}).ServerApp.default_url == zh
    assert _configured({"TEAMDESK_LANG": "zh"}).ServerApp.default_url == zh
    assert _configured({"TEAMDESK_LANG": "zh", "TEAMDESK_LAB_LANG": "en"}
                       ).ServerApp.default_url == en


def test_harness_files_hidden_and_jupyters_defaults_kept():
    globs = _configured({}).ContentsManager.hide_globs
    assert {"__pycache__", "*.pyc", *LAB_HIDDEN_FILES} <= set(globs)
    assert len(globs) == len(set(globs))


def test_idle_kernels_are_shut_down_on_a_hub_only_unless_asked():
    """On a hub an idle kernel gives its connections back after a while, even with its
    tab open, but never while it runs; on a laptop kernels live until the lab stops."""
    assert "cull_idle_timeout" not in _configured({}).MappingKernelManager
    hub = _configured(ON_HUB).MappingKernelManager
    assert hub.cull_idle_timeout == HUB_KERNEL_IDLE_TIMEOUT_S
    assert hub.cull_interval <= hub.cull_idle_timeout
    assert hub.cull_connected is True and hub.cull_busy is False
    assert "cull_idle_timeout" not in _configured(
        {**ON_HUB, "TEAMDESK_KERNEL_IDLE_TIMEOUT": "0"}).MappingKernelManager
    short = _configured({"TEAMDESK_KERNEL_IDLE_TIMEOUT": "20"}).MappingKernelManager
    assert (short.cull_idle_timeout, short.cull_interval) == (20, 20)
    with pytest.raises(ValueError, match="TEAMDESK_KERNEL_IDLE_TIMEOUT"):
        _configured({"TEAMDESK_KERNEL_IDLE_TIMEOUT": "half an hour"})
