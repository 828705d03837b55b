"""Every lesson (notebooks 00-11) shows what happened as a picture: some code cell draws a
figure, by ``plt.show()`` or by calling, through its lesson handle, a labkit function that
draws (its name says plot, timeline or draw, and its module uses matplotlib). The notebooks'
own run checks the same from the real outputs: a lesson that ran every cell and showed no
image fails the session (notebooks/conftest.py, ``lessons_without_a_figure``).

Pure logic: the notebooks are read and the lesson facades imported, no server starts."""
from __future__ import annotations

import inspect
import json
import re

import pytest

import labkit
from labkit.book.run import NOTEBOOKS
from labkit.book.run import lessons_without_a_figure

pytestmark = pytest.mark.no_servers

LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
SHOW = re.compile(r"\bplt\.show\(\)")
LESSON_CALL = re.compile(r"\blesson((?:\.[A-Za-z_]\w*)+)\s*\(")
DRAWING_NAME = re.compile(r"plot|timeline|draw")


def draws(function) -> bool:
    """A labkit function whose name says it draws and whose module uses matplotlib."""
    module = inspect.getmodule(function)
    if module is None or not module.__name__.startswith("labkit") or not DRAWING_NAME.search(function.__name__):
        return False
    return "matplotlib" in inspect.getsource(module)


def drawing_cells(cells: list[dict], experiments) -> list[str]:
    """The ids of the code cells that draw a figure: ``plt.show()``, or a call ``lesson.a.b(...)``
    that names a drawing function of the lesson's facade."""
    found = []
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code":
            continue
        for path in LESSON_CALL.findall(source):
            target = experiments
            for name in path.strip(".").split("."):
                target = getattr(target, name, None)
            if callable(target) and inspect.isfunction(target) and draws(target):
                found.append(cell["id"])
                break
        else:
            if SHOW.search(source):
                found.append(cell["id"])
    return found


def cells_of(path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_the_lessons_are_all_here():
    assert [path.name[:2] for path in LESSONS] == [f"{number:02d}" for number in range(12)]


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda path: path.name[:2])
def test_every_lesson_draws_a_figure(notebook):
    experiments = labkit.lesson(notebook.name[:2]).experiments
    assert drawing_cells(cells_of(notebook), experiments), (
        f"{notebook.name} draws no figure: add a cell that calls a plot of the run (labkit/record/plots.py, or a "
        "lesson module's *_plot) through the lesson handle, or plt.show()")


def test_09_and_10_draw_their_runs():
    """The semaphore's holders, the election's terms and the fenced row each have their cell."""
    assert {"sem-holders-plot", "sem-paused-plot", "elec-terms-plot"} <= set(
        drawing_cells(cells_of(NOTEBOOKS / "09_semaphores_and_elections.ipynb"), labkit.lesson("09").experiments))
    assert "pg-rows-plot" in drawing_cells(cells_of(NOTEBOOKS / "10_fencing_a_database.ipynb"),
                                           labkit.lesson("10").experiments)


def test_a_lesson_without_a_drawing_cell_is_found():
    experiments = labkit.lesson("10").experiments
    code = lambda identifier, source: {"cell_type": "code", "id": identifier, "source": [source]}  # noqa: E731
    quiet = [code("a", "fenced = lesson.databases.late_write(lab, fenced=True)\nprint(fenced.steps)"),
             code("b", "lesson.table(rows)  # plot nothing"),
             {"cell_type": "markdown", "id": "c", "source": ["plt.show()"]}]
    assert drawing_cells(quiet, experiments) == []
    assert drawing_cells(quiet + [code("d", "lesson.databases.late_write_plot([fenced]);")], experiments) == ["d"]
    assert drawing_cells(quiet + [code("e", "figure = something()\nplt.show()")], experiments) == ["e"]


def test_the_run_check_fails_a_lesson_that_showed_no_image():
    png = {"output_type": "display_data", "data": {"image/png": "iVBOR...", "text/plain": "<Figure>"}}
    text = {"output_type": "stream", "name": "stdout", "text": "no picture\n"}
    seen = {"10_fencing_a_database.ipynb": [[text], [text, png]], "09_semaphores_and_elections.ipynb": [[text]],
            "sandbox.ipynb": [[text]]}
    cells = {"10_fencing_a_database.ipynb": 2, "09_semaphores_and_elections.ipynb": 1, "sandbox.ipynb": 1}
    assert lessons_without_a_figure(seen, cells) == ["09_semaphores_and_elections.ipynb"]
    # a lesson cut short (a failed cell, a -k selection) proves nothing either way
    assert lessons_without_a_figure(seen, {**cells, "09_semaphores_and_elections.ipynb": 5}) == []
