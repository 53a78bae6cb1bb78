"""The lab's Jupyter contents manager: the repository's notebooks open read-only.

`notebooks/*.ipynb` are CI's regression source (nbval compares their stored outputs). A
learner who ran one in the lab and saved it would dirty the checkout and change what CI
compares against. So the lab (`teamdesk lab`) serves them as not writable — JupyterLab
shows them read-only and does not autosave them — and refuses a save into `notebooks/`
with a message that points to the learner's own copy in `my-notebooks/` (`devkit.copies`).
Everything else behaves as Jupyter's default manager.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from tornado.web import HTTPError

#: The folder (relative to the lab's root) whose notebooks the lab never writes.
PROTECTED_DIR = "notebooks"
#: The edition folders inside it (`devkit.editions`), protected as well.
EDITION_DIRS = ("zh",)


def protected(path: str) -> bool:
    """Whether `path` (relative to the root, as Jupyter passes it) is a repository
    notebook: `notebooks/NAME.ipynb`, or an edition's `notebooks/zh/NAME.ipynb`."""
    parts = [p for p in path.strip("/").split("/") if p]
    return (len(parts) in (2, 3) and parts[0] == PROTECTED_DIR and parts[-1].endswith(".ipynb")
            and (len(parts) == 2 or parts[1] in EDITION_DIRS))


class LabContentsManager(AsyncLargeFileManager):
    """Jupyter's default manager, with `notebooks/*.ipynb` read-only (see the module)."""

    async def get(self, path: str, content: bool = True, type: str | None = None,
                  format: str | None = None, require_hash: bool = False) -> dict[str, Any]:
        model = await super().get(path, content=content, type=type, format=format,
                                  require_hash=require_hash)
        if protected(path):
            model["writable"] = False
        return model

    async def save(self, model: dict[str, Any], path: str = "") -> dict[str, Any]:
        if protected(path):
            mine = "my-notebooks/" + "/".join(path.strip("/").split("/")[1:])
            raise HTTPError(403, f"{path} is the repository's copy (CI checks it), so the "
                                 f"lab does not save it. Your own copy is {mine}.")
        return await super().save(model, path)

    async def rename_file(self, old_path: str, new_path: str) -> None:
        if protected(old_path) or protected(new_path):
            raise HTTPError(403, f"the lab does not rename notebooks in {PROTECTED_DIR}/")
        await super().rename_file(old_path, new_path)

    async def delete_file(self, path: str) -> None:
        if protected(path):
            raise HTTPError(403, f"the lab does not delete notebooks in {PROTECTED_DIR}/")
        await super().delete_file(path)
