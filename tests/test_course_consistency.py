"""The course says one thing in every place it says it. Pure logic: files are read, nothing runs.

* Names and minutes: the map in 00, each notebook's first cell, README's table and
  docs/INSTRUCTOR.md's per-notebook headings list the same notebooks with the same minutes.
* Measured claims: a bound or ratio docs/INSTRUCTOR.md quotes under a notebook's heading is
  followed by a hidden marker ``<!-- assert: EXPR -->``; that notebook has an ``assert``
  containing EXPR, and every number written in EXPR is also written in the prose just before
  the marker, so the guide cannot quote one bound while the notebook checks another. A ratio
  or fraction of a timeout written in an Expected or Timing line without a marker fails.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
INSTRUCTOR = ROOT / "docs" / "INSTRUCTOR.md"
MINUTES = re.compile(r"(\d+)(?:\s*[–-]\s*(\d+))?\s*min(?:utes)?\b")
MARKER = re.compile(r"<!--\s*assert:\s*(.*?)\s*-->", re.DOTALL)
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
# a ratio ("2x", "3 times") or a fraction of something ("0.7 of", "0.8 ×", "20 % of")
RATIO_OR_FRACTION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:x\b|×|times\b)|\b0\.\d+\s+of\b|\b\d+(?:\.\d+)?\s*%\s*of\b")


def minutes(text: str) -> tuple[int, ...]:
    """Every "N min" / "N–M minutes" in ``text``, flattened; "open-ended" reads as ()."""
    return tuple(int(number) for match in MINUTES.finditer(text) for number in match.groups() if number)


def cells(name: str) -> list[dict]:
    return json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def course_map() -> dict[str, tuple[int, ...]]:
    [text] = [source(cell) for cell in cells("00_start_here")
              if cell["cell_type"] == "markdown" and source(cell).startswith("## The map of the course")]
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            first, *_, time = [column.strip() for column in line.strip("|").split("|")]
            rows[re.search(r"`([^`]+)`", first).group(1)] = minutes(time)
    return rows


def header_minutes(name: str) -> tuple[int, ...] | None:
    """The minutes a notebook's first cell announces, before what it says about its run time."""
    first = source(cells(name)[0])
    text = re.split(r"notebook runs|runs in", first)[0]
    found = minutes(text)
    return found or None


def readme_table() -> dict[str, tuple[int, ...]]:
    rows = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `([^`]+)\.ipynb` \|.*\| ([^|]*) \|$", line)
        if match:
            rows[match.group(1)] = minutes(match.group(2))
    return rows


def instructor_sections() -> dict[str, tuple[tuple[int, ...], str]]:
    """Per notebook (by its map name): the minutes of its INSTRUCTOR.md heading and its text."""
    text = INSTRUCTOR.read_text(encoding="utf-8")
    names = {name[:2]: name for name in course_map() if name[:2].isdigit()}
    sections = {}
    parts = re.split(r"^### (.+)$", text, flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2]):
        key = heading.split()[0]
        name = names.get(key, key)
        time = re.search(r"\(([^;)]*)", heading)
        sections[name] = (minutes(time.group(1)) if time else (), body.split("\n## ")[0])
    return sections


def asserts_of(name: str) -> list[str]:
    """Every assert statement of a notebook, continuation lines joined, whitespace collapsed."""
    found = []
    for cell in cells(name):
        if cell["cell_type"] != "code":
            continue
        lines = source(cell).splitlines()
        for index, line in enumerate(lines):
            if re.match(r"\s*assert\b", line):
                indent = len(line) - len(line.lstrip())
                statement = [line]
                for follower in lines[index + 1:]:
                    if follower.strip() and len(follower) - len(follower.lstrip()) <= indent:
                        break
                    statement.append(follower)
                found.append(" ".join(" ".join(statement).split()))
    return found


def test_the_map_the_notebooks_the_readme_and_the_guide_agree_on_names_and_minutes():
    course = course_map()
    on_disk = {path.stem for path in NOTEBOOKS.glob("*.ipynb")}
    assert set(course) == on_disk, f"the map in 00 and the notebooks folder differ: {set(course) ^ on_disk}"
    assert readme_table() == course, "README's table and the map in 00 differ"
    guide = instructor_sections()
    assert set(guide) == set(course), f"INSTRUCTOR.md's per-notebook headings and the map differ: {set(guide) ^ set(course)}"
    disagree = []
    for name, on_map in course.items():
        if guide[name][0] != on_map:
            disagree.append(f"{name}: map {on_map}, INSTRUCTOR.md {guide[name][0]}")
        header = header_minutes(name)
        if header is not None and header != on_map:
            disagree.append(f"{name}: map {on_map}, its first cell {header}")
        if header is None and on_map:
            disagree.append(f"{name}: map {on_map}, its first cell gives no time")
    assert not disagree, "minutes disagree:\n" + "\n".join(disagree)


def markers() -> list[tuple[str, str, str]]:
    """(notebook, assert expression, the prose before the marker) for every marker."""
    found = []
    for name, (_, body) in instructor_sections().items():
        for match in MARKER.finditer(body):
            before = MARKER.sub("", body[:match.start()])
            sentence = re.split(r"(?:\n\s*\n|\n- \*\*|[.;]\s)", before)[-1]
            found.append((name, match.group(1), sentence))
    return found


def test_the_guide_marks_its_measured_bounds():
    assert len(markers()) >= 15, "INSTRUCTOR.md should mark the bounds it quotes (<!-- assert: ... -->)"


@pytest.mark.parametrize("notebook, expression, prose", markers(), ids=[f"{n[:2]}:{e[:40]}" for n, e, _ in markers()])
def test_every_marked_bound_is_asserted_by_its_notebook_with_the_same_numbers(notebook, expression, prose):
    wanted = " ".join(expression.split())
    assert any(wanted in statement for statement in asserts_of(notebook)), (
        f"INSTRUCTOR.md says {notebook} asserts `{wanted}`, but no assert of that notebook contains it")
    written = {float(number) for number in NUMBER.findall(prose.replace("−", "-"))}
    missing = [number for number in NUMBER.findall(wanted) if float(number) not in written]
    assert not missing, f"the assert `{wanted}` uses {missing}, which the guide's sentence does not say: {prose!r}"


def test_no_ratio_or_fraction_of_a_timeout_goes_unmarked():
    unmarked = []
    for name, (_, body) in instructor_sections().items():
        for paragraph in re.split(r"\n(?=- \*\*)", body):
            if not paragraph.startswith(("- **Expected", "- **Timing")):
                continue
            for match in RATIO_OR_FRACTION.finditer(paragraph):
                rest = paragraph[match.end():]
                if not MARKER.search(rest.split(". ")[0] if ". " in rest else rest):
                    unmarked.append(f"{name}: {match.group(0)!r} in {paragraph[max(0, match.start() - 60):match.end() + 20]!r}")
    assert not unmarked, "measured ratios or fractions with no assert marker:\n" + "\n".join(unmarked)
