"""One name, one meaning: a public name defined at the top of two labkit modules means two
things to a reader who meets it (``RECIPES`` once meant the registry, a watch style and a
pair of recipes with deadlines), so the test fails on a second definition. And every
colour lives in labkit/vocabulary.py, named by what it shows.

Pure logic: the modules are read with ``ast``, nothing is imported."""
from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers

LABKIT = Path(__file__).resolve().parents[2] / "labkit"

# Names several modules define on purpose, each with why. Keep it small.
ALLOWED = {
    "main": "a module's entry point for `python -m` or a `labkit bench` part (bench/command, bench/network, "
            "bench/processes, bench/scale, book, cli, servers' docker image)",
    "run": "each benchmark module's measurement (bench/recipes, bench/network, bench/scale, bench/processes), "
           "always called through its module (`network.run`): the benchmarks share one shape",
    "report": "each benchmark module's text report of its own results, called through its module",
    "PROPERTIES": "each auto-checked exercise names the properties it judges; exercises/report.py reads them",
    "SHAPE": "each lesson's facade (labkit/course/lessonNN.py) names the servers its lab starts; "
             "Lesson.lab reads it, always through the facade",
    "CASES": "the exercises with a table of cases name it alike, for the same reader (exercises/run.py)",
}
# Left to do, with why; remove an entry once its name has one definition (the test then
# says so). Only these may still be defined twice.
TO_DO: dict[str, str] = {}


def top_level_names(path: Path) -> set[str]:
    """Public names this module binds at its top level (functions, classes, assignments),
    imports aside: a re-export is not a second meaning."""
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {name.id for name in ast.walk(target) if isinstance(name, ast.Name)}
    return {name for name in names if not name.startswith("_")}


@functools.cache
def definitions() -> dict[str, list[str]]:
    where = defaultdict(list)
    for path in sorted(LABKIT.rglob("*.py")):
        if path.name != "__init__.py":
            for name in top_level_names(path):
                where[name].append(str(path.relative_to(LABKIT.parent)))
    return {name: modules for name, modules in where.items() if len(modules) > 1}


def test_a_public_name_is_defined_in_one_module():
    twice = {name: modules for name, modules in definitions().items() if name not in ALLOWED and name not in TO_DO}
    assert not twice, "one name, two meanings: rename one (or import the other):\n" + \
        "\n".join(f"{name}: {', '.join(modules)}" for name, modules in sorted(twice.items()))


def test_the_allowed_names_are_still_shared():
    shared = definitions()
    assert set(ALLOWED) <= set(shared), f"drop from ALLOWED, now defined once: {sorted(set(ALLOWED) - set(shared))}"


def test_the_proxy_script_binds_the_lab_host():
    """network/proxy.py runs on the standard library alone, so it keeps a private copy of
    servers/ports.py's HOST: the two must agree."""
    def host(path: Path, name: str) -> str:
        return next(node.value.value for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == name for t in node.targets))

    assert host(LABKIT / "servers/network/proxy.py", "_HOST") == host(LABKIT / "servers/ports.py", "HOST")


def test_a_second_definition_is_found_in_a_sample(tmp_path):
    (tmp_path / "a.py").write_text("RECIPES = {}\nfrom x import y\ndef _mine(): ...\n")
    (tmp_path / "b.py").write_text("RECIPES = ('zookeeper',)\ny = 1\n")
    assert top_level_names(tmp_path / "a.py") == {"RECIPES"}
    assert top_level_names(tmp_path / "b.py") == {"RECIPES", "y"}


# ---- colours ---------------------------------------------------------------------------------
NAMED_COLOURS = {"black", "white", "gray", "grey", "red", "green", "blue", "orange", "purple", "yellow",
                 "brown", "pink", "cyan", "magenta", "olive", "navy"}
COLOUR_TEXT = re.compile(r"#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?|tab:[a-z]+|xkcd:[a-z ]+")
CSS_COLOUR = re.compile(r"color:\s*(#[0-9a-fA-F]{3,6}|[a-z]+)\b")


