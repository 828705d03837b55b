"""Small pieces several lessons share: a text table. (The queue of lock client processes
served in a known order is ``labkit.harness.queue``, which the health census uses too.)"""
from __future__ import annotations

from typing import Any


def table(rows: list[dict[str, Any]]) -> str:
    """Rows of equal keys as an aligned text table (print it)."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    cells = [[str(column) for column in columns]] + [[str(row.get(column, "")) for column in columns] for row in rows]
    widths = [max(len(line[index]) for line in cells) for index in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells)
