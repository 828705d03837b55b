"""A lesson's words as a speech engine should hear them: the markdown cells of a notebook,
split into sections at their headings, each turned into plain sentences.

Code cells and their outputs are left out. Inside the markdown, fenced code and display
math are dropped, a link is read as its text, inline `code` as its words, a table row as
its cells in a sentence, a heading as a sentence of its own, and the body of a
``<details>`` block (a hidden answer) is skipped: only its summary line is read.

    sections = lesson_sections("notebooks/07_partitions_and_client_side_expiry.ipynb")
    sections[0].title, sections[0].sentences
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
DETAILS = re.compile(r"<details>(.*?)</details>", re.S | re.I)
SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.S | re.I)
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$([^$\n]+)\$")
IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
AUTOLINK = re.compile(r"<https?://[^>]+>")
BARE_URL = re.compile(r"https?://\S+")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
TAG = re.compile(r"</?(?:details|summary|code|br|b|i|em|strong|kbd|sub|sup|span|div|p)\b[^>]*>", re.I)
EMPHASIS = [re.compile(r"\*\*(.+?)\*\*", re.S), re.compile(r"__(.+?)__", re.S),
            re.compile(r"(?<!\*)\*(?![\s*])(.+?)(?<![\s*])\*(?!\*)", re.S),
            re.compile(r"(?<![\w_])_(?!\s)(.+?)(?<!\s)_(?![\w_])", re.S)]
LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
# symbols a speech engine would read as their Unicode names, or not at all
SYMBOLS = {"→": " to ", "←": " from ", "≤": " at most ", "≥": " at least ", "≈": " about ",
           "×": " times ", "−": " minus ", "²": " squared", "⅔": " two thirds", "§": " section ",
           "·": ", ", "…": "...", "✕": "", "▼": "", "–": " to ", "—": ", "}
MATH_WORDS = {r"\le": " at most ", r"\ge": " at least ", r"\times": " times ", r"\cdot": " times ",
              r"\approx": " about ", r"\to": " to ", r"\ne": " not equal to "}


@dataclass(frozen=True)
class Section:
    """One heading and what follows it, up to the next heading: ``sentences`` are spoken
    one utterance each (Chrome cuts off one long utterance after about 15 seconds)."""
    title: str
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".!?:;" else text + "."


def _math(formula: str) -> str:
    for command, words in MATH_WORDS.items():
        formula = re.sub(re.escape(command) + r"(?![a-zA-Z])", words, formula)
    formula = re.sub(r"\\([a-zA-Z]+)", r"\1", formula).replace("^", " to the power ")
    return re.sub(r"[{}_\\]", " ", formula)


def _code_words(code: str) -> str:
    """`lab.zookeeper.client()` is read as "lab.zookeeper.client", `SET NX PX` as itself,
    `<lease>` as "lease", `on_event` as "on event", a query's `$token` as "token" and
    `tcp_keepalives_*` as "tcp keepalives settings"."""
    code = code.replace("()", "").replace("_*", " settings").replace("_", " ")
    return re.sub(r"[<>`{}\[\]$*\\]", " ", code)


def _table_row(line: str) -> str:
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return _sentence(", ".join(cell for cell in cells if cell))


def speakable(markdown: str) -> str:
    """Markdown as plain words: no markup, no code blocks, no URLs, no hidden answers."""
    markdown = DETAILS.sub(lambda m: "\n\n" + _sentence(" ".join(SUMMARY.findall(m.group(1)))) + "\n\n", markdown)
    markdown = DISPLAY_MATH.sub(" ", markdown)
    blocks, in_fence = [""], False  # one entry per paragraph, list item, heading or table row
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or TABLE_RULE.match(line) and "-" in line:
            continue
        line = re.sub(r"^\s*>\s?", "", line)
        heading = HEADING.match(line)
        if heading:
            blocks.extend([_sentence(heading.group(2)), ""])
        elif line.lstrip().startswith("|"):
            blocks.extend([_table_row(line), ""])
        elif not line.strip() or re.match(r"^\s*([-*_])(\s*\1){2,}\s*$", line):
            blocks.append("")
        elif LIST_MARK.match(line):
            blocks.append(LIST_MARK.sub("", line))
        else:
            blocks[-1] += " " + line.strip()  # a wrapped line goes on its paragraph or list item
    text = "\n\n".join(block for block in blocks if block.strip())
    spans: list[str] = []

    def hold(words: str) -> str:
        spans.append(words)
        return f"\x00{len(spans) - 1}\x00"

    text = CODE_SPAN.sub(lambda m: hold(_code_words(m.group(2))), text)
    text = INLINE_MATH.sub(lambda m: hold(_math(m.group(1))), text)
    text = IMAGE.sub(lambda m: m.group(1), text)
    text = LINK.sub(lambda m: m.group(1), text)
    text = BARE_URL.sub(" ", AUTOLINK.sub(" ", text))
    text = TAG.sub(" ", text)
    for pattern in EMPHASIS:
        text = pattern.sub(r"\1", text)
    text = re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], text)
    text = html.unescape(text).replace("\\", "")
    for symbol, words in SYMBOLS.items():
        text = text.replace(symbol, words)
    # an issue number ("etcd issue #15247") is said as a number, not as a heading mark
    text = re.sub(r"#(\d+)", r"number \1", text)
    # a comparison in prose ("renewDeadline < leaseDuration"), not markup: said as words
    text = re.sub(r"(?<=\s)<=?(?=\s)", lambda m: " at most " if m.group() == "<=" else " less than ", text)
    text = re.sub(r"(?<=\s)>=?(?=\s)", lambda m: " at least " if m.group() == ">=" else " more than ", text)
    paragraphs = [re.sub(r"\s+", " ", block).strip() for block in re.split(r"\n\s*\n", text)]
    text = " ".join(_sentence(block) for block in paragraphs if block.strip(" .,"))
    return re.sub(r"\s+([.,;:!?])", r"\1", text).replace(",.", ".").replace(":.", ".")


def sentences(text: str) -> tuple[str, ...]:
    return tuple(part for part in SENTENCE_END.split(text) if part.strip())


def split_sections(markdown_cells: list[str]) -> list[Section]:
    """The markdown cells, in order, cut at every heading; text before the first heading
    is a section of its own, titled "Introduction"."""
    sections: list[Section] = []
    title, lines = "", []

    def close() -> None:
        words = speakable("\n".join(lines))
        if words:
            sections.append(Section(title or "Introduction", sentences(words)))

    for cell in markdown_cells:
        in_fence = False
        for line in cell.splitlines():
            if FENCE.match(line):
                in_fence = not in_fence
            heading = None if in_fence else HEADING.match(line)
            if heading:
                close()
                title, lines = speakable(heading.group(2)).rstrip("."), []
            lines.append(line)
        lines.append("")
    close()
    return sections


def lesson_sections(notebook: str | Path) -> list[Section]:
    """The sections of a notebook file's markdown cells (its code cells are left out)."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    return split_sections(["".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                           for cell in cells if cell["cell_type"] == "markdown"])
