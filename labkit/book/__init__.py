"""The course book: every notebook executed on real servers, then built with Jupyter Book 2.

    ./lab.sh book                              # every notebook -> book/_build/html/index.html
    python -m labkit.book notebooks/00_start_here.ipynb notebooks/sandbox.ipynb --out /tmp/book

Three steps, one module each:

1. ``run.py`` runs each notebook top to bottom in a fresh kernel (it starts and stops its own
   lab, as a learner's run does) and notes which cell of which notebook failed;
2. ``myst.py`` writes the executed copies (lesson names made links) and a ``myst.yml`` whose
   table of contents follows the course map in 00, and runs ``jupyter-book build --site``:
   MyST parses the notebooks, resolves the cross-references and writes each page's AST;
3. ``site.py`` + ``theme.py`` render that AST as static pages that work opened from disk:
   navigation, search, the Mermaid maps (``mermaid.py`` fetches mermaid.js once), and the
   read-aloud control, the maps and the TypeScript sandbox in their no-kernel forms.

What can fail: a cell that raises (its page is still built, showing the error; the build names
the notebook and the cell and exits 1); no Node.js or jupyter-book, MyST failing, mermaid.js
not fetchable: one ``LabError`` that says what to install, exit 1.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from labkit.book.mermaid import mermaid_script
from labkit.book.myst import build_site, myst_command, write_project
from labkit.book.run import (NOTEBOOKS, ROOT, STDERR_ON_PURPOSE_TAG, Run, course_notebooks, execute,
                             in_course_order, shows_stderr_on_purpose)
from labkit.book.site import write_site
from labkit.errors import LabError

__all__ = ["NOTEBOOKS", "ROOT", "OUT", "STDERR_ON_PURPOSE_TAG", "Run", "build", "course_notebooks", "main",
           "shows_stderr_on_purpose"]

OUT = ROOT / "book" / "_build"
TITLE = "Distributed Locks Lab"


def build(notebooks: list[Path], out: Path = OUT, timeout: int = 600, log=print) -> list[Run]:
    """Execute ``notebooks`` (put in the course map's order) and build the book in ``out``:
    ``out/html/index.html`` and a page per notebook; ``out/myst`` holds what MyST read."""
    myst_command()     # what the build needs after the long run, checked before it: Node.js, jupyter-book,
    mermaid_script()   # mermaid.js (each raises a LabError that says what to install)
    runs = []
    for source in in_course_order(notebooks):
        log(f"executing {source.name} ...")
        run = execute(source, timeout)
        log(f"  {run.seconds:.0f} s, {run.figures} figures" + (f", FAILED at {run.error}" if run.error else ""))
        runs.append(run)
    project = out / "myst"
    shutil.rmtree(project, ignore_errors=True)
    write_project(project, TITLE, {run.source.name: run.notebook for run in runs})
    log("jupyter-book build --site ...")
    site = build_site(project, timeout)
    shutil.rmtree(out / "html", ignore_errors=True)
    write_site(site, out / "html", TITLE)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.book", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in notebooks/")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        runs = build(args.notebooks or course_notebooks(), args.out, args.timeout)
    except LabError as error:
        print(f"book: {error}", file=sys.stderr)
        return 1
    failed = [f"{run.source.name}, {run.error}" for run in runs if run.error]
    print(f"book: {len(runs)} pages in {time.monotonic() - started:.0f} s -> {args.out / 'html' / 'index.html'}")
    for failure in failed:
        print(f"book: FAILED: {failure}", file=sys.stderr)
    return 1 if failed else 0
