"""The book's theme: one page of MyST AST (what ``jupyter-book build --site`` writes) as HTML.

Why a theme of our own, in Python: MyST's own theme is a Remix server app fetched from
api.mystmd.org at build time, which a machine with no internet cannot reach, and npm has no
built copy of it. The pieces npm does have (``myst-to-html``) would add a Node dependency and
a package fetched at build time for what is a short walk over a small set of node types: the
course's notebooks use about twenty (paragraphs, headings, lists, tables, code, details, links
and the cells' outputs). Every type has its function in ``RENDER``; a type that is not there
raises ``UnrenderedNode`` (the build fails, naming the type and the page) rather than being
dropped, and tests/book/test_book.py checks that every type of the built book is known.

Outputs: for each cell output the richest form a static page can show, in this order: a
Mermaid map (``text/vnd.mermaid``, drawn in the page by mermaid.js) beside the map's own static
HTML, HTML (the read-aloud control, the maps and the TypeScript sandbox carry a copy that runs
with no kernel), PNG and SVG images, plain text. A widget with no static copy says that it
needs a running notebook.
"""
from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Callable

from labkit.errors import LabError

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class UnrenderedNode(LabError):
    """The MyST AST holds a node type this theme has no HTML for."""


class Page:
    """What rendering needs beside the AST: the site's public folder (outputs MyST wrote to
    files), and the page links (MyST's ``/slug`` urls) as file names."""

    def __init__(self, public: Path, name: str):
        self.public = public
        self.name = name

    def href(self, url: str) -> str:
        if not url.startswith("/"):
            return url
        path, _, anchor = url[1:].partition("#")
        target = (path or "index") + ".html"
        return target + ("#" + anchor if anchor else "")

    def content(self, value: dict) -> str:
        """One mime type's content: inline, or a file MyST wrote to the public folder."""
        if "content" in value:
            return value["content"]
        return (self.public / Path(value["path"]).name).read_text(encoding="utf-8")


def escape(text: str) -> str:
    return html.escape(text, quote=True)


def children(node: dict, page: Page) -> str:
    return "".join(render_node(child, page) for child in node.get("children", []))


def wrap(tag: str, attributes: str = "") -> Callable[[dict, Page], str]:
    return lambda node, page: f"<{tag}{attributes}>{children(node, page)}</{tag}>"


def heading(node: dict, page: Page) -> str:
    depth = min(int(node.get("depth", 2)), 6)
    anchor = node.get("html_id") or node.get("identifier") or ""
    link = f' <a class="anchor" href="#{escape(anchor)}">#</a>' if anchor else ""
    return f'<h{depth} id="{escape(anchor)}">{children(node, page)}{link}</h{depth}>'


def link(node: dict, page: Page) -> str:
    url = node.get("url", "")
    internal = node.get("internal") or url.startswith("/")
    outside = "" if internal else ' rel="noopener" target="_blank"'
    css_class = ' class="xref"' if internal else ""
    return f'<a href="{escape(page.href(url))}"{css_class}{outside}>{children(node, page)}</a>'


def code(node: dict, page: Page) -> str:
    language = escape(node.get("lang") or "")
    css_class = "cell-source" if node.get("executable") else "code"
    return f'<pre class="{css_class}" data-lang="{language}"><code>{escape(node.get("value", ""))}</code></pre>'


def list_(node: dict, page: Page) -> str:
    tag = "ol" if node.get("ordered") else "ul"
    start = f' start="{int(node["start"])}"' if node.get("ordered") and node.get("start") not in (None, 1) else ""
    return f"<{tag}{start}>{children(node, page)}</{tag}>"


def table_cell(node: dict, page: Page) -> str:
    tag = "th" if node.get("header") else "td"
    align = f' style="text-align:{escape(node["align"])}"' if node.get("align") else ""
    return f"<{tag}{align}>{children(node, page)}</{tag}>"


def image(node: dict, page: Page) -> str:
    url = node.get("url", "")
    source = url if "://" in url or url.startswith("data:") else Path(url).name   # MyST's copy in public/
    return f'<img src="{escape(source)}" alt="{escape(node.get("alt", ""))}">'


def mermaid(text: str) -> str:
    return f'<pre class="mermaid">{escape(text)}</pre>'


