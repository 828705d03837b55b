"""The course book (labkit/book/): the course map's order, a failing notebook named with its
cell, and a fast subset (00 and the sandbox) executed on real servers and built with Jupyter
Book 2, then read as files and in Chromium (Debian's, through Playwright): navigation, a
search box that finds a word of 00, the Mermaid maps drawn, the read-aloud control, and the
TypeScript sandbox running a scenario with no kernel and no server.

The build needs Node.js and jupyter-book (the lock has it); those tests skip, saying which is
missing, where they are not there. Screenshots: scripts/maint/book_screenshots.py.
"""
from __future__ import annotations

import json
import platform
import re

import nbformat
import pytest

from labkit.book import NOTEBOOKS, build, course_notebooks, main
from labkit.book.mermaid import mermaid_script
from labkit.book.myst import NodeMissing, lesson_links, myst_command
from labkit.book.run import execute, map_order
from labkit.book.theme import RENDER, node_types
from labkit.errors import LabError

from helpers import chromium_browser, open_watched


def needs_the_tools():
    try:
        myst_command()
        mermaid_script()
    except LabError as missing:
        pytest.skip(str(missing))


@pytest.mark.no_servers
def test_the_book_follows_the_course_map():
    names = [notebook.stem for notebook in course_notebooks()]
    on_the_map = [name for name in map_order() if name in names]
    assert names[:len(on_the_map)] == on_the_map and names[0] == "00_start_here"
    assert names[9:12] == ["09_semaphores_and_elections", "10_fencing_a_database", "11_interview_practice"]
    assert names.index("sandbox") > names.index("08_redlock_and_clocks")
    assert sorted(names) == sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.no_servers
def test_lesson_names_become_links_to_pages_of_this_book_only():
    text = "Open `01_redis`, then `sandbox.ipynb`; `02_other` is not in this book; [`sandbox`](x.ipynb) stays."
    assert lesson_links(text, {"01_redis", "sandbox"}) == (
        "Open [`01_redis`](01_redis.ipynb), then [`sandbox.ipynb`](sandbox.ipynb); `02_other` is not in "
        "this book; [`sandbox`](x.ipynb) stays.")


@pytest.mark.no_servers
def test_no_node_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NodeMissing, match="Node.js 18") as raised:
        myst_command()
    assert "apt-get install nodejs" in str(raised.value)


@pytest.mark.no_servers
def test_a_notebook_that_raises_fails_the_build_and_names_its_cell(tmp_path, capsys):
    needs_the_tools()
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Broken on purpose"), nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("assert x == 2, 'the lesson claimed x is 2'")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "broken.ipynb")
    assert main([str(tmp_path / "broken.ipynb"), "--out", str(tmp_path / "out")]) == 1
    said = capsys.readouterr().err
    assert "FAILED: broken.ipynb, cell 3 (assert x == 2" in said and "the lesson claimed x is 2" in said
    page = (tmp_path / "out" / "html" / "index.html").read_text()
    assert "AssertionError" in page      # the page is built, showing the error


@pytest.mark.no_servers
def test_a_kernel_runs_over_ipc_quietly_and_leaves_no_sockets(tmp_path, monkeypatch, capfd):
    # Over TCP every kernel the book started warned "running over TCP without encryption" (one
    # line per notebook hid the build's real warnings), and its ports were picked free, then bound.
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "tiny.ipynb")
    run = execute(tmp_path / "tiny.ipynb", timeout=120)
    assert run.error is None, run.error
    assert run.notebook.cells[0].outputs[0]["text"] == "42\n"
    said = capfd.readouterr().err
    assert "without encryption" not in said and "WARNING" not in said, said
    assert not list((tmp_path / "runtime").glob("labkit-book-*")), "the kernel's IPC sockets were left behind"


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    needs_the_tools()
    out = tmp_path_factory.mktemp("book")
    runs = build([NOTEBOOKS / "sandbox.ipynb", NOTEBOOKS / "00_start_here.ipynb"], out, log=lambda _: None)
    for run in runs:
        assert run.error is None, f"{run.source.name}: {run.error}"
    return out, runs


