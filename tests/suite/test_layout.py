"""The tests are laid out like the package (issue #35): every test file sits in a room,
``tests/<room>/test_<module or topic>.py``, where a room is a labkit subpackage or one of the
few rooms for what is no package (OTHER_ROOMS). Test file names are unique across the rooms:
pytest imports each test file by its name (the default prepend import mode, no __init__.py),
and tests/legs.py names the races by file name. Pure logic: the folder is read."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from labkit_imports import modules

pytestmark = pytest.mark.no_servers

TESTS = Path(__file__).resolve().parents[1]

# The rooms that are no labkit subpackage, each with what it holds.
OTHER_ROOMS = {
    "core": "labkit's top-level modules (labkit/*.py: progress, timing, errors, stats, vocabulary, cli)",
    "notebooks": "the notebooks and the course's text: claims, consistency, the map, times, figures, output",
    "suite": "the suite, its scripts and legs, and the code's own rules (sizes, imports, names, tested modules)",
    "hub": "the class hub (docker/hub/)",
}
# What stays directly in tests/: the shared files every room uses (tests/ is on sys.path, as
# conftest.py's folder).
SHARED = {"conftest.py", "helpers.py", "needs.py", "legs.py", "labkit_imports.py", "binder_replay.Dockerfile"}


def packages() -> set[str]:
    """labkit's subpackages (some have no __init__.py): the x of every module labkit.x.y."""
    return {name.split(".")[1] for name in modules() if name.count(".") >= 2}


def paths_of_tests() -> list[Path]:
    return sorted(path for path in TESTS.rglob("test_*.py") if "__pycache__" not in path.parts)


def rooms() -> set[str]:
    """The folders of tests/ that hold a file (one left with only a __pycache__ is no room)."""
    return {path.name for path in TESTS.iterdir() if path.is_dir() and path.name != "__pycache__"
            and any(inner.is_file() and "__pycache__" not in inner.parts for inner in path.rglob("*"))}


def test_no_test_file_sits_directly_in_tests():
    flat = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert not flat, f"move each into its room, tests/<room>/ (a labkit subpackage, or one of {sorted(OTHER_ROOMS)}): {flat}"


def test_every_test_file_sits_one_room_deep():
    deeper = [str(path.relative_to(TESTS)) for path in paths_of_tests() if len(path.relative_to(TESTS).parts) != 2]
    assert not deeper, f"a test file sits in tests/<room>/, no deeper: {deeper}"


def test_every_room_is_a_labkit_subpackage_or_a_named_other_room():
    unknown = sorted(rooms() - packages() - set(OTHER_ROOMS))
    assert not unknown, (f"rooms that are no labkit subpackage ({sorted(packages())}) and not in OTHER_ROOMS: {unknown}")
    assert not set(OTHER_ROOMS) & packages(), "an other room named like a labkit subpackage is that subpackage's room"


def test_every_room_holds_tests():
    empty = sorted(room for room in rooms() if not list((TESTS / room).glob("test_*.py")))
    assert not empty, f"rooms with no test file: {empty}"


def test_test_file_names_are_unique_across_rooms():
    twice = sorted(name for name, count in Counter(path.name for path in paths_of_tests()).items() if count > 1)
    assert not twice, f"test files of the same name in two rooms (pytest imports a test file by its name): {twice}"


def test_no_room_is_a_python_package():
    packaged = sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("__init__.py"))
    assert not packaged, f"the rooms are plain folders, their files imported by name: {packaged}"


def test_only_the_shared_files_stay_in_tests():
    files = {path.name for path in TESTS.iterdir() if path.is_file()}
    assert files <= SHARED, f"files directly in tests/ that are no shared file: {sorted(files - SHARED)}"
    assert {"conftest.py", "helpers.py"} <= files


def test_the_layout_sees_the_rooms():
    # the checks above would pass on an empty tree: these rooms and files are known to be there
    assert {"servers", "locks", "suite", "notebooks"} <= rooms() and {"servers", "locks", "widgets"} <= packages()
    assert TESTS / "suite" / "test_layout.py" in paths_of_tests() and len(paths_of_tests()) > 100
