"""The lock maps in a real browser (Debian's Chromium through Playwright), drawn from small real
runs on one lab (tests/widgets/test_maps.py's runs):

- every map's Mermaid export renders with the ``mermaid`` npm package in Chromium, from a page
  on disk: npm fetches the pinned package (``npm pack``, its integrity checked) into a cache
  folder at test time, and the page may load nothing but files;
- in JupyterLab, selecting each node and each edge of the sequence map and of the lease flow
  shows its text, and the replay lights the edges in the recorded order, which the kernel then
  reads back from the widget;
- the static copy a page without a widget manager gets (a course book page) replays every map.

Skips with the reason when Chromium or Playwright is missing, and the Mermaid test when npm
cannot fetch the package. Screenshots go to artifacts/map_*.png.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import labkit
from labkit.book.mermaid import MermaidUnavailable
from labkit.book.mermaid import mermaid_script as book_mermaid_script
from labkit.widgets import maps
from labkit.widgets.map_widget import static_map_html

from helpers import CHROMIUM, CHROMIUM_ARGS, chromium_browser, open_watched, playwright_api
from test_maps import etcd_run, middle_waiter_run, zookeeper_run

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

pytestmark = [pytest.mark.browser]   # browser: skipped without Chromium, failed where expected (tests/needs.py)

from test_browser import open_lab, run_cell, serve_jupyter


@pytest.fixture(scope="module")
def runs():
    with labkit.up(zookeeper=1, etcd=1, redis=False, quiet=True) as lab:
        yield {"zookeeper": zookeeper_run(lab), "etcd": etcd_run(lab), "queue": middle_waiter_run(lab)}


def every_map(runs) -> dict[str, maps.LockMap]:
    return {"zookeeper sequence": maps.zookeeper_sequence(runs["zookeeper"]),
            "zookeeper architecture": maps.zookeeper_architecture(runs["zookeeper"]),
            "etcd lease flow": maps.etcd_lease_flow(runs["etcd"]),
            "etcd architecture": maps.etcd_architecture(runs["etcd"]),
            "zookeeper queue": maps.zookeeper_queue(runs["queue"])}


def mermaid_script() -> Path:
    """dist/mermaid.min.js of the pinned package, fetched once by npm (labkit/book/mermaid.py)."""
    try:
        return book_mermaid_script()
    except MermaidUnavailable as unavailable:
        pytest.skip(str(unavailable))


RENDER_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>mermaid</title><script src="mermaid.min.js"></script></head>
<body><div id="out"></div><script>
const texts = %s;
(async () => {
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
  const results = {};
  let count = 0;
  for (const [name, text] of Object.entries(texts)) {
    try {
      await mermaid.parse(text);
      const { svg } = await mermaid.render(`map${count++}`, text);
      const holder = document.createElement("div");
      holder.innerHTML = svg;
      document.getElementById("out").appendChild(holder);
      results[name] = { ok: true, text: holder.textContent };
    } catch (error) {
      results[name] = { ok: false, error: String((error && error.message) || error) };
    }
  }
  window.results = results;
})();
</script></body></html>
"""


@pytest.fixture
def browser():
    with chromium_browser() as chromium:
        yield chromium


def test_every_exported_map_renders_with_mermaid_in_chromium(runs, browser, tmp_path):
    shutil.copy(mermaid_script(), tmp_path / "mermaid.min.js")
    drawn = every_map(runs)
    page_file = tmp_path / "maps.html"
    page_file.write_text(RENDER_PAGE % json.dumps({name: lock_map.to_mermaid() for name, lock_map in drawn.items()}),
                         encoding="utf-8")
    page, requests, errors = open_watched(browser, page_file)
    page.wait_for_function("window.results !== undefined", timeout=60_000)
    results = page.evaluate("window.results")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "map_mermaid.png"), full_page=True)
    assert errors == [], f"the page raised: {errors}"
    assert all(url.startswith("file://") for url in requests), f"the page fetched {requests}"
    for name, lock_map in drawn.items():
        assert results[name]["ok"], f"Mermaid refused the {name}: {results[name].get('error')}\n{lock_map.to_mermaid()}"
        shown = " ".join(results[name]["text"].split())
        for node in lock_map.nodes:
            assert " ".join(node.label.split()) in shown, f"{name}: {node.label!r} not drawn"


CELLS = [
    "import json\nfrom labkit.record.events import Event\nfrom labkit.record.history import History\n"
    "from labkit.widgets import maps\n"
    "zookeeper_run = History(Event.from_dict(row) for row in json.loads({zookeeper!r}))\n"
    "sequence = maps.zookeeper_sequence(zookeeper_run).widget(pace=100)\nsequence",
    "print('lit:', ' '.join(sequence.lit))",
    "etcd_run = History(Event.from_dict(row) for row in json.loads({etcd!r}))\n"
    "flow = maps.etcd_lease_flow(etcd_run).widget(pace=100)\nflow",
]


def notebook_of(runs, folder: Path) -> Path:
    events = {name: json.dumps([event.to_dict() for event in runs[name].events()]) for name in ("zookeeper", "etcd")}
    cells = [{"cell_type": "code", "execution_count": None, "id": f"map-{index}", "metadata": {}, "outputs": [],
              "source": source.format(**events)} for index, source in enumerate(CELLS)]
    notebook = folder / "maps.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}))
    return notebook


