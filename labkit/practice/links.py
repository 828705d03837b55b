"""Do the practice cards' links resolve? Each card names notebook sections that prove it.

``link_status(folder)`` reads the course notebooks in ``folder`` and, for every link of
every card, says whether that notebook has a markdown heading with exactly that text.
A notebook that is not in the folder yet is reported as "not written yet", not as broken.
``asserts_per_section(notebook)`` counts the ``assert`` statements in each heading's
section (its code cells up to the next heading of the same or a higher level, its
subsections included): a section that proves a card's answer has at least one.

What can fail: a notebook file that is not valid JSON raises ``json.JSONDecodeError``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from labkit.practice.cards import Card, CARDS

FOUND, MISSING, NOT_WRITTEN = "found", "MISSING", "not written yet"


def headings_of(notebook: Path) -> set[str]:
    """The texts of the markdown headings (any level) in a notebook file."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    headings = set()
    for cell in cells:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            headings |= {line.lstrip("#").strip() for line in source.splitlines() if line.startswith("#")}
    return headings


def link_status(folder: str | Path, cards: tuple[Card, ...] | list[Card] = CARDS) -> list[dict[str, str]]:
    """One row per (card, linked section): card id, notebook, heading, status."""
    folder = Path(folder)
    headings: dict[str, set[str] | None] = {}
    rows = []
    for card in cards:
        for notebook, heading in card.proves:
            if notebook not in headings:
                path = folder / notebook
                headings[notebook] = headings_of(path) if path.exists() else None
            found = headings[notebook]
            status = NOT_WRITTEN if found is None else (FOUND if heading in found else MISSING)
            rows.append({"card": card.id, "notebook": notebook, "section": heading, "status": status})
    return rows


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_ASSERT = re.compile(r"^\s*assert\b", re.MULTILINE)


def asserts_per_section(notebook: Path) -> dict[str, int]:
    """For each markdown heading of the notebook file: how many ``assert`` statements its
    section's code cells hold (a section runs to the next heading of its level or higher)."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    counts: dict[str, int] = {}
    open_sections: list[tuple[int, str]] = []   # (level, heading) of the sections we are inside
    for cell in cells:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            for line in source.splitlines():
                match = _HEADING.match(line)
                if match:
                    level, heading = len(match.group(1)), match.group(2)
                    open_sections = [(lvl, h) for lvl, h in open_sections if lvl < level] + [(level, heading)]
                    counts.setdefault(heading, 0)
        elif cell["cell_type"] == "code":
            found = len(_ASSERT.findall(source))
            for _, heading in open_sections:
                counts[heading] += found
    return counts
