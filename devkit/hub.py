"""A class on JupyterHub: what the hub does for each learner, and the learner's lab root.

The repository is installed once, in a shared place the learners may read but not write
(`/srv/teamdesk`, with its `.venv`: teamdesk, Jupyter, the kernel), and every learner's
server runs from that environment (`deploy/jupyterhub/jupyterhub_config.py`). Nobody builds
a `.venv` of their own. Each learner gets a lab root in their home, `~/teamdesk-lab/`:

    ~/teamdesk-lab/
        notebooks -> /srv/teamdesk/notebooks   the finished runs, read-only (CI's source)
        teamdesk  -> /srv/teamdesk/teamdesk    the product: the files the notebooks cite
        labs, docs, RULES.md, …  -> /srv/teamdesk/…
        my-notebooks/                          theirs: the copies they work in
        .teamdesk/                             their labs' records, private Redis servers

so `my-notebooks/` sits at the depth of `notebooks/` and a path a copy cites relative to
the root (`teamdesk/tasks/queries.sql`) resolves as in a checkout on a laptop. Jupyter
serves through the links, and `devkit.contents` still protects `notebooks/` by its path.

Two halves, each where it has to run:

- `pre_spawn(spawner)`, the hub's `pre_spawn_hook`, in the hub: provisions the learner
  (`devkit.classroom.provision`) with the instructor's administrator URLs, which stay in
  the hub's environment, and gives the learner's server their own URLs.
- `python -P -m devkit.hub` (`main`), the spawner's command, as the learner in their
  server: `prepare_root`, then `jupyterhub-singleuser`. Not in the hook: the hub runs as
  root, so what it made would not be the learner's, and on Kubernetes the learner's home
  is mounted in their pod, not in the hub's.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from devkit import copies
from devkit.jupyter_settings import LAB_HIDDEN_FILES, lab_lang, use_lab_settings

#: The checkout the shared environment was installed from (`pip install -e`).
REPO = Path(__file__).resolve().parents[1]
#: The learner's lab root, in their home (the hub's `c.Spawner.notebook_dir`).
LAB_FOLDER = "teamdesk-lab"
#: The hub's environment: an administrator's URLs of the class's PostgreSQL and Redis,
#: for provisioning. They never reach a learner's server.
ADMIN_DATABASE_URL_ENV = "TEAMDESK_ADMIN_DATABASE_URL"
ADMIN_REDIS_URL_ENV = "TEAMDESK_ADMIN_REDIS_URL"

#: `provision(admin_database_url, admin_redis_url, names) -> [learner]`; a learner's
#: `environment()` holds their DATABASE_URL, REDIS_URL and TEAMDESK_QUEUE_PREFIX.
Provision = Callable[[str, str, Sequence[str]], Sequence[Any]]


def linked_entries(repo: Path) -> list[Path]:
    """The repository's top-level entries a lab root links to: all a checkout's lab shows,
    except the dot-entries (Jupyter hides them; `.venv` is the shared environment), the
    repository's own `my-notebooks/` and build output."""
    return sorted(p for p in repo.iterdir()
                  if not p.name.startswith(".") and p.name != copies.LEARNER_DIR
                  and not any(fnmatch.fnmatch(p.name, g) for g in LAB_HIDDEN_FILES))


def _link(entry: Path, link: Path, repo: Path) -> None:
    if link.is_symlink():
        target = Path(os.readlink(link))
        if target == entry:
            return
        if not target.is_relative_to(repo):
            return  # a link the learner made: theirs
        link.unlink()  # ours, to what the entry of that name was before
    elif link.exists():
        return  # a file or folder of the learner's own with that name: theirs
    link.symlink_to(entry, target_is_directory=entry.is_dir())


def prepare_root(repo: Path, root: Path, lang: str = "en") -> copies.CopyReport:
    """Make (or bring up to date) the lab root `root` of a learner: a link to each of
    `linked_entries(repo)`, and their copies of edition `lang` in a real `my-notebooks/`
    (`devkit.copies.ensure_copies`: an existing copy is never written). Links into `repo`
    whose entry is gone are removed; nothing else of the learner's is touched."""
    repo = repo.resolve()
    root.mkdir(parents=True, exist_ok=True)
    for entry in linked_entries(repo):
        _link(entry, root / entry.name, repo)
    for link in root.iterdir():
        if (link.is_symlink() and not link.exists()
                and Path(os.readlink(link)).is_relative_to(repo)):
            link.unlink()
    return copies.ensure_copies(root, lang)


def lab_root(environ: Mapping[str, str]) -> Path:
    """The learner's lab root: the spawner's `notebook_dir` (`JUPYTERHUB_ROOT_DIR`), else
    `~/teamdesk-lab`."""
    return Path(os.path.expanduser(environ.get("JUPYTERHUB_ROOT_DIR") or f"~/{LAB_FOLDER}"))


def proxy_command(prefix: Path = Path(sys.prefix)) -> list[str]:
    """JupyterHub's proxy: the configurable-http-proxy `python3 tasklab.py` installs into
    the environment (`<venv>/proxy/`, from `deploy/jupyterhub/proxy/package-lock.json`),
    else one on PATH."""
    local = prefix / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
    return [str(local)] if local.exists() else ["configurable-http-proxy"]


def admin_urls(environ: Mapping[str, str]) -> tuple[str, str]:
    """The administrator's URLs from the hub's environment, or an error naming them."""
    urls = environ.get(ADMIN_DATABASE_URL_ENV), environ.get(ADMIN_REDIS_URL_ENV)
    if not all(urls):
        raise RuntimeError(f"the hub provisions each learner, so it needs "
                           f"{ADMIN_DATABASE_URL_ENV} and {ADMIN_REDIS_URL_ENV} (an "
                           "administrator of the class's PostgreSQL and Redis) in its "
                           "environment; see docs/classroom.md")
    return urls[0] or "", urls[1] or ""


async def pre_spawn(spawner: Any, provision: Provision | None = None) -> None:
    """The hub's `pre_spawn_hook`: provision the learner (`devkit.classroom.provision`
    unless another is given) and put their URLs and queue prefix into the environment of
    their server. Provisioning blocks on the servers, so it runs in a thread: the hub
    keeps serving the others meanwhile."""
    database_url, redis_url = admin_urls(os.environ)
    if provision is None:
        from devkit.classroom import provision
    name = spawner.user.name
    (learner,) = await asyncio.to_thread(provision, database_url, redis_url, [name])
    spawner.environment = {**spawner.environment, **learner.environment()}
    spawner.log.info("teamdesk.provisioned learner=%s", name)


def main(argv: Sequence[str]) -> NoReturn:
    """The learner's server: their lab root made or brought up to date, then
    `jupyterhub-singleuser` (with `argv`) serving it with the lab's settings."""
    if not (REPO / "notebooks").is_dir():
        sys.exit(f"devkit.hub: {REPO} is not a checkout of the lab (no notebooks/): install "
                 "the repository itself into the shared environment (pip install -e)")
    root = lab_root(os.environ)
    lang = lab_lang(os.environ)
    report = prepare_root(REPO, root, lang)
    print(copies.describe(report, root, lang), flush=True)
    os.environ["JUPYTERHUB_ROOT_DIR"] = str(root)
    # Their labs' records and private Redis servers, in their root, not the repository's.
    os.environ.setdefault("TEAMDESK_DATA_DIR", str(root / ".teamdesk"))
    use_lab_settings(os.environ)
    server = Path(sys.executable).with_name("jupyterhub-singleuser")
    os.execv(server, [str(server), *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
