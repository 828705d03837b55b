"""Do the practice cards' links resolve? Each card names notebook sections that prove it.

``link_status(folder)`` reads the course notebooks in ``folder`` and, for every link of
every card, says whether that notebook has a markdown heading with exactly that text.
A notebook that is not in the folder yet is reported as "not written yet", not as broken.

What can fail: a notebook file that is not valid JSON raises ``json.JSONDecodeError``.
"""
from __future__ import annotations

import json
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
