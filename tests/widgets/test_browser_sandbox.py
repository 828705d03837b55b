"""The TypeScript sandbox in a real browser with no kernel and no server: a static HTML file
holds the widget's own ES module (labkit.practice.sandbox_widget.bundle(), what anywidget
sends to JupyterLab) and a stand-in for anywidget's model; headless Chromium opens it from
disk, the test clicks the widget's buttons and reads the wakeups from the rendered page.
A second test opens the lesson's own widget cell in JupyterLab, keeps the kernel busy with a
long sleep, and clicks: the widget still answers, since no click waits for the kernel.
Screenshots are kept in artifacts/sandbox_widget.png and artifacts/sandbox_widget_lab.png.

Needs Debian's Chromium (``apt-get install -y chromium``), as tests/widgets/test_browser.py does.
"""
import json
from pathlib import Path

import pytest

from labkit.practice.sandbox_widget import bundle

from helpers import CHROMIUM, CHROMIUM_ARGS, playwright_api

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "sandbox.ipynb"
WIDGET_CELL = "ts-sandbox-widget"   # the lesson's cell that shows the widget, by id

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"

pytestmark = [pytest.mark.browser]   # browser: skipped without Chromium, failed where expected (tests/needs.py)

from test_browser import open_lab, run_cell, serve_jupyter

# anywidget's model, as much of it as the widget uses: get, set, save_changes
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>sandbox</title></head>
<body><div id="app"></div>
<script type="module">
%s
const state = %s;
window.saved = [];
const model = { get: (name) => state[name], set: (name, value) => { state[name] = value; },
                save_changes: () => window.saved.push(JSON.stringify(state.wakeups)) };
