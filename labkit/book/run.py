"""The book's first half: run every notebook top to bottom on real servers, in the order the
course map in 00 gives, and say honestly which cell of which notebook failed.

Each notebook runs in a fresh kernel whose working directory is the notebooks folder (so it
starts and stops its own lab, as a learner's run does). The executed copy is kept in memory
and handed to the book's build folder, never written back over the notebook (executed
notebooks are not committed).

What can fail: a cell that raises stops that notebook (``CellExecutionError``); ``Run.error``
then names the cell (its number and first line) and the error's last line. A cell that runs
longer than ``timeout`` seconds fails the same way.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from jupyter_core.paths import jupyter_runtime_dir
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
MAP_HEADING = "## The map of the course"

# A cell whose stderr output a learner should see says so: a tag, or a comment line. Every
# other cell's stderr (red in JupyterLab and in the book) fails the notebooks' test run
# (notebooks/conftest.py): a learner reads red text as an error.
STDERR_ON_PURPOSE_TAG = "stderr-on-purpose"
STDERR_ON_PURPOSE_COMMENT = re.compile(r"^\s*#\s*shows stderr on purpose\b", re.MULTILINE)


def shows_stderr_on_purpose(cell) -> bool:
    """Does this notebook cell (a dict or NotebookNode) say its stderr output is meant?"""
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    tags = cell.get("metadata", {}).get("tags", [])
    return STDERR_ON_PURPOSE_TAG in tags or bool(STDERR_ON_PURPOSE_COMMENT.search(source))


def map_order(folder: Path = NOTEBOOKS) -> list[str]:
    """The notebook names (no suffix) in the order of the course map's table in 00."""
    start = folder / "00_start_here.ipynb"
    if not start.exists():
        return []
    for cell in nbformat.read(start, as_version=4).cells:
        if cell.cell_type == "markdown" and cell.source.startswith(MAP_HEADING):
            return [match.group(1) for match in re.finditer(r"^\| `([^`]+)`", cell.source, re.MULTILINE)]
    return []


def course_notebooks(folder: Path = NOTEBOOKS) -> list[Path]:
    """The course in the course map's order (00 ... 11, the sandbox, the lab panel);
    a notebook the map does not list comes last, by name."""
    present = {path.stem: path for path in sorted(folder.glob("*.ipynb"))}
    ordered = [present.pop(name) for name in map_order(folder) if name in present]
    return ordered + list(present.values())


def in_course_order(notebooks: list[Path]) -> list[Path]:
    """``notebooks`` (any subset) sorted as the course map orders them."""
    order = {path.name: index for index, path in enumerate(course_notebooks())}
    return sorted(notebooks, key=lambda path: (order.get(path.name, len(order)), path.name))


def title_of(notebook: nbformat.NotebookNode, fallback: str) -> str:
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def figures_of(notebook: nbformat.NotebookNode) -> int:
    """How many PNG figures the executed notebook holds."""
    return sum(1 for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.get("outputs", []) if "image/png" in output.get("data", {}))


LESSON_NAME = re.compile(r"^\d\d_.*\.ipynb$")


def lessons_without_a_figure(seen: dict[str, list[list[dict]]], cells: dict[str, int]) -> list[str]:
    """The lessons (``NN_*.ipynb``) of a run that ran every code cell and showed no image.
    ``seen``: notebook name -> each code cell's outputs as the run got them (nbformat dicts);
    ``cells``: notebook name -> its number of code cells. A lesson cut short proves nothing."""
    return sorted(name for name, outputs in seen.items()
                  if LESSON_NAME.match(name) and len(outputs) == cells.get(name)
                  and not any("image/png" in output.get("data", {}) for cell in outputs for output in cell))


@dataclass
class Run:
    """One executed notebook: the notebook with its outputs, its title, its run time in
    seconds, and ``error`` (None when every cell ran): which cell failed and how."""

    source: Path
    notebook: nbformat.NotebookNode
    title: str
    seconds: float
    error: str | None = None

    @property
    def figures(self) -> int:
        return figures_of(self.notebook)


def failed_cell(notebook: nbformat.NotebookNode) -> str:
    """``cell N (first line)`` of the first code cell with an error output (N counts every
    cell from 1, as JupyterLab's cell list does), or ``a cell`` when none holds one."""
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type == "code" and any(output.get("output_type") == "error" for output in cell.get("outputs", [])):
            first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
            return f"cell {number} ({first[:60]})"
    return "a cell"


def execute(source: Path, timeout: int = 600) -> Run:
    """Run ``source`` top to bottom in a fresh kernel, as the book does."""
    notebook = nbformat.read(source, as_version=4)
    started = time.monotonic()
    error = None
    # IPC transport (Unix sockets in Jupyter's runtime folder): no TCP ports to pick, none a lab
    # starting at the same moment can take, and no "running over TCP without encryption" warning
    # from every kernel, which hid the book build's real warnings. The socket path is absolute:
    # the kernel runs in the notebooks folder, the client wherever it was started.
    runtime = Path(jupyter_runtime_dir())
    runtime.mkdir(parents=True, exist_ok=True)
    sockets = runtime / f"labkit-book-{os.getpid()}-{source.stem}"
    manager = KernelManager(kernel_name="python3", transport="ipc", ip=str(sockets))
    client = NotebookClient(notebook, km=manager, timeout=timeout, store_widget_state=True,
                            resources={"metadata": {"path": str(source.parent)}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as failure:
        text = str(failure).strip()
        last = text.splitlines()[-1] if text else type(failure).__name__
        where = failed_cell(notebook) if isinstance(failure, CellExecutionError) else "a cell (timed out)"
        error = f"{where}: {last}"
    finally:
        # a kernel manager handed to nbclient is the caller's to stop, and its sockets to remove
        if manager.has_kernel:
            manager.shutdown_kernel()
        for path in runtime.glob(f"{sockets.name}-*"):
            path.unlink(missing_ok=True)
    return Run(source, notebook, title_of(notebook, source.stem), time.monotonic() - started, error)
