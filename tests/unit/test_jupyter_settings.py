"""The lab's Jupyter settings (`devkit.jupyter_settings`): one config file that every way in
loads — `teamdesk lab`, a hub's single-user server, a plain `jupyter lab` — and what it
sets in each case."""

from __future__ import annotations

import pytest
from traitlets.config import Config, PyFileConfigLoader

from devkit.jupyter_settings import (
    HUB_KERNEL_IDLE_TIMEOUT_S,
    LAB_CONFIG_DIR,
    LAB_HIDDEN_FILES,
    configure,
    lab_hide_globs,
)

ON_HUB = {"JUPYTERHUB_SERVICE_PREFIX": "/user/ana/"}


def _configured(environ: dict[str, str]) -> Config:
    c = Config()
    configure(c, {"LANG": "en_US.UTF-8", **environ})
    return c


def test_the_config_file_applies_the_lab_settings(monkeypatch):
    """The file Jupyter loads from the lab's config folder sets what `configure` sets."""
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    monkeypatch.delenv("TEAMDESK_KERNEL_IDLE_TIMEOUT", raising=False)
    loaded = PyFileConfigLoader("jupyter_server_config.py", path=str(LAB_CONFIG_DIR)).load_config()
    assert loaded.ServerApp.contents_manager_class == "devkit.contents.LabContentsManager"
    assert loaded.ContentsManager.hide_globs == lab_hide_globs()
    assert loaded.ServerApp.default_url.endswith("/00-start-here.ipynb")


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
