"""The notebooks' own test run (pytest --nbval-lax notebooks): besides each cell's asserts, a
cell whose output has a stderr stream fails unless the cell says it shows one on purpose
(labkit.book.shows_stderr_on_purpose). Red text in a lesson reads as an error: client
libraries' chatter belongs in the lab's client log (labkit/servers/client_logs.py).

Each lesson's exercise cell holds a skeleton for the learner to fill in. Unattended, with
LABKIT_EXERCISES=reference (set here, before nbval starts any kernel, which inherits it), a
cell whose functions are still the skeleton checks that the skeleton fails, then asserts
the reference solution passes (labkit/practice/exercises/ladder.py).

Progress prints as plain lines here (LABKIT_PROGRESS=lines, set before any kernel starts: no
widget frontend draws a bar), and a cell that notebooks/data/cell_times.csv lists at over 5 s,
and that took over 5 s in this run too, fails unless its output has such a line
(labkit/book/cell_times.py): a learner watching a silent cell for that long cannot tell
working from stuck.

With LABKIT_CELL_TIMES=FILE each code cell's run time is appended to FILE as a tab-separated
line: notebook, cell id, cell number (nbval's, from 0), seconds, whether it showed progress
(yes/no), the cell's first line. One short write per cell in append mode, so notebooks side by
side can share the file. At the session's end, a notebook whose every cell ran and whose total
is more than 20 % over the table's fails the session (`python -m labkit.book.cell_times`
rewrites the table).

Every lesson shows what happened as a picture: a lesson notebook (``NN_*.ipynb``) that ran
every code cell and whose outputs hold no image fails the session (tests/notebooks/test_lesson_figures.py
checks the same from the notebooks' source)."""
from __future__ import annotations

import json
import os

import pytest

from labkit.book import shows_stderr_on_purpose
from labkit.book.run import lessons_without_a_figure
from labkit.book.cell_times import SLOW_SECONDS, grown, read_table, showed_progress, slow_cells, table_path
from labkit.practice.exercises.ladder import FLAG
from labkit.progress import LINE_PREFIX, MODE_VARIABLE

os.environ.setdefault(FLAG, "reference")
os.environ.setdefault(MODE_VARIABLE, "lines")
RECORDED = read_table(table_path())
SLOW = slow_cells(RECORDED)
fresh_seconds: dict[str, float] = {}      # this session's total per notebook, and its cells timed
fresh_cells: dict[str, int] = {}
outputs_seen: dict[str, list[list[dict]]] = {}   # each notebook's code cells' outputs, as they ran
paths_seen: dict[str, str] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cell, outputs = getattr(item, "cell", None), getattr(item, "test_outputs", None)
    if call.when == "call" and cell is not None and os.environ.get("LABKIT_CELL_TIMES"):
        record_cell_time(os.environ["LABKIT_CELL_TIMES"], item, report.duration, showed_progress(outputs))
    if call.when == "call" and cell is not None:
        outputs_seen.setdefault(item.path.name, []).append(list(outputs or []))
        paths_seen[item.path.name] = str(item.path)
    if call.when != "call" or not report.passed or cell is None:
        return
    slow = SLOW.get((item.path.name, cell.get("id")))
    # slow in the table and in this run (a display that appears after a second or two, like a
    # leader election's, rightly stays silent on an idle machine where the cell is quick)
    if slow is not None and report.duration > SLOW_SECONDS and not showed_progress(outputs):
        report.outcome = "failed"
        report.longrepr = (f"this cell took {report.duration:.1f} s ({slow:.1f} s in the cell-times table), over "
                           f"{SLOW_SECONDS:g} s, and printed no progress line (one starting with {LINE_PREFIX!r}): open a "
                           "labkit.progress.showing_progress() in the slow function it calls, with a step per run")
        return
    if not outputs:
        return
    red = [output.get("text", "") for output in outputs
           if output.get("output_type") == "stream" and output.get("name") == "stderr"]
    if red and not shows_stderr_on_purpose(cell):
        report.outcome = "failed"
        report.longrepr = ("this cell wrote to stderr (red in JupyterLab and in the book), and does not say it "
                           "does so on purpose (a 'stderr-on-purpose' tag, or a '# shows stderr on purpose' "
                           "comment):\n" + "".join(red)[:2000])


def record_cell_time(path: str, item, seconds: float, progress: bool) -> None:
    first = next((line.strip() for line in item.cell.source.splitlines() if line.strip()), "")
    line = (f"{item.path.name}\t{item.cell.get('id')}\t{item.cell_num}\t{seconds:.2f}\t{'yes' if progress else 'no'}"
            f"\t{first[:80].replace(chr(9), ' ')}\n")
    with open(path, "a", encoding="utf-8") as table:
        table.write(line)
    fresh_seconds[item.path.name] = fresh_seconds.get(item.path.name, 0.0) + seconds
    fresh_cells[item.path.name] = fresh_cells.get(item.path.name, 0) + 1


def pytest_sessionfinish(session, exitstatus):
    """With LABKIT_CELL_TIMES: fail the session if a notebook's total grew over 20 % (see above).
    Fail it too if a lesson ran every cell and showed no figure."""
    problems = grown(fresh_seconds, fresh_cells, RECORDED) if os.environ.get("LABKIT_CELL_TIMES") else []
    if problems:
        print("\nnotebooks slower than notebooks/data/cell_times.csv allows:\n  " + "\n  ".join(problems))
        session.exitstatus = 1
    cells = {name: sum(1 for cell in json.loads(open(path, encoding="utf-8").read())["cells"]
                       if cell["cell_type"] == "code") for name, path in paths_seen.items()}
    pictureless = lessons_without_a_figure(outputs_seen, cells)
    if pictureless:
        print("\nlessons that ran every cell and showed no figure (draw the run: labkit/plots.py):\n  "
              + "\n  ".join(pictureless))
        session.exitstatus = 1
