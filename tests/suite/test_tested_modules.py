"""Every labkit module is imported by some test: a module no test imports is code nothing
checks. The list of those, if any, is the failure.

A test imports a module when one of its files (under tests/) says ``import labkit.x.y`` or
``from labkit.x import y`` (y the module, or a name labkit.x hands on from it: the package's
``from labkit.x.y import name`` counts for labkit.x.y). Two more ways count, each because the
tests run the code for real: a package face (an ``__init__.py`` that defines nothing, only
hands names on) runs whenever a module inside it is imported; and a module that a test or a
tested module runs as a process of its own (an argv with ``"-m", "labkit.x.y"``; for
``labkit.book``, its ``__main__``) runs whenever its launcher does.

ALLOWED lists the modules that are checked otherwise, each with how; TO_DO the modules no test
imports yet (issue #35): remove one once a test imports it (the test then says so), and never
add a new module to it. Pure logic: the files are read with ``ast``, nothing is imported."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from labkit_imports import imports_of, modules, parse

pytestmark = pytest.mark.no_servers

TESTS = Path(__file__).resolve().parents[1]
imports_in = functools.cache(imports_of)   # the same files are asked about again and again

# Checked otherwise, each with how (an entry counts for the modules inside it too). Keep it short.
ALLOWED = {
    "labkit.course": "the course layer: each lesson's facade is what its notebook runs (nbval runs every "
                     "notebook in scripts/ci, and tests/course/test_course_layer.py checks each opens with its lesson)",
    "labkit.book.__main__": "`python -m labkit.book`: it calls labkit.book.main, which tests/book/test_book.py runs",
}

# No test imports these yet: each wants a test of its own (tests/<its room>/test_<module>.py, #35).
# Empty since every module got one; never add to it.
TO_DO: set[str] = set()


def origin(module: str, name: str, known: dict[str, Path], depth: int = 0) -> str:
    """The module that defines ``name`` as ``from module import name`` reaches it: a submodule
    of that name, else the module a package's own imports hand it on from, else ``module``."""
    if f"{module}.{name}" in known:
        return f"{module}.{name}"
    if depth < 8 and module in known:
        for target, names, _ in imports_in(known[module]):
            if name in names:
                return origin(target, name, known, depth + 1)
    return module


def imported_by_tests(known: dict[str, Path]) -> set[str]:
    found, origins = set(), {}
    for path in sorted(TESTS.rglob("*.py")):
        for target, names, _ in imports_in(path):
            found.add(target)
            for name in names:
                if (target, name) not in origins:
                    origins[target, name] = origin(target, name, known)
                found.add(origins[target, name])
    return found


def is_face(path: Path) -> bool:
    """An __init__.py that defines nothing: only a docstring, imports and ``__all__``."""
    for node in parse(path).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(target) for target in node.targets] == ["__all__"]:
            continue
        return False
    return True


def launched_by(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules ``path`` runs as processes: a ``"-m", "labkit.x.y"`` pair in a list or tuple
    (an argv), for a package its ``__main__``."""
    launched = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, (ast.List, ast.Tuple)):
            words = [item.value if isinstance(item, ast.Constant) else None for item in node.elts]
            for flag, name in zip(words, words[1:]):
                if flag == "-m" and isinstance(name, str):
                    launched |= {module for module in (name, f"{name}.__main__") if module in known}
    return launched


def reached_by_tests(known: dict[str, Path]) -> set[str]:
    """The modules the tests import, with the faces and launched processes that brings in."""
    launches = {name: launched_by(path, known) for name, path in known.items()}
    faces = {name for name, path in known.items() if path.name == "__init__.py" and is_face(path)}
    reached = imported_by_tests(known) & set(known)
    reached |= {name for path in TESTS.rglob("*.py") for name in launched_by(path, known)}
    while True:
        more = {name for name in faces - reached if any(other.startswith(name + ".") for other in reached)}
        more |= {launched for name in reached for launched in launches[name]} - reached
        if not more:
            return reached
        reached |= more


@functools.cache
def reached() -> frozenset[str]:
    """reached_by_tests of the tree as it is (read once: three tests ask)."""
    return frozenset(reached_by_tests(modules()))


def untested() -> list[str]:
    known = set(modules()) - {"labkit"}   # the package's face: every test imports it
    return sorted(name for name in known - reached() if name not in TO_DO and not allowed(name))


def allowed(name: str) -> bool:
    return any(name == entry or name.startswith(entry + ".") for entry in ALLOWED)


def test_every_labkit_module_is_imported_by_a_test():
    assert not untested(), ("labkit modules no test imports (write a test that imports each, with real servers "
                            "where servers are involved):\n  " + "\n  ".join(untested()))


def test_every_module_left_to_do_is_still_untested_and_still_there():
    known = modules()
    gone = sorted((TO_DO | set(ALLOWED)) - set(known))
    done = sorted(TO_DO & reached())
    assert not gone, f"drop from TO_DO or ALLOWED, these modules are gone: {gone}"
    assert not done, f"drop from TO_DO, a test imports these now: {done}"


def test_the_count_sees_the_tests_imports():
    # direct, by a name a package hands on (LockPanel from labkit.widgets), a face, a launched process
    assert {"labkit.locks.zookeeper", "labkit.widgets.panel", "labkit.servers.network", "labkit.clients.child"} <= reached()
    assert "labkit.course.lesson00" not in reached(), "no test imports it (ALLOWED: its notebook runs it)"
