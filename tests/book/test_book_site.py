"""The book's pages around the content (labkit/book/site.py), on a small MyST site folder
written here in the layout jupyter-book leaves (config.json, content/<slug>.json,
myst.search.json, public/): the pages in the table of contents' order, each page's
previous/next links and its entry marked current, titles escaped, the search records with
MyST's /slug links made file names, the "measured on" line naming this machine's servers,
and write_site writing every page, the images, the assets and a search index a page can load
from disk. Pure logic: no server (mermaid.js from the cache, as tests/book/test_book.py)."""
from __future__ import annotations

import json
import os
import re

import pytest

from labkit.book.site import ASSETS, SitePage, measured_on, search_index, shell, site_pages, write_site
from labkit.errors import LabError
from labkit.servers.runners.discovery import doctor

pytestmark = pytest.mark.no_servers


def page_tree(text: str) -> dict:
    return {"mdast": {"type": "root", "children": [{"type": "paragraph", "children": [{"type": "text", "value": text}]}]}}


@pytest.fixture
def site(tmp_path):
    """A MyST site: index (its title from its front matter), two pages, a folder entry without a slug."""
    root = tmp_path / "site"
    (root / "content").mkdir(parents=True)
    (root / "public").mkdir()
    (root / "config.json").write_text(json.dumps({"projects": [{
        "index": "start", "title": "The project's title",
        "pages": [{"title": "a folder, no page", "level": 1}, {"slug": "redis", "title": "Redis & <locks>"},
                  {"slug": "etcd", "title": "etcd"}]}]}))
    (root / "content" / "start.json").write_text(json.dumps({"frontmatter": {"title": "Start here"},
                                                             **page_tree("first page words")}))
    (root / "content" / "redis.json").write_text(json.dumps(page_tree("SET NX PX")))
    (root / "content" / "etcd.json").write_text(json.dumps(page_tree("leases & revisions")))
    (root / "public" / "figure.png").write_bytes(b"\x89PNG not really")
    (root / "public" / "notes.txt").write_text("not an image")
    (root / "myst.search.json").write_text(json.dumps({"records": [
        {"hierarchy": {"lvl1": "Redis", "lvl2": "SET NX", "lvl3": None}, "content": "x" * 700, "url": "/redis#set-nx"},
        {"hierarchy": {"lvl1": "Start here"}, "content": "what a lock is", "url": "/"},
        {"hierarchy": {}, "url": "https://example.org/"}]}))
    return root


def test_the_pages_follow_the_table_of_contents_the_index_first(site):
    pages = site_pages(site)
    assert [(page.slug, page.title) for page in pages] == [("start", "Start here"), ("redis", "Redis & <locks>"),
                                                            ("etcd", "etcd")]
    assert pages[1].file == "redis.html"


def test_the_index_without_a_title_of_its_own_takes_the_projects(site):
    (site / "content" / "start.json").write_text(json.dumps({"frontmatter": {}, **page_tree("words")}))
    assert site_pages(site)[0].title == "The project's title"


def test_each_page_links_its_neighbours_and_marks_itself_current(site):
    pages = site_pages(site)
    first, middle, last = (shell(page, pages, "<p>body</p>", "The Book", "measured here") for page in pages)
    assert 'rel="prev"' not in first and 'rel="next" href="redis.html">Redis &amp; &lt;locks&gt; →' in first
    assert 'rel="prev" href="start.html">← Start here' in middle and 'rel="next" href="etcd.html">etcd →' in middle
    assert 'rel="next"' not in last and 'rel="prev" href="redis.html"' in last
    assert re.findall(r"<li class=current><a href=\"([^\"]+)\"", middle) == ["redis.html"]
    assert "<title>Redis &amp; &lt;locks&gt; · The Book</title>" in middle and "<locks>" not in middle
    assert "<p>body</p>" in middle and '<p class="measured">measured here</p>' in middle
    assert all(f'href="{page.file}"' in first for page in pages), "every page is in the table of contents"


def test_a_page_not_in_the_table_of_contents_has_no_shell(site):
    with pytest.raises(ValueError):
        shell(SitePage("elsewhere", "Elsewhere"), site_pages(site), "", "The Book", "")


def test_search_records_keep_page_and_section_and_link_to_files(site):
    redis, start, empty = search_index(site)
    assert redis == {"page": "Redis", "section": "SET NX", "text": "x" * 600, "href": "redis.html#set-nx"}
    assert start == {"page": "Start here", "section": "Start here", "text": "what a lock is", "href": "index.html"}
    assert empty == {"page": "", "section": "", "text": "", "href": "https://example.org/"}


def test_the_measured_line_names_the_servers_found_and_the_cores():
    line = measured_on()
    found = [item["name"] for item in doctor() if item["ok"] and item["version"]]
    assert f"{os.cpu_count()} cores" in line and re.search(r"on \d{4}-\d\d-\d\d \d\d:\d\d UTC", line)
    for name in ("zookeeper", "etcd", "redis"):
        assert (f"{name} " in line) == (name in found), (name, line)
    assert ("no servers found" in line) == (not {"zookeeper", "etcd", "redis", "postgres", "java"} & set(found))


def test_write_site_writes_every_page_its_images_assets_and_a_loadable_search_index(site, tmp_path):
    try:
        written = write_site(site, tmp_path / "html", "The Book")
    except LabError as missing:   # mermaid.js neither cached nor fetchable (tests/book/test_book.py skips so)
        pytest.skip(str(missing))
    out = tmp_path / "html"
    assert [path.name for path in written] == ["start.html", "redis.html", "etcd.html"]
    assert "leases &amp; revisions" in (out / "etcd.html").read_text() and "<h1>etcd</h1>" in (out / "etcd.html").read_text()
    assert (out / "figure.png").read_bytes() == b"\x89PNG not really" and not (out / "notes.txt").exists()
    assert all((out / name).stat().st_size > 0 for name in (*ASSETS, "mermaid.min.js"))
    script = (out / "search-index.js").read_text()
    assert script.startswith("window.BOOK_SEARCH = ") and script.endswith(";\n")
    assert json.loads(script[len("window.BOOK_SEARCH = "):-2]) == search_index(site)


def test_a_record_holding_a_closing_script_tag_cannot_end_the_index_script(site, tmp_path):
    records = json.loads((site / "myst.search.json").read_text())
    records["records"].append({"hierarchy": {"lvl1": "HTML"}, "content": "</script><script>alert(1)", "url": "/etcd"})
    (site / "myst.search.json").write_text(json.dumps(records))
    try:
        write_site(site, tmp_path / "html", "The Book")
    except LabError as missing:
        pytest.skip(str(missing))
    script = (tmp_path / "html" / "search-index.js").read_text()
    assert "</script>" not in script and "<\\/script>" in script
    assert json.loads(script[len("window.BOOK_SEARCH = "):-2])[-1]["text"] == "</script><script>alert(1)"
