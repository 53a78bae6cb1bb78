"""A notebook's cells as the dev tools read them: nbformat's JSON as it is stored (no
validation, no upgrade — a tool that needs a `NotebookNode` reads with nbformat itself),
each cell's source as one text, its tags, and the fenced code blocks of Markdown (a cell's,
or a page's).

The editions, the minutes, the rules' citations, the slides and the learner copies read
notebooks this way, and so do the tests that look inside them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: A fenced code block in Markdown: ``` or ~~~, up to the same fence on a line of its own.
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)


def read(path: Path) -> dict[str, Any]:
    """The notebook JSON stored in `path`."""
    return json.loads(path.read_text(encoding="utf-8"))


def cells(path: Path) -> list[dict[str, Any]]:
    """The cells of the notebook stored in `path`, in order."""
    return read(path).get("cells", [])


def source(cell: dict[str, Any]) -> str:
    """A cell's source as one text: nbformat stores it as a string or as a list of lines,
    and Jupyter may save either."""
    src = cell.get("source", "")
    return src if isinstance(src, str) else "".join(src)


def tags(cell: dict[str, Any]) -> list[str]:
    """A cell's tags (none when its metadata has no `tags`)."""
    return cell.get("metadata", {}).get("tags", [])
