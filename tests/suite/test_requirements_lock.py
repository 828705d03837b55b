"""requirements/lock.txt is the one Python stack: it pins everything pyproject.toml asks
for, with hashes, and every other way in (conda, the whole-lab image) installs it."""
import re
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "lock.txt"


def locked_entries():
    """(name, version, marker or None, hashes) for every pin of the lock."""
    entries = []
    for block in re.split(r"\n(?=\S)", LOCK.read_text()):
        pin = re.match(r"([A-Za-z0-9._-]+)==([^\s;\\]+)(?:\s*;\s*([^\\\n]+?))?\s*\\?\n", block + "\n")
        if pin:
            entries.append((canonicalize_name(pin[1]), pin[2], pin[3], re.findall(r"--hash=sha256:[0-9a-f]{64}", block)))
    return entries


def test_every_pin_is_exact_and_hashed():
    entries = locked_entries()
    assert len(entries) > 50, "the lock should hold the whole stack, dependencies of dependencies included"
    unhashed = [name for name, _, _, hashes in entries if not hashes]
    assert not unhashed, f"pins without hashes: {unhashed}"


def test_the_lock_satisfies_pyproject_for_this_python():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(text) for text in project["dependencies"] + project["optional-dependencies"]["test"]]
    here = {name: version for name, version, marker, _ in locked_entries()
            if marker is None or Marker(marker).evaluate()}
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in here, f"{requirement} is not in {LOCK.name}: run ./lab.sh lock"
        assert requirement.specifier.contains(here[name], prereleases=True), \
            f"{LOCK.name} pins {name}=={here[name]}, outside {requirement}: run ./lab.sh lock"


def test_other_installs_use_the_lock():
    environment = (ROOT / "environment.yml").read_text()
    assert "- -r requirements/lock.txt" in environment
    conda_python_packages = {"jupyterlab", "ipywidgets", "kazoo", "redis-py", "docker-py", "pytest", "nbval"}
    listed = set(re.findall(r"^\s+- ([a-z0-9-]+)", environment, re.MULTILINE))
    assert not listed & conda_python_packages, "conda would install Python packages the lock does not pin"
    dockerfile = (ROOT / "docker" / "Dockerfile.lab").read_text()
    assert "--require-hashes -r /opt/labkit/lock.txt" in dockerfile
    assert "!requirements/lock.txt" in (ROOT / ".dockerignore").read_text()
    lab_sh = (ROOT / "lab.sh").read_text()
    assert 'cat pyproject.toml "$LOCK" | sha1sum' in lab_sh, "the install stamp must change with the lock"
    assert '--require-hashes -r "$LOCK"' in lab_sh


def test_the_lab_image_installs_the_lock_before_it_copies_anything_that_changes_often():
    """Docker caches a layer until a file copied before it changes: the lock's layer (a
    minute of pip) must see nothing but the lock, or every README edit reinstalls it."""
    lines = (ROOT / "docker" / "Dockerfile.lab").read_text().splitlines()
    install = next(i for i, line in enumerate(lines) if "--require-hashes -r /opt/labkit/lock.txt" in line)
    copied = [line.split()[1:-1] for line in lines[:install] if line.startswith("COPY ")]
    assert copied == [["requirements/lock.txt", "*.crt"]], copied


def test_build_requirements_accept_the_spdx_license():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str), "the SPDX string, not the deprecated table"
    setuptools = Requirement(next(r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")))
    assert not setuptools.specifier.contains("76.1.0") and setuptools.specifier.contains("77.0.3")
    assert '"setuptools>=77"' in (ROOT / "docker" / "Dockerfile.lab").read_text()
