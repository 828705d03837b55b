"""Small helpers shared by the test modules (pytest puts this folder on sys.path)."""
from __future__ import annotations

import contextlib
import os
import shutil
import threading

from labkit import timing

DEADLINE = 20.0  # generous: two cores shared with other test runs
# the session's lab (tests/conftest.py, fixture lab): what lab_of(**SHARED_SHAPE) gives too
SHARED_SHAPE = {"zookeeper": 1, "etcd": 1, "redis": True, "redlock": 3}
# Debian's Chromium, driven by Playwright (its own browser download cannot work here);
# LABKIT_CHROMIUM names another (tests/suite/test_curator_required.py: one that is not there)
CHROMIUM = os.environ.get("LABKIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# a test file that records (file, xdist worker, LABKIT_HOME) to $RECORD: where a scheduled file ran
RECORDING_TEST = '''
import json, os, pytest

@pytest.mark.parametrize("n", [1, 2])
def test_where(n):
    with open(os.environ["RECORD"], "a") as record:
        record.write(json.dumps([os.path.basename(__file__), os.environ["PYTEST_XDIST_WORKER"],
                                 os.environ["LABKIT_HOME"]]) + "\\n")
'''


def wait_until(condition, what: str, timeout: float = DEADLINE) -> float:
    """labkit's own ``wait_until`` with the tests' generous deadline (TimeoutError names ``what``)."""
    return timing.wait_until(condition, what, timeout)


def wait_for_value(read, what: str, timeout: float = DEADLINE):
    """labkit's ``wait_for_value`` with the tests' deadline: the first true reading of ``read()``."""
    return timing.wait_for_value(read, what, timeout)


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def socket_inodes(pid: int | str = "self") -> set[str]:
    """The inodes of the sockets process ``pid`` holds open (Linux /proc/PID/fd), to match
    against /proc/net/tcp's inode column: that table lists every program's sockets."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:   # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def bytes_of(size: str) -> int:
    """A size as JupyterHub's ByteSpecification reads it ("1.5G": K, M, G, T are powers of 1024)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(float(size[:-1]) * units[size[-1]]) if size[-1] in units else int(size)


def playwright_api():
    """Playwright's sync API, imported when a browser test runs (tests/needs.py has checked it is
    installed), so that a module of browser tests stays importable without it."""
    from playwright import sync_api
    return sync_api


def run_in_kernel(kernel, code: str, timeout: float = 120) -> str:
    """Run ``code`` in a live Jupyter kernel (jupyter_client's blocking client) as a notebook
    cell runs; return what it printed. Fails the test with the traceback if the cell raised."""
    printed = []

    def collect(message):
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            printed.append("\n".join(message["content"]["traceback"]))
    reply = kernel.execute_interactive(code, timeout=timeout, output_hook=collect)
    assert reply["content"]["status"] == "ok", "".join(printed)
    return "".join(printed)


@contextlib.contextmanager
def chromium_browser():
    """Debian's Chromium through Playwright, closed on the way out. Playwright is imported
    here, so a test module that also has tests without a browser stays importable."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_watched(browser, page_file, width: int = 1400, height: int = 1000):
    """Open a local page, recording every URL it requests and every error it raises."""
    page = browser.new_page(viewport={"width": width, "height": height})
    requests, errors = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_file.as_uri())
    return page, requests, errors


class Inside:
    """``with inside:`` around a critical section, in every thread: ``most`` is how many
    threads were ever inside it at once (1 for a lock that excludes)."""

    def __init__(self):
        self._counting = threading.Lock()
        self.now = self.most = 0

    def __enter__(self) -> "Inside":
        with self._counting:
            self.now += 1
            self.most = max(self.most, self.now)
        return self

    def __exit__(self, *exc) -> None:
        with self._counting:
            self.now -= 1
