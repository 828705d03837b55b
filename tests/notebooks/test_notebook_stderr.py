"""No lesson output shows a stderr stream (red in JupyterLab and in the book) unless its cell
says it shows one on purpose: a learner reads red text as an error.

The chatter came from kazoo, which logs every dropped connection and reconnect attempt as a
WARNING; labkit.up sends the client libraries' records to a file (labkit/servers/client_logs.py)
while their ERROR records, labkit's own warnings and real exceptions still show.

* ``route_client_logs`` is tested on a real kazoo client that cannot connect (a few seconds).
* The sources of every notebook: a cell that writes to stderr itself carries the marker (fast).
* Every notebook's executed outputs: notebooks/conftest.py fails a cell whose output has a
  stderr stream unless it says so on purpose, in the same run that checks the notebooks
  (before the routing, notebook 07 had 54 such outputs); here, that the hook is in place.
"""
from __future__ import annotations

import json
import logging
import re
import socket
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from labkit.book import STDERR_ON_PURPOSE_TAG, shows_stderr_on_purpose
from labkit.servers.client_logs import route_client_logs, routed_to, show_client_logs

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
WRITES_STDERR = re.compile(r"sys\.stderr|warnings\.warn\(|logging\.basicConfig|"
                           r"\blog(?:ging|ger)?\.(?:warning|error|exception|critical)\(")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def routed(tmp_path):
    before = routed_to()
    path = route_client_logs(tmp_path / "clients.log")
    assert routed_to() == path
    yield path
    show_client_logs()
    if before is not None:      # as it was: a lab of this session had routed them
        route_client_logs(before)


def reaches_the_root(name: str) -> bool:
    """Does a record of this logger reach the root logger, whose handlers (or, with none,
    Python's last-resort handler, which prints WARNING and above) show it on stderr?"""
    logger = logging.getLogger(name)
    while logger.parent is not None:
        if not logger.propagate:
            return False
        logger = logger.parent
    return True


def test_kazoo_chatter_goes_to_the_file_and_real_errors_still_show(routed, capfd):
    client = KazooClient(hosts=f"127.0.0.1:{free_port()}", timeout=1.0,
                         connection_retry={"max_tries": 1, "delay": 0.05})
    with pytest.raises(KazooTimeoutError):
        client.start(timeout=1.5)           # nothing listens there: kazoo logs its failed attempts
    client.stop()
    client.close()
    logging.getLogger("kazoo.client").error("a callback raised")    # what a real failure in kazoo logs
    printed = capfd.readouterr().err
    logged = routed.read_text()
    assert "Connection dropped" in logged and "Failed connecting to Zookeeper" in logged, logged
    assert "Connection dropped" not in printed and "Failed connecting" not in printed, printed
    assert not reaches_the_root("kazoo.client") and not reaches_the_root("kazoo.protocol.connection")
    assert "kazoo.client: a callback raised" in printed and "a callback raised" in logged
    assert reaches_the_root("labkit.servers.lab") and reaches_the_root("redis"), "only kazoo is routed"


def test_show_client_logs_gives_kazoo_back_to_pythons_default(routed):
    show_client_logs()
    assert routed_to() is None and reaches_the_root("kazoo.client")
    assert not routed.exists() or routed.read_text() == ""


def test_a_cell_that_writes_to_stderr_says_it_does_so_on_purpose():
    unmarked = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if cell["cell_type"] == "code" and WRITES_STDERR.search(source) and not shows_stderr_on_purpose(cell):
                unmarked.append(f"{path.name}[{index}]: {WRITES_STDERR.search(source).group(0)}")
    assert not unmarked, ("these cells write to stderr; tag them " + STDERR_ON_PURPOSE_TAG +
                          " (or add the comment '# shows stderr on purpose') if the learner should see it:\n"
                          + "\n".join(unmarked))


def test_the_notebooks_run_fails_a_cell_with_unmeant_stderr(pytester):
    """notebooks/conftest.py, on a real nbval run of a two-cell notebook: the cell that prints
    to stderr fails, the one that says it does so on purpose passes."""
    pytester.makeconftest((NOTEBOOKS / "conftest.py").read_text())
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{number}", "metadata": {}, "outputs": [],
              "source": source} for number, source in enumerate((
                  "import sys\nprint('red', file=sys.stderr)",
                  "# shows stderr on purpose\nimport sys\nprint('meant', file=sys.stderr)"))]
    notebook = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                             "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    pytester.path.joinpath("tiny.ipynb").write_text(json.dumps(notebook))
    result = pytester.runpytest_subprocess("--nbval-lax", "-p", "no:cacheprovider", "tiny.ipynb")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*stderr*red*"])


