"""Code files stay small enough to read in one sitting (docs/ARCHITECTURE.md, "Largest files,
and why"): a labkit or test Python file of more than 400 lines fails. Split such a file by idea (one
idea per module, as etcd's concurrency package does), or move data to a data file the
package ships (cards.json, scenarios.json); never squeeze lines together to pass.

Pure logic: the files are read as text, nothing is imported."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("labkit", "tests")
MOST_LINES = 400

# Files allowed to be longer, each with why. Empty on purpose: add one only with a reason a
# reviewer would accept (a file that is one idea and loses by being cut), and say it here.
ALLOWED: dict[str, str] = {}


def line_counts() -> dict[str, int]:
    return {str(path.relative_to(REPO)): len(path.read_text(encoding="utf-8").splitlines())
            for folder in FOLDERS for path in sorted((REPO / folder).rglob("*.py"))}


def test_no_code_file_is_longer_than_the_limit():
    long = {path: lines for path, lines in line_counts().items() if lines > MOST_LINES and path not in ALLOWED}
    assert not long, (f"code files of more than {MOST_LINES} lines: split each by idea, or move its data to a "
                      "data file, see docs/ARCHITECTURE.md:\n" +
                      "\n".join(f"  {path}: {lines}" for path, lines in sorted(long.items())))


def test_every_allowed_file_is_still_long():
    counts = line_counts()
    short = [path for path in ALLOWED if counts.get(path, 0) <= MOST_LINES]
    assert not short, f"remove from ALLOWED, they are gone or {MOST_LINES} lines or fewer now: {short}"


def test_the_count_sees_every_module():
    counts = line_counts()
    assert "labkit/locks/zookeeper.py" in counts and "labkit/practice/cards.py" in counts, sorted(counts)[:5]
    assert "tests/suite/test_file_sizes.py" in counts and "tests/conftest.py" in counts, sorted(counts)[-5:]
    assert all(lines > 0 for path, lines in counts.items() if not path.endswith("__init__.py"))