def output(node: dict, page: Page) -> str:
    data = node.get("jupyter_data", {})
    output_type = data.get("output_type")
    if output_type == "stream":
        stream = "stderr" if data.get("name") == "stderr" else "stdout"
        return f'<pre class="output {stream}">{escape(ANSI.sub("", "".join(data.get("text", ""))))}</pre>'
    if output_type == "error":
        lines = data.get("traceback", [])     # MyST joins the lines into one string; nbformat keeps a list
        trace = ANSI.sub("", lines if isinstance(lines, str) else "\n".join(lines))
        return f'<pre class="output error">{escape(trace)}</pre>'
    bundle = data.get("data", {})
    if "text/vnd.mermaid" in bundle:
        drawn = mermaid(page.content(bundle["text/vnd.mermaid"]))
        clickable = page.content(bundle["text/html"]) if "text/html" in bundle else ""
        return (f'<div class="output map">{clickable}<details class="mermaid-map" open><summary>The same map, '
                f'drawn by Mermaid from <code>to_mermaid()</code></summary>{drawn}</details></div>')
    if "text/html" in bundle:
        return f'<div class="output html">{page.content(bundle["text/html"])}</div>'
    for mime in ("image/png", "image/jpeg", "image/svg+xml"):
        if mime in bundle:
            value = bundle[mime]
            if "path" in value:
                return f'<img class="output" src="{escape(Path(value["path"]).name)}" alt="a figure of this run">'
            if mime == "image/svg+xml":
                return f'<div class="output">{value["content"]}</div>'
            return f'<img class="output" src="data:{mime};base64,{value["content"]}" alt="a figure of this run">'
    if WIDGET_VIEW in bundle:
        return ('<p class="output widget">An interactive widget is here in the notebook: it needs a running '
                'kernel, so open the notebook in JupyterLab (<code>./lab.sh start</code>) to use it.</p>')
    if "text/markdown" in bundle:
        return f'<pre class="output">{escape(page.content(bundle["text/markdown"]))}</pre>'
    if "text/plain" in bundle:
        return f'<pre class="output">{escape(ANSI.sub("", page.content(bundle["text/plain"])))}</pre>'
    return ""


def outputs(node: dict, page: Page) -> str:
    inner = children(node, page)
    return f'<div class="outputs">{inner}</div>' if inner else ""


RENDER: dict[str, Callable[[dict, Page], str]] = {
    "root": lambda node, page: children(node, page),
    "block": wrap("section", ' class="cell"'),
    "paragraph": wrap("p"),
    "heading": heading,
    "text": lambda node, page: escape(node.get("value", "")),
    "strong": wrap("strong"),
    "emphasis": wrap("em"),
    "delete": wrap("del"),
    "inlineCode": lambda node, page: f"<code>{escape(node.get('value', ''))}</code>",
    "code": code,
    "link": link,
    "crossReference": lambda node, page: link(dict(node, url=node.get("url") or "#" + node.get("identifier", "")), page),
    "list": list_,
    "listItem": wrap("li"),
    "table": wrap("table"),
    "tableRow": wrap("tr"),
    "tableCell": table_cell,
    "blockquote": wrap("blockquote"),
    "details": wrap("details"),
    "summary": wrap("summary"),
    "thematicBreak": lambda node, page: "<hr>",
    "break": lambda node, page: "<br>",
    "image": image,
    "inlineMath": lambda node, page: f'<code class="math">{escape(node.get("value", ""))}</code>',
    "math": lambda node, page: f'<pre class="math">{escape(node.get("value", ""))}</pre>',
    "html": lambda node, page: node.get("value", ""),
    "comment": lambda node, page: "",
    "mermaid": lambda node, page: mermaid(node.get("value", "")),
    "outputs": outputs,
    "output": output,
}


def render_node(node: dict, page: Page) -> str:
    function = RENDER.get(node.get("type", ""))
    if function is None:
        raise UnrenderedNode(f"{page.name}: the book's theme has no HTML for a MyST {node.get('type')!r} node",
                             hint="add a function for it to RENDER in labkit/book/theme.py")
    return function(node, page)


def node_types(node: dict) -> set[str]:
    """Every node type in the tree under ``node``."""
    found = {node.get("type", "")}
    for child in node.get("children", []):
        found |= node_types(child)
    return found
