"""The book's pages around the content: the table of contents (the course map's order, as
myst.yml listed it), previous/next links, the search box and the line that says where and
when the numbers on the page were measured.

Everything works from files opened straight from disk (file://), with no server: the search
index is a script (``search-index.js``, MyST's search records with the links made file names)
rather than a JSON file a page would have to fetch, and mermaid.js is a file beside the pages.
The search itself is a few lines of book.js (a record matches when it holds every word typed;
words in a page or section title count more) rather than minisearch from npm: one package
less to fetch and pin, and the course is small enough to scan whole on each keystroke.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from labkit.book import theme
from labkit.book.mermaid import mermaid_script
from labkit.servers.runners.discovery import doctor

HERE = Path(__file__).parent
ASSETS = ("book.css", "book.js")
SERVERS = ("zookeeper", "etcd", "redis", "postgres", "java")


@dataclass
class SitePage:
    slug: str
    title: str

    @property
    def file(self) -> str:
        return f"{self.slug}.html"


def site_pages(site: Path) -> list[SitePage]:
    """Every page in the order of myst.yml's table of contents; the first is ``index``."""
    config = json.loads((site / "config.json").read_text(encoding="utf-8"))
    [project] = config["projects"]
    first = json.loads((site / "content" / f"{project['index']}.json").read_text(encoding="utf-8"))
    pages = [SitePage(project["index"], first["frontmatter"].get("title", project["title"]))]
    return pages + [SitePage(page["slug"], page["title"]) for page in project["pages"] if "slug" in page]


def measured_on() -> str:
    """One line: when, on what, with which versions this book's numbers were measured."""
    versions = {item["name"]: item["version"] for item in doctor() if item["ok"] and item["version"]}
    try:
        labkit_version = metadata.version("labkit")
    except metadata.PackageNotFoundError:
        labkit_version = "(not installed)"
    servers = ", ".join(f"{name} {versions[name]}" for name in SERVERS if name in versions)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"The numbers, plots and maps on this page were measured on the machine that built this book, "
            f"on {when}: {platform.system()} {platform.machine()}, {os.cpu_count()} cores; "
            f"labkit {labkit_version}, Python {platform.python_version()}; {servers or 'no servers found'}. "
            "Run the notebook on yours and they will differ.")


def search_index(site: Path) -> list[dict]:
    """MyST's search records as the page's script reads them: page title, section, text, link."""
    records = json.loads((site / "myst.search.json").read_text(encoding="utf-8"))["records"]
    page = theme.Page(site / "public", "search")
    entries = []
    for record in records:
        levels = [value for _, value in sorted(record["hierarchy"].items()) if value]
        entries.append({"page": levels[0] if levels else "", "section": levels[-1] if levels else "",
                        "text": record.get("content", "")[:600], "href": page.href(record["url"])})
    return entries


def shell(page: SitePage, pages: list[SitePage], body: str, book_title: str, measured: str) -> str:
    """The whole HTML page around ``body``."""
    esc = theme.escape
    index = [p.slug for p in pages].index(page.slug)
    toc = "".join(f'<li{" class=current" if p.slug == page.slug else ""}><a href="{esc(p.file)}">{esc(p.title)}</a></li>'
                  for p in pages)
    before = pages[index - 1] if index > 0 else None
    after = pages[index + 1] if index + 1 < len(pages) else None
    pager = ((f'<a class="previous" rel="prev" href="{esc(before.file)}">← {esc(before.title)}</a>' if before else "<span></span>")
             + (f'<a class="next" rel="next" href="{esc(after.file)}">{esc(after.title)} →</a>' if after else "<span></span>"))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(page.title)} · {esc(book_title)}</title>
<link rel="stylesheet" href="book.css">
<script src="mermaid.min.js"></script><script src="search-index.js"></script><script src="book.js" defer></script>
</head><body>
<nav class="sidebar" aria-label="Table of contents">
<p class="book-title"><a href="index.html">{esc(book_title)}</a></p>
<div class="search"><input type="search" id="book-search" placeholder="Search the book" aria-label="Search the book">
<ol id="book-search-results"></ol></div>
<ul class="toc">{toc}</ul>
</nav>
<main>
<p class="measured">{esc(measured)}</p>
<article>{body}</article>
<nav class="pager" aria-label="Previous and next page">{pager}</nav>
</main></body></html>
"""


def write_site(site: Path, out: Path, book_title: str) -> list[Path]:
    """Render every page of the MyST ``site`` folder into ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    pages = site_pages(site)
    measured = measured_on()
    written = []
    for page in pages:
        tree = json.loads((site / "content" / f"{page.slug}.json").read_text(encoding="utf-8"))["mdast"]
        body = f"<h1>{theme.escape(page.title)}</h1>" + theme.render_node(tree, theme.Page(site / "public", page.slug))
        target = out / page.file
        target.write_text(shell(page, pages, body, book_title, measured), encoding="utf-8")
        written.append(target)
    for item in (site / "public").iterdir():
        if item.suffix.lower() in (".png", ".jpg", ".jpeg", ".svg", ".gif", ".webp"):
            shutil.copy(item, out / item.name)
    for name in ASSETS:
        shutil.copy(HERE / name, out / name)
    shutil.copy(mermaid_script(), out / "mermaid.min.js")
    entries = json.dumps(search_index(site), ensure_ascii=False).replace("</", "<\\/")
    (out / "search-index.js").write_text(f"window.BOOK_SEARCH = {entries};\n", encoding="utf-8")
    return written
