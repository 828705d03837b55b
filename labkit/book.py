"""The course book: execute every notebook on real servers and render it as static HTML.

    python -m labkit.book                      # every notebook in notebooks/ -> book/_build
    python -m labkit.book notebooks/sandbox.ipynb notebooks/00_start_here.ipynb --out /tmp/book

Each notebook runs top to bottom in a fresh kernel whose working directory is the
notebooks folder (so it starts and stops its own lab, as a learner's run does); the
executed copy is rendered with nbconvert's HTML exporter, figures embedded as PNG data,
widgets as their saved state, and never written back over the notebook (executed
notebooks are not committed). ``index.html`` lists the pages with their run time and
figure count. Only nbconvert and nbclient are needed: both come with JupyterLab.

What can fail: a cell that raises stops that notebook (``CellExecutionError``); its page
is still written, with the error shown, and the build reports it and exits 1. A
notebook that runs longer than ``timeout`` seconds per cell fails the same way.
"""
from __future__ import annotations

import argparse
import html
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbconvert
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from nbconvert import HTMLExporter
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "book" / "_build"
EMBEDDED_PNG = re.compile(r'<img[^>]+src="data:image/png;base64,')
# An output that carries its own static HTML beside a widget (read aloud) shows the HTML: a
# book page has no widget manager to run the widget's JavaScript.
PRIORITY = ["text/html", "application/vnd.jupyter.widget-view+json", "application/javascript", "text/markdown",
            "image/svg+xml", "text/vnd.mermaid", "text/latex", "image/png", "image/jpeg", "text/plain"]


@dataclass
class Page:
    notebook: Path
    html: Path
    title: str
    seconds: float
    figures: int            # PNG outputs in the executed notebook
    embedded: int           # PNG images embedded in the HTML page
    error: str | None = None


def _find_templates() -> None:
    """nbconvert's templates live in share/jupyter of the prefix nbconvert was installed in,
    which is not this interpreter's when the package comes from another environment (a
    .pth file, a system package): add that folder to the data path."""
    # nbconvert sits in PREFIX/lib/pythonX.Y/site-packages/nbconvert
    share = Path(nbconvert.__file__).resolve().parents[4] / "share" / "jupyter"
    known = [path for path in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if path]
    if share.is_dir() and str(share) not in known:
        os.environ["JUPYTER_PATH"] = os.pathsep.join(known + [str(share)])


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


def course_notebooks(folder: Path = NOTEBOOKS) -> list[Path]:
    """The course in reading order: 00, 01, ... then the others (sandbox, lab panel)."""
    notebooks = sorted(folder.glob("*.ipynb"))
    return [nb for nb in notebooks if nb.name[:2].isdigit()] + [nb for nb in notebooks if not nb.name[:2].isdigit()]


def _title(notebook: nbformat.NotebookNode, fallback: str) -> str:
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def _figures(notebook: nbformat.NotebookNode) -> int:
    return sum(1 for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.get("outputs", []) if "image/png" in output.get("data", {}))


def execute(source: Path, timeout: int = 600) -> tuple[nbformat.NotebookNode, float, str | None]:
    """Run ``source`` top to bottom in a fresh kernel, as the book does: the executed
    notebook (outputs included), its run time in seconds, and the error line of the cell
    that failed (None if every cell ran)."""
    notebook = nbformat.read(source, as_version=4)
    started = time.monotonic()
    error = None
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(source.parent)}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as failure:
        error = str(failure).strip().splitlines()[-1] if str(failure).strip() else type(failure).__name__
    return notebook, time.monotonic() - started, error


def exporter() -> HTMLExporter:
    return HTMLExporter(template_name="lab", config=Config({"NbConvertBase": {"display_data_priority": PRIORITY}}))


def build_page(source: Path, out: Path, timeout: int = 600) -> Page:
    """Execute ``source`` in a fresh kernel and write ``out/<name>.html``."""
    notebook, seconds, error = execute(source, timeout)
    body, _ = exporter().from_notebook_node(notebook)
    target = out / source.with_suffix(".html").name
    target.write_text(body, encoding="utf-8")
    return Page(source, target, _title(notebook, source.stem), seconds, _figures(notebook),
                len(EMBEDDED_PNG.findall(body)), error)


def write_index(pages: list[Page], out: Path) -> Path:
    rows = "".join(
        f'<tr><td><a href="{html.escape(page.html.name)}">{html.escape(page.title)}</a></td>'
        f"<td>{html.escape(page.notebook.name)}</td><td>{page.seconds:.0f} s</td><td>{page.embedded}</td>"
        f"<td>{'ok' if page.error is None else 'FAILED: ' + html.escape(page.error)}</td></tr>"
        for page in pages)
    index = out / "index.html"
    index.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Distributed Locks Lab</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.3em .8em;"
        "text-align:left}</style></head><body><h1>Distributed Locks Lab: the course book</h1>"
        "<p>Every page was executed on real ZooKeeper, etcd and Redis servers when this book was built; "
        "the plots and tables are that run's.</p><table><tr><th>Page</th><th>Notebook</th><th>Run time</th>"
        f"<th>Figures</th><th>Status</th></tr>{rows}</table></body></html>", encoding="utf-8")
    return index


def build(notebooks: list[Path], out: Path = OUT, timeout: int = 600, log=print) -> list[Page]:
    _find_templates()
    out.mkdir(parents=True, exist_ok=True)
    pages = []
    for source in notebooks:
        log(f"executing {source.name} ...")
        page = build_page(source, out, timeout)
        log(f"  {page.seconds:.0f} s, {page.embedded} figures" + (f", FAILED: {page.error}" if page.error else ""))
        pages.append(page)
    write_index(pages, out)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.book", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in notebooks/")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    started = time.monotonic()
    pages = build(args.notebooks or course_notebooks(), args.out, args.timeout)
    failed = [page.notebook.name for page in pages if page.error]
    print(f"book: {len(pages)} pages in {time.monotonic() - started:.0f} s -> {args.out / 'index.html'}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
