"""The instructor's kit follows the notebooks: the half-day workshop lists every exercise
cell the notebooks hold (`notebook:name`, a name the cell binds), handed out or not, and
its optional tracks take as long as each notebook says ("About N minutes"), and its plan
shows beside each block what the notebook alone takes, as the notebook says."""

from __future__ import annotations

import re
from pathlib import Path

from devkit import notebook_cells
from devkit.minutes import header_figures
from tests.unit.test_notebook_structure import _top_level_names

ROOT = Path(__file__).resolve().parents[2]
WORKSHOP = ROOT / "docs" / "teaching" / "workshop-half-day.md"
#: A cell reference in the workshop: `26b:my_test`.
CELL_REF = re.compile(r"`(\d\d[a-d]?):(\w+)`")
#: The plan's last column: `23`: 50 (the notebook alone, its header's minutes).
ALONE = re.compile(r"\| `(\d\d[a-d]?)`: (\d+) \|$", re.M)
#: An optional track: `24-reminders` (45 min) or `25-exports` (35, …).
TRACK = re.compile(r"`(\d\d[a-d]?-[a-z-]+)` \((\d+)")


def _notebook(short: str) -> Path:
    (path,) = (ROOT / "notebooks").glob(f"{short}-*.ipynb")
    return path


def exercise_cells() -> dict[str, list[set[str]]]:
    """Per notebook (short id: `26b`), the names each of its `exercise` cells binds."""
    out: dict[str, list[set[str]]] = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        cells = notebook_cells.cells(path)
        out[path.name.split("-")[0]] = [
            _top_level_names(notebook_cells.source(c)) for c in cells
            if "exercise" in c["metadata"].get("tags", [])]
    return out


def unlisted(text: str, cells: dict[str, list[set[str]]]) -> tuple[list[str], list[str]]:
    """(references to no exercise cell, exercise cells no reference names)."""
    refs = set(CELL_REF.findall(text))
    wrong = [f"{nb}:{name}" for nb, name in sorted(refs)
             if not any(name in bound for bound in cells.get(nb, []))]
    missing = [f"{nb}: an exercise cell binding {sorted(bound)}"
               for nb, each in cells.items() for bound in each
               if not any((nb, name) in refs for name in bound)]
    return wrong, missing


def test_the_workshop_lists_every_exercise_cell_of_the_notebooks() -> None:
    wrong, missing = unlisted(WORKSHOP.read_text(encoding="utf-8"), exercise_cells())
    assert not wrong, f"the workshop cites cells no exercise binds: {wrong}"
    assert not missing, f"exercises the workshop does not list: {missing}"


def test_the_check_sees_a_stale_and_a_missing_exercise() -> None:
    cells = {"90": [{"my_invariant"}], "27": [{"my_pattern"}, {"my_isolation"}]}
    text = "10. **What the listener broke** (`90`). Cells: `90:my_ids`. 8. `27:my_pattern`."
    assert unlisted(text, cells) == (["90:my_ids"], [
        "90: an exercise cell binding ['my_invariant']",
        "27: an exercise cell binding ['my_isolation']"])


def test_the_optional_tracks_take_what_each_notebook_says() -> None:
    text = WORKSHOP.read_text(encoding="utf-8")
    tracks = TRACK.findall(text[text.index("**Optional tracks**"):])
    assert len(tracks) == 5, tracks
    for name, minutes in tracks:
        said = _header_minutes(ROOT / "notebooks" / f"{name}.ipynb")
        assert said == int(minutes), f"{name}: workshop {minutes}, notebook {said}"


def _header_minutes(path: Path) -> int | None:
    """The main part's minutes, as the notebook's header says them (`header_figures`)."""
    figures = header_figures(notebook_cells.cells(path))
    return figures[0] if figures else None


def test_the_plan_shows_what_each_core_notebook_takes_alone() -> None:
    """Beside each core block, the notebook's own "About N minutes" (devkit/minutes.py):
    an instructor sees where a led block is shorter than a learner alone would need."""
    text = WORKSHOP.read_text(encoding="utf-8")
    alone = ALONE.findall(text[text.index("## Plan"):text.index("**Optional tracks**")])
    assert {nb for nb, _ in alone} == {"00", "23", "26a", "26b", "26c", "26d"}, alone
    for nb, minutes in alone:
        said = _header_minutes(_notebook(nb))
        assert said == int(minutes), f"{nb}: the plan says {minutes} min alone, the notebook {said}"