def test_the_notebooks_run_records_each_cells_time_when_asked(pytester, monkeypatch):
    """LABKIT_CELL_TIMES (notebooks/conftest.py): one line per code cell, with its seconds."""
    pytester.makeconftest((NOTEBOOKS / "conftest.py").read_text())
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{number}", "metadata": {}, "outputs": [],
              "source": source} for number, source in enumerate(("x = 1", "import time\ntime.sleep(1.2)"))]
    notebook = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                             "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    pytester.path.joinpath("timed.ipynb").write_text(json.dumps(notebook))
    table = pytester.path / "cell_times.tsv"
    monkeypatch.setenv("LABKIT_CELL_TIMES", str(table))
    pytester.runpytest_subprocess("--nbval-lax", "-p", "no:cacheprovider", "timed.ipynb").assert_outcomes(passed=2)
    rows = [line.split("\t") for line in table.read_text().splitlines()]
    assert [(name, cell, number, progress, first) for name, cell, number, _, progress, first in rows] == [
        ("timed.ipynb", "c0", "0", "no", "x = 1"), ("timed.ipynb", "c1", "1", "no", "import time")]
    assert float(rows[1][3]) >= 1.2, rows     # the sleep is a lower bound; no upper bound is asserted (load)


def write_notebook(folder, name: str, sources) -> None:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{number}", "metadata": {}, "outputs": [],
              "source": source} for number, source in enumerate(sources)]
    folder.joinpath(name).write_text(json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}))


def test_a_cell_the_table_lists_as_slow_fails_without_progress_lines(pytester, monkeypatch):
    """notebooks/conftest.py: c1 and c2 took 9 s in the table and over 5 s now; c1 prints
    only a result and fails, c2 opens a labkit.progress display (its plain lines under
    nbval) and passes; c3, listed as slow but quick now, passes silent."""
    pytester.makeconftest((NOTEBOOKS / "conftest.py").read_text())
    write_notebook(pytester.path, "slow.ipynb", (
        "x = 1", "import time\ntime.sleep(5.2)\nprint('the result, at the end')",
        "from labkit.progress import showing_progress\nwith showing_progress('race', total=1) as shown:\n"
        "    shown.step('follower cut')\n    time.sleep(5.2)", "y = 2"))
    table = pytester.path / "cell_times.csv"
    table.write_text("# a table for this test\nnotebook,cell,seconds,progress,order\n"
                     "slow.ipynb,c0,0.01,no,0\nslow.ipynb,c1,9.00,no,1\nslow.ipynb,c2,9.00,yes,2\n"
                     "slow.ipynb,c3,9.00,no,3\n")
    monkeypatch.setenv("LABKIT_CELL_TABLE", str(table))
    result = pytester.runpytest_subprocess("--nbval-lax", "-p", "no:cacheprovider", "slow.ipynb")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*Cell 1*", "*(9.0 s in the cell-times table)*printed no progress line*"])


def test_a_notebook_slower_by_more_than_a_fifth_fails_the_session(pytester, monkeypatch):
    """With LABKIT_CELL_TIMES, a notebook whose cells all ran and took more than 1.2 times
    the table's total fails the session at its end; the same run against a table that
    allows its time passes."""
    pytester.makeconftest((NOTEBOOKS / "conftest.py").read_text())
    write_notebook(pytester.path, "grown.ipynb", ("x = 1", "import time\ntime.sleep(1.0)"))
    table = pytester.path / "cell_times.csv"
    monkeypatch.setenv("LABKIT_CELL_TABLE", str(table))
    monkeypatch.setenv("LABKIT_CELL_TIMES", str(pytester.path / "times.tsv"))
    for recorded, outcome in ((0.1, 1), (4.0, 0)):      # 4 s: under the 5 s that asks for progress
        table.write_text(f"notebook,cell,seconds,progress,order\ngrown.ipynb,c0,0.00,no,0\n"
                         f"grown.ipynb,c1,{recorded:.2f},no,1\n")
        result = pytester.runpytest_subprocess("--nbval-lax", "-p", "no:cacheprovider", "grown.ipynb")
        assert result.ret == outcome, result.stdout.str()[-2000:]
        assert ("grown.ipynb: 1 s now, 0 s in the table" in result.stdout.str()) is (outcome == 1)