@pytest.mark.slow
def test_the_pages_have_the_course_order_navigation_figures_and_where_they_were_measured(book):
    out, runs = book
    assert [run.source.name for run in runs] == ["00_start_here.ipynb", "sandbox.ipynb"]
    start, sandbox = (out / "html" / "index.html").read_text(), (out / "html" / "sandbox.html").read_text()
    for page in (start, sandbox):
        toc = re.search(r'<ul class="toc">(.*?)</ul>', page).group(1)
        assert re.findall(r'href="([^"]+)"', toc) == ["index.html", "sandbox.html"]
        assert f"Python {platform.python_version()}" in page and "measured on the machine that built this book" in page
        assert 'id="labkit-read-aloud-' in page
    assert 'rel="next" href="sandbox.html"' in start and 'rel="prev" href="index.html"' in sandbox
    assert re.search(r'<a href="sandbox.html[^"]*" class="xref">', start), "00 names the sandbox: a link to its page"
    for run, page in zip(runs, (start, sandbox)):
        assert run.figures >= 1, f"{run.source.name} made no figure when executed"
        images = re.findall(r'<img class="output" src="([^"]+)"', page)
        assert len(images) == run.figures and all((out / "html" / image).exists() for image in images)
    assert start.count('<pre class="mermaid">') >= 2 and 'id="labkit-map-' in start
    assert 'id="labkit-sandbox-' in sandbox
    assert not (NOTEBOOKS / "_build").exists() and not (out / "html" / "00_start_here.ipynb").exists()


@pytest.mark.slow
def test_every_node_type_of_the_book_has_html(book):
    out, _ = book
    found = set()
    for page in (out / "myst" / "_build" / "site" / "content").glob("*.json"):
        found |= node_types(json.loads(page.read_text())["mdast"])
    assert found and found <= set(RENDER), f"the theme would drop: {sorted(found - set(RENDER))}"


@pytest.fixture(scope="module")
def chromium():
    """The browser of the browser-marked tests (tests/needs.py: skipped or failed without it)."""
    with chromium_browser() as browser:
        yield browser


@pytest.mark.slow
@pytest.mark.browser
def test_in_chromium_search_maps_and_read_aloud_work_from_disk(book, chromium):
    out, _ = book
    page, requests, errors = open_watched(chromium, out / "html" / "sandbox.html", width=1300, height=900)
    page.fill("#book-search", "fencing token")      # words of 00 (the sandbox page has neither)
    page.locator("#book-search-results li a").first.wait_for(timeout=5000)
    hrefs = [link.get_attribute("href") for link in page.locator("#book-search-results li a").all()]
    assert any(href.startswith("index.html") for href in hrefs), hrefs
    page.locator('#book-search-results li a[href^="index.html"]').first.click()
    page.wait_for_url(re.compile(r"/index\.html"))
    maps = page.locator("pre.mermaid")
    page.wait_for_function("[...document.querySelectorAll('pre.mermaid')].every(p => p.querySelector('svg'))",
                           timeout=20000)
    assert maps.count() >= 2
    assert "Syntax error" not in page.locator("main").inner_text()    # mermaid draws its errors as an SVG
    assert page.locator("pre.mermaid .error-icon, pre.mermaid .error-text").count() == 0
    assert page.locator(".labkit-read-aloud").first.is_visible()
    assert not errors, errors
    assert [url for url in requests if not url.startswith(("file:", "data:"))] == []


@pytest.mark.slow
@pytest.mark.browser
def test_the_sandbox_page_runs_a_scenario_with_no_kernel_and_no_server(book, chromium):
    out, _ = book
    page, requests, errors = open_watched(chromium, out / "html" / "sandbox.html", width=1300, height=900)
    widget = page.locator("[id^=labkit-sandbox-]").first
    widget.locator(".sandbox-release").click()
    # six clients watch the parent: the release wakes the five waiters, and only c2 holds
    assert widget.locator(".sandbox-wakeups").inner_text().endswith("5")
    assert "c2: holding" in widget.locator(".sandbox-children").inner_text()
    assert not errors, errors
    assert [url for url in requests if not url.startswith(("file:", "data:"))] == []
