"""The tree keeps its shape: no import cycles, lower rooms never import higher ones, and no
module reaches for another module's private names (docs/ARCHITECTURE.md, the rule of imports).

The rule sees everything a reader sees: imports under ``TYPE_CHECKING`` count like any other
(a type-only cycle is still a cycle a reader must untangle), and "private" covers an import
of ``_name``, an access ``obj._name`` to a name defined in another module,
``getattr(obj, "_name")`` and its kin, and a class overriding a base's ``_method`` across
modules.

Pure logic: the import graph is read from the source with ``ast``, nothing is imported."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from labkit_imports import LABKIT, imports_of, modules, parse, resolve, room_of

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

# Lowest first. A module may import from its own room and from rooms before it.
ROOMS = ["errors", "timing", "progress", "stats", "vocabulary", "servers", "record", "locks", "faults", "clients",
         "torture", "harness", "lessons", "practice", "health", "widgets", "bench", "cli", "book", "course", "__init__"]


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


# Inside servers/, lowest first: what every part shares, the runners, the network, the
# services, the assembly (docs/ARCHITECTURE.md, the servers row).
SERVER_PARTS = [("run_folder", "secret", "ports", "client_logs"), ("runners",), ("network",), ("services",),
                ("plan", "state", "live_labs", "start", "lab", "__init__")]


# Inside bench/, lowest first: the proxy's cost, the crowd at scale, the libraries learners
# use, the contender processes, the recipes' run, and the command that picks one.
BENCH_PARTS = [("network",), ("scale",), ("peers",), ("processes",), ("recipes",), ("command", "__main__", "__init__")]
PARTS = {"servers": SERVER_PARTS, "bench": BENCH_PARTS}


def part_of(module: str, room: str = "servers") -> int:
    name = (module.split(".") + ["__init__"])[2]
    found = [index for index, names in enumerate(PARTS[room]) if name in names]
    assert found, f"{module}: add it to a part of {room.upper()}_PARTS and to docs/ARCHITECTURE.md's {room} row"
    return found[0]


@pytest.mark.parametrize("room", PARTS)
def test_the_parts_of_a_room_import_only_lower_parts(room):
    wrong, known = [], modules()
    for name, path in known.items():
        if room_of(name) != room:
            continue
        for target, names, line in imports_of(path):
            other = resolve(target, names, known)[0]
            if room_of(other) == room and part_of(other, room) > part_of(name, room):
                wrong.append(f"{path.relative_to(LABKIT.parent)}:{line} imports {other}")
    assert not wrong, f"{room}/ parts importing a higher part:\n" + "\n".join(wrong)


def test_every_labkit_import_names_a_module_that_is_there():
    """A module that moved (servers/ was split into services/, runners/, network/ in #24)
    leaves no import of its old path behind, under TYPE_CHECKING either."""
    known = modules()
    stale = [f"{path.relative_to(LABKIT.parent)}:{line} imports {target}"
             for name, path in known.items() for target, names, line in imports_of(path)
             if not set(resolve(target, names, known)) <= set(known)]
    assert not stale, "imports of modules that are not there:\n" + "\n".join(stale)


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


# Reaching into a third party's or the standard library's internals, where no public API offers
# the same: each entry says why.
PRIVATE_ALLOWED = {
    ("labkit/locks/zookeeper_contact.py", "_connection"):
        "kazoo keeps the time of the server's last answer on its private connection object",
    ("labkit/locks/zookeeper_contact.py", "_session_timeout"):
        "kazoo offers the session timeout it asked for only as a private attribute",
    ("labkit/locks/redis_peers.py", "_uuid"):
        "pottery keeps the random value of a Redlock's current hold only in a private slot",
    ("labkit/clients/child.py", "_exit"): "os._exit is the standard library's documented way to end a child now",
    ("labkit/clients/crowd_worker.py", "_exit"): "os._exit is the standard library's documented way to end a child now",
}
PRIVATE_IDENTIFIER = re.compile(r"_(?!_)[A-Za-z0-9_]*[A-Za-z0-9]")


def private(name: object) -> bool:
    return isinstance(name, str) and name.startswith("_") and not name.startswith("__")


def defined_names(tree: ast.Module) -> set[str]:
    """Every name this module defines: functions, classes, assignments, attributes it sets
    (``self._x = ...``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def module_level_names(tree: ast.Module) -> set[str]:
    """Names bound by this module's top-level statements, imports aside."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {name.id for name in ast.walk(target) if isinstance(name, ast.Name)}
    return names


def owner_is_mine(value: ast.expr, local: set[str]) -> bool:
    return isinstance(value, ast.Name) and (value.id in ("self", "cls") or value.id in local)


def shown(path: Path) -> str:
    return str(path.relative_to(LABKIT.parent)) if path.is_relative_to(LABKIT.parent) else path.name


def private_reach(path: Path) -> list[str]:
    """``obj._x`` and ``getattr(obj, "_x")`` (setattr, hasattr, delattr) where obj is not
    self, cls or a module-level name of this module, and ``_x`` is defined in another module;
    and a private name written as a string anywhere else (a table of method names handed to
    another module that looks them up is a reach all the same)."""
    tree, relative = parse(path), shown(path)
    mine, local = defined_names(tree), module_level_names(tree)
    wrong = []
    looked_up = {id(node.args[1]) for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Name) and len(node.args) >= 2
                 and node.func.id in ("getattr", "setattr", "hasattr", "delattr")}  # judged as a call
    # where a private-looking string is not a name: TypeVar("_T") and a folder, root / "_build"
    not_names = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                 and ast.unparse(node.func) in ("TypeVar", "typing.TypeVar")}
    not_names |= {id(node.right) for node in ast.walk(tree) if isinstance(node, ast.BinOp)
                  and isinstance(node.op, ast.Div)}

    def flag(line: int, name: str, how: str) -> None:
        if (relative, name) not in PRIVATE_ALLOWED:
            wrong.append(f"{relative}:{line} {how}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and node.attr not in mine \
                and not owner_is_mine(node.value, local):
            flag(node.lineno, node.attr, f"reads {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2 \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") \
                and not owner_is_mine(node.args[0], set()):
            name = node.args[1]
            text = name.value if isinstance(name, ast.Constant) else \
                name.values[0].value if isinstance(name, ast.JoinedStr) and name.values \
                and isinstance(name.values[0], ast.Constant) else None
            if private(text) and (isinstance(name, ast.JoinedStr) or text not in mine):
                flag(node.lineno, text, f"calls {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and PRIVATE_IDENTIFIER.fullmatch(node.value) and id(node) not in looked_up | not_names:
            flag(node.lineno, node.value, f"names {node.value!r} in a string, for a lookup out of sight")
    return sorted(wrong, key=lambda line: int(line.split()[0].rsplit(":", 1)[1]))


def test_no_private_attributes_across_modules():
    wrong = [line for path in modules().values() for line in private_reach(path)]
    assert not wrong, "private names of other modules, reached through an object:\n" + "\n".join(wrong)


def test_every_allowed_private_reach_is_still_there():
    found = {(str(path.relative_to(LABKIT.parent)), node.attr) for path in modules().values()
             for node in ast.walk(parse(path)) if isinstance(node, ast.Attribute)}
    assert set(PRIVATE_ALLOWED) <= found, f"drop from PRIVATE_ALLOWED: {sorted(set(PRIVATE_ALLOWED) - found)}"


def classes(known: dict[str, Path]) -> dict[tuple[str, str], ast.ClassDef]:
    return {(name, node.name): node for name, path in known.items()
            for node in parse(path).body if isinstance(node, ast.ClassDef)}


def bound_names(module: str, known: dict[str, Path]) -> dict[str, str]:
    """What each name imported into ``module`` stands for: a module, or "module:Name"."""
    bound = {}
    path = known[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in parse(path).body:
        if isinstance(node, ast.If):  # TYPE_CHECKING blocks
            continue
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([target] if target else []))
            for alias in node.names:
                full = f"{target}.{alias.name}"
                bound[alias.asname or alias.name] = full if full in known else f"{target}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
    return bound


def find_class(module: str, name: str, known: dict[str, Path], all_classes: dict) -> tuple[str, str] | None:
    """Where class ``name`` as seen from ``module`` is defined, following re-exports."""
    for _ in range(10):
        if (module, name) in all_classes:
            return module, name
        if module not in known:
            return None
        target = bound_names(module, known).get(name)
        if target is None or ":" not in target:
            return None
        module, name = target.split(":")
    return None


def private_overrides(known: dict[str, Path]) -> list[str]:
    all_classes = classes(known)
    wrong = []

    def base_of(module: str, base: ast.expr) -> tuple[str, str] | None:
        if isinstance(base, ast.Name):
            return find_class(module, base.id, known, all_classes)
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            target = bound_names(module, known).get(base.value.id, base.value.id)
            return find_class(target, base.attr, known, all_classes)
        return None

    def methods(key: tuple[str, str]) -> set[str]:
        return {node.name for node in all_classes[key].body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def ancestors(key: tuple[str, str]) -> list[tuple[str, str]]:
        found = []
        for base in all_classes[key].bases:
            parent = base_of(key[0], base)
            if parent is not None:
                found += [parent] + ancestors(parent)
        return found

    for key, node in all_classes.items():
        for parent in ancestors(key):
            if parent[0] == key[0]:
                continue
            for name in sorted(name for name in methods(key) & methods(parent) if private(name)):
                wrong.append(f"{shown(known[key[0]])}:{node.lineno} {key[1]} overrides "
                             f"{parent[1]}.{name} of {parent[0]}")
    return wrong


def test_no_private_method_overridden_across_modules():
    wrong = private_overrides(modules())
    assert not wrong, "a class in one module replaces a private method of a class in another " \
                      "(the base should offer a public hook):\n" + "\n".join(wrong)


# ---- the checks see what they claim to see -------------------------------------------------------
def test_type_checking_imports_are_read():
    seen = []
    for path in modules().values():
        lines = {line for _, _, line in imports_of(path)}
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                seen += [(inner.lineno in lines, f"{shown(path)}:{inner.lineno}") for inner in node.body
                         if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("labkit")]
    assert seen, "no labkit import under TYPE_CHECKING left to check"
    assert all(read for read, _ in seen), [where for read, where in seen if not read]


def test_private_reach_is_found_in_a_sample(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class Mine:\n"
        "    def _own(self, other):\n"
        "        return self._own, other._own, __name__\n"          # mine: not flagged
        "def use(panel, timer):\n"
        "    panel._refresh()\n"                                     # flagged
        "    getattr(panel, '_refresh_clients')()\n"                 # flagged
        "    hasattr(panel, f'_refresh_{timer}')\n"                  # flagged
        "    return ('_redraw', 1)\n")                               # flagged
    found = private_reach(sample)
    assert [line.split()[0] for line in found] == ["sample.py:5", "sample.py:6", "sample.py:7", "sample.py:8"], found


def test_private_override_is_found_in_a_sample(tmp_path):
    (tmp_path / "base.py").write_text("class Base:\n    def _wait(self): ...\n    def run(self): ...\n")
    (tmp_path / "child.py").write_text("from labkit.base import Base\n"
                                      "class Child(Base):\n    def _wait(self): ...\n    def run(self): ...\n")
    found = private_overrides({"labkit.base": tmp_path / "base.py", "labkit.child": tmp_path / "child.py"})
    assert found == ["child.py:2 Child overrides Base._wait of labkit.base"]


# Rooms that may import labkit.lessons. Lessons are the leaves of the tree: what a notebook
# calls, and nothing else builds on them (what bench, health and practice shared with the
# lessons lives in labkit.harness).
LESSON_IMPORTERS_ALLOWED = {
    "course": "the course layer is the notebooks' face: each labkit/course/lessonNN.py re-exports what "
              "notebook NN calls, its experiments from labkit.lessons included",
    "cli": "`labkit races` runs the batches of lessons/holder_safety.py from the command line: "
           "the command is a lesson's experiment, repeated; `labkit bench --lesson10` runs lessons 09 and 10's "
           "measurements (semaphore, failover, fenced UPDATE) the same way",
}


def test_lessons_are_leaves():
    wrong, known = [], modules()
    for name, path in known.items():
        room = room_of(name)
        if room == "lessons" or room in LESSON_IMPORTERS_ALLOWED:
            continue
        for target, names, line in imports_of(path):
            if room_of(resolve(target, names, known)[0]) == "lessons":
                wrong.append(f"{path.relative_to(LABKIT.parent)}:{line} imports {target}")
    assert not wrong, "only notebooks import labkit.lessons (move what is shared to labkit/harness/):\n" + \
        "\n".join(wrong)
