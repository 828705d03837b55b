"""Tests that need a tool the machine may lack, said by a marker instead of a skip in the test:

  @pytest.mark.curator    Curator's Java peer (java, javac and Curator's jars)
  @pytest.mark.browser    Debian's Chromium, driven by Playwright

A marked test is skipped, saying what to install, where the tool cannot run; it fails instead
(an error at its setup) where the run says the tool must be here: for Curator LABKIT_EXPECT_CURATOR=1 (scripts/ci/test.sh,
the lab image) or, unset, CI=true (labkit.locks.curator.curator_expected); for Chromium the same
with LABKIT_EXPECT_CHROMIUM. The check runs before the test's fixtures, so no lab starts for a
test that cannot run. A pytest plugin of its own (tests/conftest.py loads it; ``-p needs`` loads
it in a run without that conftest, as tests/suite/test_curator_required.py does)."""
from __future__ import annotations

import importlib.util
import os

import pytest

from helpers import CHROMIUM

CHROMIUM_EXPECT_ENV = "LABKIT_EXPECT_CHROMIUM"


def chromium_expected() -> bool:
    """Does this run say Chromium must be here? As curator_expected, with LABKIT_EXPECT_CHROMIUM."""
    said = os.environ.get(CHROMIUM_EXPECT_ENV, "").strip().lower()
    if said:
        return said not in ("0", "no", "false")
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def chromium_missing() -> str | None:
    """What keeps a browser test from running here, or None."""
    if not os.path.exists(CHROMIUM):
        return "Debian's chromium is not installed: apt-get install -y chromium (Playwright's own browser download cannot work here)"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed: pip install playwright (the test extra)"
    return None


def what_of(item: pytest.Item, marker: pytest.Mark) -> str:
    return marker.args[0] if marker.args else item.name


@pytest.hookimpl(tryfirst=True)   # before the runner sets up the test's fixtures (a lab, a browser)
def pytest_runtest_setup(item: pytest.Item) -> None:
    curator = item.get_closest_marker("curator")
    if curator is not None:
        from labkit.locks.curator import CuratorUnavailable, require_curator

        try:
            skipped = require_curator(what_of(item, curator))
        except CuratorUnavailable as expected_here:   # where the run expects Curator
            pytest.fail(str(expected_here), pytrace=False)
        if skipped:
            pytest.skip(skipped)
    if item.get_closest_marker("browser") is not None:
        missing = chromium_missing()
        if missing and chromium_expected():
            pytest.fail(f"Chromium is expected in this run ({CHROMIUM_EXPECT_ENV}=1 or CI=true) but cannot run, "
                        f"so {item.name} cannot: {missing}", pytrace=False)
        if missing:
            pytest.skip(f"Chromium cannot run on this machine, so {item.name} is skipped: {missing}")