render({ model, el: document.getElementById("app") });
window.state = state;
</script></body></html>
"""


def sandbox_page(folder: Path, strategy: str, clients: int) -> str:
    page = folder / "sandbox.html"
    page.write_text(PAGE % (bundle(), json.dumps({"strategy": strategy, "clients": clients, "wakeups": []})))
    return page.as_uri()


@pytest.fixture
def page():
    with playwright_api().sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1000, "height": 900})
            # the page must need nothing but itself: any request beyond the file fails the test
            requests = []
            tab.on("request", lambda request: requests.append(request.url))
            errors = []
            tab.on("pageerror", lambda error: errors.append(str(error)))
            yield tab
            assert errors == [], f"the page raised: {errors}"
            assert all(url.startswith("file://") for url in requests), f"the page fetched {requests}"
        finally:
            browser.close()


def text(page, selector: str) -> str:
    return page.locator(selector).inner_text()


@pytest.mark.no_servers
def test_the_widget_runs_the_recipe_in_chromium_with_no_kernel(page, tmp_path):
    page.goto(sandbox_page(tmp_path, "parent", 6))
    assert page.locator(".sandbox-child").count() == 6
    assert text(page, ".sandbox-wakeups") == "wakeups per release: no release yet"

    # six clients watch the parent: the holder's release wakes the five waiters, in the order
    # they last set their watch (c2..c5 set theirs again when c6's node was created)
    page.click(".sandbox-release")
    assert text(page, ".sandbox-woken") == "woken by the last action: 5 (c6, c2, c3, c4, c5)"
    assert text(page, ".sandbox-wakeups") == "wakeups per release: 5"
    assert page.evaluate("window.state.wakeups") == [5], "the count goes back to the kernel's model"

    # switch to the recipe: it starts over with six clients, and a release wakes one
    page.click(".sandbox-toggle")
    assert page.evaluate("window.state.strategy") == "predecessor"
    assert text(page, ".sandbox-toggle").startswith("watch: predecessor")
    page.click(".sandbox-release")
    assert text(page, ".sandbox-woken") == "woken by the last action: 1 (c2)"
    assert text(page, ".sandbox-wakeups") == "wakeups per release: 1"

    # a middle waiter dies: c4 wakes, re-checks and keeps waiting behind c2's node
    page.select_option(".sandbox-victim", "c3")
    page.click(".sandbox-kill")
    assert text(page, ".sandbox-woken") == "woken by the last action: 1 (c4)"
    assert "c2: holding" in text(page, ".sandbox-children")
    assert "re-checked; still waiting behind lock-0000000001; watching lock-0000000001" in text(page, ".sandbox-trace")

    # the holder's session expires: that releases the lock to c4
    page.select_option(".sandbox-victim", "c2")
    page.click(".sandbox-kill")
    assert "c4: holding" in text(page, ".sandbox-children")
    assert text(page, ".sandbox-wakeups") == "wakeups per release: 1, 1"

    # a newcomer takes the next sequence number: deletes do not free numbers
    page.click(".sandbox-add")
    newest = text(page, ".sandbox-children").splitlines()[-1]
    assert newest.startswith("lock-0000000006") and "c7: waiting" in newest
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "sandbox_widget.png"), full_page=True)


@pytest.mark.slow
def test_the_lessons_widget_answers_in_jupyterlab_while_the_kernel_is_busy(tmp_path):
    lesson = json.loads(LESSON.read_text(encoding="utf-8"))
    [widget_cell] = [cell for cell in lesson["cells"] if cell["id"] == WIDGET_CELL]
    # the lesson's handle first (labkit/course): the widget cell calls lesson.<name>
    widget_cell = dict(widget_cell, source=['import labkit\n', 'lesson = labkit.lesson("sandbox")\n']
                       + list(widget_cell["source"]))
    (tmp_path / "source").mkdir()
    notebook = tmp_path / "source" / "sandbox_widget.ipynb"
    busy = {"cell_type": "code", "execution_count": None, "id": "busy", "metadata": {}, "outputs": [],
            "source": ["import time\n", "time.sleep(300)   # the kernel is busy: no click may wait for it"]}
    notebook.write_text(json.dumps(dict(lesson, cells=[widget_cell, busy])), encoding="utf-8")
    with serve_jupyter(tmp_path, [notebook]) as [url], playwright_api().sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 1000})
            open_lab(tab, url)
            run_cell(tab, 0)
            tab.wait_for_selector(".sandbox-release", timeout=60_000)
            assert tab.locator(".sandbox-child").count() == 6
            # start the sleep, and wait until JupyterLab shows the cell running
            cells = tab.locator(".jp-Notebook .jp-Cell")
            cells.nth(1).locator(".jp-InputPrompt").click()
            tab.locator(".jp-NotebookPanel-toolbar [data-command='notebook:run-cell-and-select-next']").click()
            tab.wait_for_function("cell => /\\[\\*\\]/.test(cell.querySelector('.jp-InputPrompt')?.innerText || '')",
                                  arg=cells.nth(1).element_handle(), timeout=30_000)
            tab.click(".sandbox-release")
            assert text(tab, ".sandbox-wakeups") == "wakeups per release: 5"
            tab.click(".sandbox-toggle")
            tab.click(".sandbox-release")
            assert text(tab, ".sandbox-wakeups") == "wakeups per release: 1"
            assert "[*]" in cells.nth(1).locator(".jp-InputPrompt").inner_text(), "the kernel was busy all along"
            ARTIFACTS.mkdir(exist_ok=True)
            tab.screenshot(path=str(ARTIFACTS / "sandbox_widget_lab.png"))
            # end the sleep, so that Jupyter shuts an idle kernel down quickly
            tab.locator(".jp-NotebookPanel-toolbar [data-command='notebook:interrupt-kernel']").click()
            tab.wait_for_function("cell => /\\[\\d+\\]/.test(cell.querySelector('.jp-InputPrompt')?.innerText || '')",
                                  arg=cells.nth(1).element_handle(), timeout=30_000)
        finally:
            browser.close()
