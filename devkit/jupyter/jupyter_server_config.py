# The lab's Jupyter server settings (devkit.jupyter_settings), loaded by every Jupyter
# server with this folder on JUPYTER_CONFIG_PATH: `teamdesk lab`'s JupyterLab, a hub's
# jupyterhub-singleuser, a plain `jupyter lab`. Needs the environment teamdesk is
# installed in (the contents manager is ours).
import os

from devkit.jupyter_settings import configure, use_edition_locale

configure(get_config())  # noqa: F821 - Jupyter's config loader provides get_config
# JupyterLab's menus in the edition's language: its settings overrides are read from this
# process's config path once the server sets up its handlers, after this file.
use_edition_locale(os.environ)
