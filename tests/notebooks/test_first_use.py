"""Every term the course leans on is defined where it is first used (issue #35).

A term is *defined* in a markdown cell that sets it in emphasis (``**tickTime**``, ``*linearizable*``)
and says what it means there; this is how the course marks its definitions. Two rules:

* across the course, read in the order of the map in 00, the first cell that uses a term defines it;
* inside one notebook, no cell uses a term before the notebook's own definition of it (a
  notebook that defines a term again defines it at its first use there, not fifteen cells later).

Not counted as uses: a notebook's first cell (its goals name what it will teach), the map in 00
(it names what each lesson teaches) and the Sources sections (references, not teaching). Code
cells are not read. The table of each term's first use is in the failure message and in
``first_uses()``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"

# term: the pattern of a use (a whole word; the definition sets the same word in emphasis)
TERMS = {
    "tickTime": r"\btickTime\b",
    "syncLimit": r"\bsyncLimit\b",
    "linearizable": r"\blinearizab(?:le|ly)\b",
    "serializable": r"\bserializable\b",
    "jeopardy": r"\bjeopardy\b",
    "fencing token": r"\bfencing tokens?\b",
    "ephemeral": r"\bephemeral\b",
    "herd": r"\bherd\b",
}
# the numbers of 00's glossary ("- **czxid**: ..."), each used as a term; not "revision", a word
# every etcd number's name contains
GLOSSARY_HEADING = "## The numbers of this course"
GENERIC = {"revision"}
EMPHASIS = r"(?:\*\*?|_){word}(?:\*\*?|_)"
# Notebooks the per-notebook rule does not judge, each with why:
RECAPS = {
    # interview practice recaps every lesson: it names terms the lessons defined, and sets some in
    # bold again in its answers
    "11_interview_practice",
}


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def course_order() -> list[Path]:
    """The notebooks in the order of the map in 00 (numbered files, then the rest, if no map)."""
    start = NOTEBOOKS / "00_start_here.ipynb"
    [course_map] = [source(cell) for cell in json.loads(start.read_text(encoding="utf-8"))["cells"]
                    if source(cell).startswith("## The map of the course")]
    listed = [NOTEBOOKS / f"{name}.ipynb" for name in re.findall(r"^\| `([^`]+)`", course_map, flags=re.MULTILINE)]
    on_disk = sorted(NOTEBOOKS.glob("*.ipynb"))
    return [path for path in listed if path.exists()] + [path for path in on_disk if path not in listed]


def glossary() -> list[str]:
    """The terms 00's glossary defines, in its order."""
    start = NOTEBOOKS / "00_start_here.ipynb"
    [text] = [source(cell) for cell in json.loads(start.read_text(encoding="utf-8"))["cells"]
              if source(cell).startswith(GLOSSARY_HEADING)]
    return [term for term in re.findall(r"^- \*\*([^*]+)\*\*", text, flags=re.MULTILINE) if term not in GENERIC]


for _term in glossary():
    TERMS.setdefault(_term, r"\b" + re.escape(_term).replace(r"\ ", " ") + r"s?\b")


def teaching_cells(path: Path) -> list[tuple[int, str]]:
    """(index, text) of the markdown cells that teach: not the goals, the map or the sources."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(index, source(cell)) for index, cell in enumerate(cells)
            if index > 0 and cell["cell_type"] == "markdown"
            and not source(cell).lstrip().startswith(("## The map of the course", "## Sources"))]


def uses(term: str, text: str) -> bool:
    return re.search(TERMS[term], text, re.IGNORECASE) is not None


def defines(term: str, text: str) -> bool:
    word = TERMS[term].replace(r"\b", "")
    return re.search(EMPHASIS.format(word=word), text, re.IGNORECASE) is not None


def first_uses() -> dict[str, tuple[str, int, bool]]:
    """term -> (notebook, cell index, whether that cell defines it), the first use in the course."""
    found = {}
    for path in course_order():
        for index, text in teaching_cells(path):
            for term in TERMS:
                if term not in found and uses(term, text):
                    found[term] = (path.stem, index, defines(term, text))
    return found


def test_the_glossary_is_read():
    assert {"czxid", "create revision", "lease id", "fencing token"} <= set(glossary()) <= set(TERMS)


def test_every_term_is_used_somewhere():
    assert set(first_uses()) == set(TERMS), f"terms the course never uses: {set(TERMS) - set(first_uses())}"


def test_each_term_is_defined_at_its_first_use_in_the_course():
    table = first_uses()
    undefined = {term: where for term, where in table.items() if not where[2]}
    listing = "\n".join(f"  {term}: {notebook}[{index}]{'' if ok else '  <- used, not defined'}"
                        for term, (notebook, index, ok) in table.items())
    assert not undefined, f"a term is used before it is defined (first uses):\n{listing}"


@pytest.mark.parametrize("path", [path for path in course_order() if path.stem not in RECAPS], ids=lambda path: path.stem)
def test_a_notebook_defines_a_term_at_its_own_first_use(path):
    early = []
    cells = teaching_cells(path)
    for term in TERMS:
        defined_at = next((index for index, text in cells if defines(term, text)), None)
        if defined_at is None:
            continue
        used_at = next(index for index, text in cells if uses(term, text))
        if used_at < defined_at:
            early.append(f"{term}: used in cell {used_at}, defined in cell {defined_at}")
    assert not early, f"{path.stem} uses terms before it defines them:\n" + "\n".join(early)


def test_the_rules_catch_a_term_used_before_its_definition():
    assert uses("linearizable", "an etcd read is linearizable by default")
    assert not defines("linearizable", "an etcd read is linearizable by default")
    assert defines("linearizable", "a read is *linearizable* when it sees every write finished before it began")
    assert defines("tickTime", "**tickTime**, ZooKeeper's unit of time") and not defines("tickTime", "`tickTime`")