def shown(path: Path) -> str:
    return str(path.relative_to(LABKIT.parent)) if path.is_relative_to(LABKIT.parent) else path.name


def colours_in(path: Path) -> list[str]:
    """Colour literals in a module: a hex colour, a matplotlib "tab:" or "xkcd:" colour, a
    named colour given as ``color=``/``colors=``/``facecolor``/``edgecolor``, or a CSS
    ``color:`` with a literal value."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if COLOUR_TEXT.fullmatch(node.value) or CSS_COLOUR.search(node.value):
                found.append(f"{shown(path)}:{node.lineno} {node.value!r}")
        elif isinstance(node, ast.keyword) and node.arg and "color" in node.arg:
            for value in ast.walk(node.value):
                if isinstance(value, ast.Constant) and value.value in NAMED_COLOURS:
                    found.append(f"{shown(path)}:{value.lineno} {node.arg}={value.value!r}")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and "color" in str(key.value) and \
                        isinstance(value, ast.Constant) and value.value in NAMED_COLOURS:
                    found.append(f"{shown(path)}:{value.lineno} {key.value}={value.value!r}")
    return sorted(found, key=lambda line: int(line.split()[0].rsplit(":", 1)[1]))


def test_every_colour_comes_from_the_vocabulary():
    found = [colour for path in sorted(LABKIT.rglob("*.py")) if path.name != "vocabulary.py"
             for colour in colours_in(path)]
    assert not found, "name the colour in labkit/vocabulary.py and use that name:\n" + "\n".join(found)


def test_colour_literals_are_found_in_a_sample(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("ax.plot(x, color='gray')\nax.bar(x, color=['tab:red', GREEN])\nc = '#b35900'\n"
                      "h = \"<span style='color:#555'>\"\nlabel = 'red'\nax.annotate('', arrowprops={'color': 'black'})\n")
    assert [line.split()[0] for line in colours_in(sample)] == \
        ["sample.py:1", "sample.py:2", "sample.py:3", "sample.py:4", "sample.py:6"], colours_in(sample)


# ---- recipes ---------------------------------------------------------------------------------
# A recipe's name becomes a Recipe once, at the edge (recipe_named in labkit/locks/registry.py:
# a notebook's, the command line's or a client process's string); past it the Recipe travels,
# so nothing else looks the registry's table up by name.
REGISTRY = LABKIT / "locks" / "registry.py"
LOOKUP = re.compile(r"RECIPES\s*\[")


def registry_lookups(path: Path) -> list[str]:
    """Lines of ``path`` that index a table of recipes by name (``RECIPES[...]``, or any
    ``..._RECIPES[...]``)."""
    return [f"{shown(path)}:{number} {line.strip()}" for number, line in enumerate(path.read_text().splitlines(), 1)
            if LOOKUP.search(line)]


def test_only_the_registry_looks_a_recipe_up_by_name():
    roots = [LABKIT] + [LABKIT.parent / folder for folder in ("tests", "notebooks", "scripts")]
    paths = [path for root in roots for path in sorted(root.rglob("*")) if path.suffix in (".py", ".ipynb")
             and path not in (REGISTRY, Path(__file__).resolve())]   # this file: the samples below
    found = [line for path in paths for line in registry_lookups(path)]
    assert not found, "take a Recipe (labkit.locks.registry.recipe_named) instead of a name:\n" + "\n".join(found)
    assert registry_lookups(REGISTRY), "recipe_named no longer reads RECIPES: point this test at what does"


def test_a_lookup_by_name_is_found_in_a_sample(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("a = RECIPES[name].service\nb = WATCH_RECIPES [w]\nc = recipe.service\nd = sorted(RECIPES)\n")
    assert [line.split()[0] for line in registry_lookups(sample)] == ["sample.py:1", "sample.py:2"]
