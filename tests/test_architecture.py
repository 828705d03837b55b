"""The tree keeps its shape: no import cycles, lower rooms never import higher ones, and no
module reaches for another module's private names (docs/ARCHITECTURE.md, the rule of imports).

Pure logic: the import graph is read from the source with ``ast``, nothing is imported."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

LABKIT = Path(__file__).resolve().parent.parent / "labkit"

# Lowest first. A module may import from its own room and from rooms before it.
ROOMS = ["errors", "timing", "stats", "vocabulary", "servers", "record", "locks", "faults", "clients",
         "plots", "torture", "lessons", "practice", "health", "widgets", "bench_network", "bench_scale", "bench", "cli",
         "book", "__init__"]


def module_name(path: Path) -> str:
    parts = path.relative_to(LABKIT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names, line) for every labkit import in ``path``, wherever it stands."""
    found = []
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    type_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                 and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING") for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in type_only:  # annotations only: never imported at run time
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names if alias.name.startswith("labkit")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            if module.startswith("labkit"):
                found.append((module, [alias.name for alias in node.names], node.lineno))
    return found


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in LABKIT.rglob("*.py")}


def resolve(target: str, names: list[str], known: dict[str, Path]) -> list[str]:
    """The labkit modules an import statement really depends on (``from labkit.x import y``
    depends on labkit.x.y when that is a module, else on labkit.x)."""
    resolved = [f"{target}.{name}" for name in names if f"{target}.{name}" in known]
    return resolved or [target]


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_cycles():
    known = modules()
    graph = {name: {dep for target, names, _ in imports_of(path) for dep in resolve(target, names, known)
                    if dep in known and dep != name}
             for name, path in known.items()}
    # a package's __init__ re-exports its room: it is not a dependency of the modules inside
    for name in graph:
        graph[name] = {dep for dep in graph[name] if not name.startswith(dep + ".")}
    visiting, done, cycles = set(), set(), []

    def visit(node: str, trail: list[str]) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append(trail[trail.index(node):] + [node])
            return
        visiting.add(node)
        for dep in sorted(graph[node]):
            visit(dep, trail + [node])
        visiting.discard(node)
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_lower_rooms_never_import_higher_ones():
    wrong, known = [], modules()
    for name, path in known.items():
        room = room_of(name)
        for target, names, line in imports_of(path):
            other = room_of(resolve(target, names, known)[0])
            if other != room and other in ROOMS and room in ROOMS and ROOMS.index(other) > ROOMS.index(room):
                wrong.append(f"{path.relative_to(LABKIT.parent)}:{line} ({room}) imports {target} ({other})")
    assert not wrong, "imports against the rule of docs/ARCHITECTURE.md:\n" + "\n".join(wrong)


def test_every_room_is_known():
    rooms = {room_of(name) for name in modules()}
    assert rooms <= set(ROOMS), f"add {sorted(rooms - set(ROOMS))} to ROOMS and to docs/ARCHITECTURE.md"


def test_no_private_names_across_modules():
    wrong = []
    for name, path in modules().items():
        for target, names, line in imports_of(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(LABKIT.parent)}:{line} imports {private} from {target}")
    assert not wrong, "\n".join(wrong)