def select_everything(tab, root, lock_map: maps.LockMap) -> None:
    """Click every node and edge of the map drawn in ``root``; each shows its own text."""
    details = root.locator(".labkit-map-details")
    first = lock_map.started()
    for node in lock_map.nodes:
        root.locator(f".labkit-map-node[data-id='{node.id}']").click()
        assert node.why in details.inner_text(), f"{node.id}: {details.inner_text()}"
    for edge in lock_map.edges:    # an edge's label is where a learner clicks it
        root.locator(f".labkit-map-edge[data-id='{edge.id}'] .labkit-map-label-back").click()
        shown = " ".join(details.inner_text().split())
        for text in (edge.protocol, edge.direction, edge.effect, edge.consequence):
            assert " ".join(text.split()) in shown, f"{edge.id}: {shown}"
        run = details.locator(".labkit-map-run").inner_text()
        assert run == ("; ".join(f"step {step.number} ({step.client}) at +{step.time - first:.3f} s"
                                 for step in edge.steps) or "not in this run"), f"{edge.id}: {run}"


def replay_order(tab, root) -> list[str]:
    root.locator(".labkit-map-replay").click()
    tab.wait_for_function("root => root.dataset.replayed === 'done'", arg=root.element_handle(), timeout=30_000)
    return root.get_attribute("data-lit").split()


@pytest.mark.slow
def test_select_and_replay_in_jupyterlab(runs, tmp_path):
    sequence, flow = maps.zookeeper_sequence(runs["zookeeper"]), maps.etcd_lease_flow(runs["etcd"])
    (tmp_path / "source").mkdir()
    notebook = notebook_of(runs, tmp_path / "source")
    with serve_jupyter(tmp_path, [notebook]) as [url], playwright_api().sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = chromium.new_page(viewport={"width": 1400, "height": 1100})
            open_lab(tab, url)
            run_cell(tab, 0)
            root = tab.locator(".labkit-map[data-kind='sequence']")
            root.wait_for(timeout=60_000)
            select_everything(tab, root, sequence)
            expected = [edge_id for edge_id, _ in sequence.replay()]
            assert replay_order(tab, root) == expected, "the replay lights the edges in the recorded order"
            ARTIFACTS.mkdir(exist_ok=True)
            root.screenshot(path=str(ARTIFACTS / "map_sequence.png"))
            run_cell(tab, 1)
            said = tab.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea").inner_text()
            assert said.strip() == "lit: " + " ".join(expected), f"the kernel read back {said!r}"

            run_cell(tab, 2)
            root = tab.locator(".labkit-map[data-kind='flow']")
            root.wait_for(timeout=60_000)
            select_everything(tab, root, flow)
            assert replay_order(tab, root) == [edge_id for edge_id, _ in flow.replay()]
            root.screenshot(path=str(ARTIFACTS / "map_lease_flow.png"))
        finally:
            chromium.close()


def test_the_static_copy_replays_every_map_with_no_kernel(runs, browser, tmp_path):
    """The HTML a page without a widget manager gets (a course book page): the same module,
    loaded from a data: URL, draws each map and replays it in the recorded order."""
    drawn = every_map(runs)
    page_file = tmp_path / "static.html"
    page_file.write_text('<!doctype html><html><head><meta charset="utf-8"><title>maps</title></head><body>'
                         + "".join(static_map_html(lock_map.as_state(), f"map{index}", pace=20)
                                   for index, lock_map in enumerate(drawn.values())) + "</body></html>",
                         encoding="utf-8")
    page, requests, errors = open_watched(browser, page_file)
    page.wait_for_function(f"document.querySelectorAll('.labkit-map').length === {len(drawn)}", timeout=15_000)
    for index, lock_map in enumerate(drawn.values()):
        root = page.locator(f"#labkit-map-map{index} .labkit-map")
        assert replay_order(page, root) == [edge_id for edge_id, _ in lock_map.replay()], lock_map.title
    # a narrow column (the book's page beside its sidebar): every map stays inside it, and a
    # map wider than the column scrolls inside its own frame (a queue's last client was cut off)
    page.set_viewport_size({"width": 640, "height": 900})
    sizes = page.evaluate("""() => [...document.querySelectorAll('.labkit-map')].map((map) => {
        const frame = map.querySelector('.labkit-map-frame'), picture = frame.querySelector('svg');
        return {title: map.querySelector('.labkit-map-title').textContent, right: frame.getBoundingClientRect().right,
                scroll: frame.scrollWidth, picture: picture.getBoundingClientRect().width};
    })""")
    for size in sizes:
        assert size["right"] <= 640, f"{size['title']}: the map runs past the page's edge ({size['right']:.0f} px)"
        assert size["scroll"] >= size["picture"] - 1, f"{size['title']}: part of the map cannot be scrolled to"
    assert any(size["scroll"] > 640 for size in sizes), "no map was wider than the column: the check saw nothing"
    assert errors == [], f"the page raised: {errors}"
    assert all(url.startswith(("file://", "data:")) for url in requests), f"the page fetched {requests}"
