"""nbval settings for the chapter notebooks, and the presenter's re-runs in the same kernel.

Stored outputs are compared as text; HTML (pandas' table markup churns across versions),
JavaScript and stderr are skipped. Correctness rests on each notebook's assertion cells.

Each notebook is executed in one kernel for three purposes (`python3 tasklab.py test`):

1. **Its stored outputs** (nbval): every English code cell, compared with the finished run.
2. **A cell run twice** (an instructor clicks it again): right after it, the same cell once
   more. It must not raise, unless tagged `raises-exception` as nbval allows.
3. **Run All again, in the 中文 edition**: an item of its own after the last cell (named
   `Run All again (中文)`), every code cell of
   `notebooks/zh/` (the same code by construction, `devkit.editions`) in order, in the
   same kernel, with the lab speaking Chinese (`TEAMDESK_LANG=zh`): a presenter who starts
   from the top with everything already run, and every 中文 cell — its messages, board
   and plots — run. (Not before: a 中文 cell redefines the messages later English cells
   print, e.g. `*_HOLDS`, which would change what nbval compares.)

A failure in 2 or 3 fails that cell's item and names the pass. `--nbval-no-rerun` keeps
nbval's plain single pass (e.g. to check one notebook's outputs quickly).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import IPyNbCell, find_comment_markers, find_metadata_tags

# `zh/` is executed through its English twin (above), `i18n/` holds catalogues.
collect_ignore = ["zh", "i18n"]

def pytest_addoption(parser):
    parser.addoption("--nbval-no-rerun", action="store_true",
                     help="notebooks: nbval's single pass only (no second run of each cell, "
                          "no Run All again in the 中文 edition)")


def pytest_collectstart(collector):
    if hasattr(collector, "skip_compare"):
        collector.skip_compare += ("text/html", "application/javascript", "stderr",
                                   "image/png", "application/vnd.jupyter.widget-view+json")


def _twins(path: Path) -> list[nbformat.NotebookNode]:
    """The 中文 edition's code cells, in order (the English ones where none exists)."""
    zh = path.parent / "zh" / path.name
    nb = nbformat.read(zh if zh.exists() else path, as_version=4)
    ours = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert len(cells) == sum(c.cell_type == "code" for c in ours.cells), (
        f"{path.name}: the 中文 edition's code cells are not the English ones; rebuild it "
        "(`teamdesk editions`)")
    return cells


def _set_lang(item, value: str | None) -> None:
    """Set TEAMDESK_LANG in the item's kernel (devkit.i18n reads it at each call), or
    clear it (None)."""
    code = (f"__import__('os').environ['TEAMDESK_LANG'] = {value!r}" if value else
            "__import__('os').environ.pop('TEAMDESK_LANG', None)")
    kernel = item.parent.kernel
    kernel.await_idle(kernel.execute_cell_input(code, allow_stdin=False), 30)


def _options(cell: nbformat.NotebookNode) -> defaultdict:
    """nbval's options for `cell` (its tags and comment markers), outputs not compared."""
    options = defaultdict(bool, find_metadata_tags(cell.metadata))
    options.update(dict(find_comment_markers(cell.source)))
    options["check"] = False
    return options


def _run_as(item, cell: nbformat.NotebookNode, what: str) -> None:
    """Run `cell` through the nbval item's own machinery (same kernel, same error and
    timeout handling), its outputs not compared; a failure says which pass it was."""
    saved = item.cell, item.options
    item.cell, item.options = cell, _options(cell)
    try:
        if not item.options["skip"]:
            IPyNbCell.runtest(item)  # nbval's own, also for the 中文 Run All item
    except Exception as err:
        err.args = (f"[{what}] {err.args[0] if err.args else ''}", *err.args[1:])
        raise
    finally:
        item.cell, item.options = saved


class ChineseRunAll(IPyNbCell):
    """The item after a notebook's last cell: its 中文 edition, Run All, same kernel."""

    def runtest(self) -> None:
        twins = _twins(Path(self.path))
        _set_lang(self, "zh")
        try:
            for k, cell in enumerate(twins):
                self.cell_num = k  # nbval's error names the cell
                _run_as(self, cell, f"Run All again, 中文 edition, code cell {k}")
        finally:
            self.cell_num = -1
            _set_lang(self, None)


def pytest_collection_modifyitems(config, items):
    if config.getoption("nbval_no_rerun", default=False):
        return
    last: dict[object, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, IPyNbCell):
            last[item.parent] = i
    for file, i in sorted(last.items(), key=lambda kv: -kv[1]):
        items.insert(i + 1, ChineseRunAll.from_parent(
            file, name="Run All again (中文)", cell_num=-1,
            cell=nbformat.v4.new_code_cell(""), options={}))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if (not isinstance(item, IPyNbCell) or isinstance(item, ChineseRunAll)
            or item.options.get("skip") or item.config.getoption("nbval_no_rerun")):
        return result
    _run_as(item, item.cell, "run again")
    return result
