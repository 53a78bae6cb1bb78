"""JupyterHub for a class on one machine: every learner's lab served by the hub itself.

Once, as root, on the machine (Linux; the learners are its system accounts):

    git clone <this repository> /srv/teamdesk && cd /srv/teamdesk
    python3 tasklab.py hub          # builds .venv (with the hub) and the proxy, then runs
                                    # jupyterhub -f deploy/jupyterhub/jupyterhub_config.py

with, in the hub's environment, an administrator's URLs of the class's PostgreSQL and Redis
(`TEAMDESK_ADMIN_DATABASE_URL`, `TEAMDESK_ADMIN_REDIS_URL`: the hub provisions each learner
with them, and they never reach a learner's server). The repository and its `.venv` are
shared and read-only to the learners; nobody builds an environment of their own. Each
learner's server runs `python -P -m devkit.hub`: it makes their lab root `~/teamdesk-lab/`
(links to the repository, their own `my-notebooks/`; `devkit.hub`) and serves it with the
lab's Jupyter settings (`devkit/jupyter/`, the same as `teamdesk lab`'s).

Settings read from the hub's environment (all optional except the two URLs):

- `TEAMDESK_HUB_URL`: where the hub listens (default `http://:8000`; put TLS in front).
- `TEAMDESK_HUB_GROUP`: the system group whose members may log in (default `learners`);
  `TEAMDESK_HUB_ADMINS`: comma-separated instructors' accounts.
- `TEAMDESK_LANG`: `zh` or `en` for the whole class (default: the hub's locale).
- `TEAMDESK_SERVER_IDLE_TIMEOUT`: seconds before the idle culler stops a server no one
  uses (default 3600); a server's idle kernels stop earlier (`devkit.jupyter_settings`).
- `TEAMDESK_HUB_STATE`: the hub's own state (its sqlite database, cookie secret), default
  `<repository>/.hub/`. That is JupyterHub's bookkeeping, not the lab's ledger.

`tests/integration/test_hub.py` runs this file with a real hub, overriding only what a test
must (ports, test accounts, paths). Kubernetes: `z2jh-values.yaml` beside this file.
"""

import os
import sys
from pathlib import Path

from devkit import hub
from devkit.jupyter_settings import LAB_CONFIG_DIR

c = get_config()  # noqa: F821 - Jupyter's config loader provides get_config

# Without them every spawn would fail: refuse to start instead, naming them.
hub.admin_urls(os.environ)

#: The shared environment: the hub runs from it, and so does every learner's server.
BIN = Path(sys.executable).parent
STATE = Path(os.environ.get("TEAMDESK_HUB_STATE") or hub.REPO / ".hub")
STATE.mkdir(mode=0o700, parents=True, exist_ok=True)
SERVER_IDLE_TIMEOUT_S = int(os.environ.get("TEAMDESK_SERVER_IDLE_TIMEOUT") or 3600)

c.JupyterHub.bind_url = os.environ.get("TEAMDESK_HUB_URL") or "http://:8000"
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.command = hub.proxy_command()
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")

# Who may log in: the system accounts of one group (PAM, JupyterHub's default).
c.JupyterHub.authenticator_class = "pam"
c.LocalAuthenticator.allowed_groups = {os.environ.get("TEAMDESK_HUB_GROUP") or "learners"}
c.Authenticator.admin_users = set(filter(None, os.environ.get(
    "TEAMDESK_HUB_ADMINS", "").split(",")))

# Each learner's server: a process of their own account (LocalProcessSpawner), from the
# shared environment, serving their lab root. Its start page comes from the lab's settings
# (the learner's copy of 00 in their edition), so no c.Spawner.default_url here: the
# server's own setting would win over it anyway.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(BIN / "python"), "-P", "-m", "devkit.hub"]
c.Spawner.notebook_dir = f"~/{hub.LAB_FOLDER}"
c.Spawner.env_keep = ["JUPYTERHUB_SINGLEUSER_APP", "LANG", "LC_ALL", "TEAMDESK_LANG"]
c.Spawner.environment = {
    "PATH": os.pathsep.join([str(BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
    "JUPYTER_CONFIG_PATH": str(LAB_CONFIG_DIR),
}
# Provisioning the learner (a role, a database, a Redis user) on the class's servers.
c.Spawner.pre_spawn_hook = hub.pre_spawn
# A busy 2-core machine starting several servers at once is slower than a laptop.
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 90

# Servers nobody uses are stopped, so their kernels give their connections back.
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [str(BIN / "python"), "-m", "jupyterhub_idle_culler",
                f"--timeout={SERVER_IDLE_TIMEOUT_S}", "--cull-every=300"],
}]
c.JupyterHub.load_roles = [{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}]
