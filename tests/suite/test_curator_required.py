"""Where a missing Curator skips and where it fails (labkit.locks.curator.require_curator): the
interop cells of notebooks 02 and 09 and the Curator tests skip, saying why, on a machine
without Java or Curator's jars; where the run says Curator must be here (CI=true, or
LABKIT_EXPECT_CURATOR=1 as scripts/ci/test.sh and the lab image set it) they fail, naming what
is missing and what to install. Each case runs in a subprocess with no java on its PATH. The
same for the browser tests and Chromium (LABKIT_EXPECT_CHROMIUM), by the markers of tests/needs.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers   # the Python-versions leg runs these

REQUIRE = ("from labkit.locks.curator import require_curator\n"
           "print('SKIPPED:', require_curator('the interop cell'))")


def without_java(folder: Path, **env: str) -> dict:
    """This environment with no java or javac on PATH (an empty folder) and none of the variables
    that say what a run expects (scripts/ci/test.sh sets them), plus ``env``."""
    said = ("CI", "LABKIT_EXPECT_CURATOR", "LABKIT_EXPECT_CHROMIUM")
    base = {key: value for key, value in os.environ.items() if key not in said}
    return {**base, "PATH": str(folder), **env}


@pytest.mark.parametrize("env, expected", [({}, False), ({"CI": "true"}, True), ({"LABKIT_EXPECT_CURATOR": "1"}, True),
                                           ({"CI": "true", "LABKIT_EXPECT_CURATOR": "0"}, False)])
def test_a_missing_curator_skips_unless_the_run_expects_it(tmp_path, env, expected):
    done = subprocess.run([sys.executable, "-c", REQUIRE], env=without_java(tmp_path, **env),
                          capture_output=True, text=True, timeout=60)
    print(env, done.stdout, done.stderr[-600:])
    if expected:
        assert done.returncode != 0 and "SKIPPED" not in done.stdout, done
        assert "CuratorUnavailable: Curator is expected in this run" in done.stderr, done.stderr
        assert "java is not on PATH" in done.stderr, done.stderr
        assert "default-jdk-headless libcurator-recipes-java" in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr
        said = "SKIPPED: Curator cannot run on this machine, so the interop cell is skipped: java is not on PATH"
        assert said in done.stdout and "default-jdk-headless libcurator-recipes-java" in done.stdout, done.stdout


def run_marked_test(tmp_path, marker: str, **env: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """A one-test file marked ``marker`` run in a pytest of its own, without java on PATH, with
    only tests/needs.py as plugin (from this folder, with helpers.py: only labkit's import
    costs): as the run finds the machine, then with ``env`` (which says the tool is expected)."""
    test_file = tmp_path / "test_needs_it.py"
    test_file.write_text(f"import pytest\n\n@pytest.mark.{marker}\ndef test_it():\n    pass\n")
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "needs", str(test_file)]
    here = {"PYTHONPATH": str(Path(__file__).parents[1]), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "LABKIT_CHROMIUM": str(tmp_path / "no-chromium")}   # helpers.CHROMIUM reads it first
    return tuple(subprocess.run(command, env=without_java(tmp_path, **here, **extra), capture_output=True,
                                text=True, timeout=120, cwd=tmp_path) for extra in ({}, env))


def test_a_curator_test_fails_rather_than_skips_where_curator_is_expected(tmp_path):
    """The curator marker (tests/needs.py), where java cannot be found."""
    skipped, failed = run_marked_test(tmp_path, "curator('a Curator test')", LABKIT_EXPECT_CURATOR="1")
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout + skipped.stderr
    assert "a Curator test is skipped: java is not on PATH" in skipped.stdout, skipped.stdout
    assert failed.returncode == 1 and "1 error" in failed.stdout, failed.stdout + failed.stderr   # at its setup
    assert "Curator is expected in this run" in failed.stdout, failed.stdout
    assert "libcurator-recipes-java" in failed.stdout, failed.stdout


def test_a_browser_test_fails_rather_than_skips_where_chromium_is_expected(tmp_path):
    """The browser marker (tests/needs.py) where no chromium can be found: LABKIT_CHROMIUM names
    a path that does not exist."""
    skipped, failed = run_marked_test(tmp_path, "browser", CI="true")
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout + skipped.stderr
    assert "apt-get install -y chromium" in skipped.stdout, skipped.stdout
    assert failed.returncode == 1 and "1 error" in failed.stdout, failed.stdout + failed.stderr
    assert "Chromium is expected in this run" in failed.stdout, failed.stdout
