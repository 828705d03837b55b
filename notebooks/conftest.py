"""The notebooks' own test run (pytest --nbval-lax notebooks): besides each cell's asserts, a
cell whose output has a stderr stream fails unless the cell says it shows one on purpose
(labkit.book.shows_stderr_on_purpose). Red text in a lesson reads as an error: client
libraries' chatter belongs in the lab's client log (labkit/servers/client_logs.py).

Each lesson's exercise cell holds a skeleton for the learner to fill in. Unattended, with
LABKIT_EXERCISES=reference (set here, before nbval starts any kernel, which inherits it), a
cell whose functions are still the skeleton checks that the skeleton fails, then asserts
the reference solution passes (labkit/practice/exercises/ladder.py).

With LABKIT_CELL_TIMES=FILE each code cell's run time is appended to FILE as a tab-separated
line: notebook, cell number (nbval's, from 0), seconds, the cell's first line. One short write
per cell in append mode, so notebooks side by side can share the file."""
from __future__ import annotations

import os

import pytest

from labkit.book import shows_stderr_on_purpose
from labkit.practice.exercises.ladder import FLAG

os.environ.setdefault(FLAG, "reference")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cell, outputs = getattr(item, "cell", None), getattr(item, "test_outputs", None)
    if call.when == "call" and cell is not None and os.environ.get("LABKIT_CELL_TIMES"):
        record_cell_time(os.environ["LABKIT_CELL_TIMES"], item, report.duration)
    if call.when != "call" or not report.passed or cell is None or not outputs:
        return
    red = [output.get("text", "") for output in outputs
           if output.get("output_type") == "stream" and output.get("name") == "stderr"]
    if red and not shows_stderr_on_purpose(cell):
        report.outcome = "failed"
        report.longrepr = ("this cell wrote to stderr (red in JupyterLab and in the book), and does not say it "
                           "does so on purpose (a 'stderr-on-purpose' tag, or a '# shows stderr on purpose' "
                           "comment):\n" + "".join(red)[:2000])


def record_cell_time(path: str, item, seconds: float) -> None:
    first = next((line.strip() for line in item.cell.source.splitlines() if line.strip()), "")
    line = f"{item.path.name}\t{item.cell_num}\t{seconds:.2f}\t{first[:80].replace(chr(9), ' ')}\n"
    with open(path, "a", encoding="utf-8") as table:
        table.write(line)
