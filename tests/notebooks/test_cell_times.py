"""notebooks/data/cell_times.csv, the measured run time of every code cell of the course
(``python -m labkit.book.cell_times`` writes it): it covers every code cell of every lesson,
names only cells that exist, and every cell over 5 s in it showed progress while it ran,
unless it is one that waits for nothing (labkit/book/cell_times.py, WAITS_FOR_NOTHING, each
with why). The notebooks' own run checks the same two things against a fresh run
(notebooks/conftest.py): a listed slow cell without a progress line fails there, and with
LABKIT_CELL_TIMES a notebook more than 20 % over its total here fails the session.

Pure logic: the table and the notebooks are read, nothing runs."""
from __future__ import annotations

import json

import pytest

from labkit.book.cell_times import SLOW_SECONDS, TABLE, WAITS_FOR_NOTHING, read_table, slow_cells
from labkit.book.run import NOTEBOOKS

pytestmark = pytest.mark.no_servers

LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def code_cells(path) -> list[str]:
    return [cell["id"] for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def test_the_table_has_a_row_for_every_code_cell_and_only_those():
    rows = read_table()
    assert rows, f"{TABLE} is missing: run python -m labkit.book.cell_times"
    for lesson in LESSONS:
        listed = [row["cell"] for row in rows if row["notebook"] == lesson.name]
        assert sorted(listed) == sorted(code_cells(lesson)), (
            f"{lesson.name}: the table's cells differ from the notebook's code cells (a cell added, removed or "
            f"renamed since it was measured): run python -m labkit.book.cell_times {lesson.relative_to(NOTEBOOKS.parent)}")


def test_the_table_names_only_notebooks_that_exist():
    gone = sorted({row["notebook"] for row in read_table()} - {path.name for path in NOTEBOOKS.glob("*.ipynb")})
    assert not gone, f"{TABLE} has rows of notebooks that are gone (renamed or split?): {gone}; drop them"


def test_every_cell_over_five_seconds_showed_progress():
    rows = read_table()
    silent = [f"{row['notebook']} {row['cell']}: {row['seconds']:.1f} s" for row in rows
              if (row["notebook"], row["cell"]) in slow_cells(rows) and not row["progress"]]
    assert not silent, (f"these cells ran over {SLOW_SECONDS:g} s without printing progress: open a "
                        "labkit.progress.showing_progress() in the function they wait on, then measure again:\n"
                        + "\n".join(silent))


def test_the_cells_allowed_to_be_silent_exist_and_say_why():
    every_id = {cell for lesson in LESSONS for cell in code_cells(lesson)}
    for cell, why in WAITS_FOR_NOTHING.items():
        assert cell in every_id, f"{cell}: no such code cell in any lesson"
        assert len(why) > 40, f"{cell}: say why it waits for nothing"


def test_the_table_says_when_and_under_what_load_it_was_measured():
    first = TABLE.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# measured ") and "load average" in first, first
