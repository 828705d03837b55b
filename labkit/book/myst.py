"""The book's second half, part one: Jupyter Book 2 (MyST) reads the executed notebooks.

``jupyter-book`` 2 (in the lock) ships the MyST command line as one JavaScript file,
``jupyter_book/dist/jupyter-book.cjs``, run by Node 18 or later. Its Python wrapper would
download Node with nodeenv when none is found; with no internet that hangs or fails with a
traceback, so labkit runs the file with the machine's own ``node`` and says what to install
when there is none.

``jupyter-book build --site`` writes what a MyST site is made of: one JSON file per page (the
page's syntax tree, the MyST AST, with the notebooks' outputs, and cross-references already
resolved into links), ``config.json`` (the table of contents from ``myst.yml``) and
``myst.search.json`` (the search records). It then normally fetches a theme, the Remix
"book-theme" app, from api.mystmd.org. That app is not on npm and the machine that builds a
book may have no internet, so ``myst.yml`` names a local template of our own instead
(``template/template.yml``, a site template with no server): MyST writes its JSON and stops,
and labkit/book/theme.py renders the pages.

What can go wrong: no Node, or one older than 18 (``NodeMissing``); jupyter-book not installed
(``JupyterBookMissing``); MyST failing on a notebook (``MystFailed``, with its last lines).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat

from labkit.errors import LabError

TEMPLATE = Path(__file__).with_name("template")
NODE_MAJOR = 18


class NodeMissing(LabError):
    """No ``node`` on PATH, or one too old for MyST."""


class JupyterBookMissing(LabError):
    """The jupyter-book package (and so the MyST command line) is not installed."""


class MystFailed(LabError):
    """``jupyter-book build --site`` exited with an error."""


def myst_command() -> list[str]:
    """``node .../jupyter-book.cjs``: the MyST command line of the installed jupyter-book."""
    node = shutil.which("node")
    if node is None:
        raise NodeMissing("the course book needs Node.js 18 or later (MyST, inside jupyter-book, is JavaScript)",
                          hint="Debian/Ubuntu: sudo apt-get install nodejs; macOS: brew install node")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    major = re.match(r"v(\d+)", version)
    if major is None or int(major.group(1)) < NODE_MAJOR:
        raise NodeMissing(f"node {version or '(no version)'} is too old: MyST needs Node.js {NODE_MAJOR} or later",
                          hint="Debian 12+/Ubuntu 24.04+: sudo apt-get install nodejs; else nodejs.org")
    spec = importlib.util.find_spec("jupyter_book")
    script = Path(spec.origin).parent / "dist" / "jupyter-book.cjs" if spec and spec.origin else None
    if script is None or not script.exists():
        raise JupyterBookMissing("jupyter-book 2 is not installed in this Python",
                                 hint="./lab.sh setup installs it (requirements/lock.txt pins jupyter-book)")
    return [node, str(script)]


def lesson_links(text: str, lessons: set[str]) -> str:
    """Markdown ``text`` with every `` `NN_name` `` or `` `NN_name.ipynb` `` that names a page of
    this book made a link to it, which MyST resolves into a cross-reference."""
    def link(match: re.Match) -> str:
        name = match.group(1)
        return f"[{match.group(0)}]({name}.ipynb)" if name in lessons else match.group(0)
    # not already inside a link's text: `[`x`](...)` stays as it is
    return re.sub(r"(?<!\[)`([A-Za-z0-9_]+)(?:\.ipynb)?`(?!\]\()", link, text)


def write_project(folder: Path, title: str, notebooks: dict[str, object]) -> None:
    """``folder``: the executed notebooks (``name -> NotebookNode``, in book order) with
    their lesson names linked, ``myst.yml`` (their table of contents) and the template."""
    folder.mkdir(parents=True, exist_ok=True)
    lessons = {Path(name).stem for name in notebooks}
    for name, notebook in notebooks.items():
        for cell in notebook.cells:
            if cell.cell_type == "markdown":
                cell.source = lesson_links(cell.source, lessons)
        nbformat.write(notebook, folder / name)
    shutil.copytree(TEMPLATE, folder / "template", dirs_exist_ok=True)
    toc = "\n".join(f"    - file: {name}" for name in notebooks)
    (folder / "myst.yml").write_text(
        "# written by labkit/book/myst.py for each build\nversion: 1\nproject:\n"
        f"  title: {json.dumps(title)}\n  toc:\n{toc}\nsite:\n  template: ./template\n", encoding="utf-8")


def build_site(folder: Path, timeout: int = 600) -> Path:
    """Run ``jupyter-book build --site`` in ``folder``; the site folder it wrote."""
    command = myst_command() + ["build", "--site", "--ci"]
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "NO_COLOR": "1"})
    except subprocess.TimeoutExpired:
        raise MystFailed(f"jupyter-book build --site took more than {timeout} s", hint=f"run it by hand in {folder}")
    site = folder / "_build" / "site"
    if done.returncode != 0 or not (site / "config.json").exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise MystFailed(f"jupyter-book build --site failed (exit {done.returncode}):\n{tail}",
                         hint=f"the project it read is in {folder}")
    return site
