"""labkit's import graph, read from the source with ``ast`` (nothing is imported): which labkit
modules there are and what each file imports, for tests/suite/test_architecture.py (the rule of
imports) and tests/suite/test_tested_modules.py (which modules no test imports). A file outside
labkit (a test) is read the same way."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

LABKIT = Path(__file__).resolve().parent.parent / "labkit"


def module_name(path: Path) -> str:
    parts = path.relative_to(LABKIT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names, line) for every labkit import in ``path``, wherever it stands, under
    ``if TYPE_CHECKING:`` too: an import for annotations is still a dependency."""
    found = []
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    for node in ast.walk(parse(path)):
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


@functools.cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


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
