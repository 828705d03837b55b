"""Shared fixtures, and the legs of the suite. Every integration test talks to real servers on
127.0.0.1. Tests keep their labs under their own LABKIT_HOME so that they never touch a
learner's running lab.

A leg (``--leg``, default ``local``) says where the servers run and which tests run, chosen
here from the tests' markers (pyproject.toml declares them), never by skips in the test files:

  local    servers as local processes; every test but those that need a Docker engine
  quick    as local, without the slow tests (``slow``: more than ~7 s in a --durations=0
           run of the local leg on a shared 2-core machine) and the browser: ./lab.sh test --quick
  docker   servers in Docker containers; only the tests whose outcome depends on where the
           servers run (marked ``backend``) and those that need a Docker engine (``docker``),
           without those that fake host binaries or start local servers on any leg
           (``local_backend``)
  pythons  the quick tests that start no server (``no_servers``): the Python-versions leg

The leg sets LABKIT_BACKEND for the tests and the labs they start. Notebooks (nbval) passed
on the command line are run in any leg: which notebooks run is the caller's choice.

Side by side (``pytest -n 3 --dist loadfile``, as every leg of scripts/ci/ runs): each worker
has its own LABKIT_HOME, gets whole files, the costliest first, and the timing races (RACES)
as one unit, so that two of them never run at once.

``--part`` splits a leg in two: ``races`` (the files of RACES and LOAD_SENSITIVE only) and
``rest`` (everything else); scripts/ci/local.sh runs the races in two groups side by side
(RACE_GROUPS, ``-n 2``: each group one file at a time) and, beside them, the rest side by side
on one worker fewer (scripts/lib.sh run_pytest_in_parts).
"""
import contextlib
import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("LABKIT_HOME", str(Path.home() / ".local" / "state" / "labkit-tests"))

import labkit  # noqa: E402  (after LABKIT_HOME)

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is in the lock; without it tests run one at a time
    LoadScopeScheduling = None

# pytester: tests/notebooks/test_notebook_stderr.py runs a small nbval session; needs: the curator and
# browser markers skip a test where its tool is missing, or fail it where the run expects the tool
pytest_plugins = ("pytester", "needs")

# which tests each leg and each part runs (tests/legs.py: plain data, also read by test_scripts)
from legs import LEGS, PARTS, RACE_GROUPS, RACES  # noqa: E402
from helpers import SHARED_SHAPE  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--leg", choices=sorted(LEGS), default="local",
                     help="which tests run and where their servers run (tests/conftest.py)")
    parser.addoption("--part", choices=sorted(PARTS), default="all",
                     help="races: only the timing races; rest: all but them (tests/conftest.py)")


def pytest_configure(config):
    os.environ["LABKIT_BACKEND"] = LEGS[config.getoption("--leg")][0]
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # a script's background job starts with Ctrl-C ignored (the rest part, the legs beside the
        # local leg), and so would every process a test starts: a shell that starts so cannot trap
        # SIGINT, Python raises no KeyboardInterrupt. Caught here, it is SIGINT's default in each
        # process a test starts (exec resets a caught signal), as in a terminal.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # Test files run side by side (pytest -n, scripts/ci/local.sh): each worker gets a
        # LABKIT_HOME of its own, so that one worker's `labkit down`, orphan reaper, "current lab"
        # file, clock shim build and counts of labs on disk never see another worker's labs; the
        # races part's workers are named apart (races-gw0), as the rest part runs beside them.
        part = config.getoption("--part")
        name = worker if part == "all" else f"{part}-{worker}"
        os.environ["LABKIT_HOME"] = str(Path(os.environ["LABKIT_HOME"]) / "workers" / name)


def pytest_report_header(config):
    leg = config.getoption("--leg")
    return f"leg: {leg} (servers: {LEGS[leg][0]})"


def pytest_collection_modifyitems(config, items):
    runs = LEGS[config.getoption("--leg")][1]
    part = config.getoption("--part")
    in_part = PARTS[part]
    selected, deselected = [], []
    for item in items:
        if not in_part(Path(item.nodeid.split("::", 1)[0]).name):
            deselected.append(item)
        elif not isinstance(item, pytest.Function):  # a notebook cell (nbval)
            selected.append(item)
        else:
            marks = {mark.name for mark in item.iter_markers()}
            (selected if runs(marks) else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = costliest_first(selected, grouped=part == "races")


def work_unit(nodeid: str, grouped: bool = False) -> str:
    """What one worker runs whole when files run side by side: a file (a notebook's cells share
    its kernel, a module's tests its lab), or all of RACES together; in the races part
    (``grouped``) each of RACE_GROUPS (races-1, races-2), so that two workers run one each."""
    path = nodeid.split("::", 1)[0]
    if grouped:
        for number, group in enumerate(RACE_GROUPS, 1):
            if Path(path).name in group:
                return f"races-{number}"
    return "races" if Path(path).name in RACES else path


def costliest_first(items: list, grouped: bool = False) -> list:
    """The items, each work unit's together, the unit that should take longest first, so that
    no worker starts a long file when the others are about to finish. A slow-marked test counts
    for 15 s, a notebook cell for 2 s, any other test for 0.1 s; the races go first (they are
    the longest unit). The order within a file is kept."""
    cost: dict[str, float] = {}
    for item in items:
        unit = work_unit(item.nodeid, grouped)
        seconds = 15.0 if item.get_closest_marker("slow") else 0.1 if isinstance(item, pytest.Function) else 2.0
        cost[unit] = cost.get(unit, 0.0) + seconds
    rank = {unit: (not unit.startswith("races"), -seconds) for unit, seconds in cost.items()}
    return sorted(items, key=lambda item: rank[work_unit(item.nodeid, grouped)])


if LoadScopeScheduling is not None:
    class WorkUnitScheduling(LoadScopeScheduling):
        """pytest -n N --dist loadfile, by work_unit: whole files, RACES as one (in the races
        part: each of RACE_GROUPS), in the order of the collection (costliest_first) instead of
        xdist's (most tests first)."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False
            self.grouped = config.getoption("--part") == "races"

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, self.grouped)

    @pytest.hookimpl(tryfirst=True)   # before xdist's own, which would answer first
    def pytest_xdist_make_scheduler(config, log):
        if config.getoption("dist") == "loadfile":
            return WorkUnitScheduling(config, log)
        return None


@pytest.fixture(scope="session")
def lab():
    """One ZooKeeper node, one etcd member, a Redis primary and 3 Redlock instances, shared
    by the session. Do not kill or pause its nodes: start your own lab for that (lab_of)."""
    with labkit.up(**SHARED_SHAPE, quiet=True) as shared:
        yield shared


@pytest.fixture(scope="module")
def lab_of(request):
    """``lab_of(**shape)``: a lab of that shape (labkit.up's arguments), started on first use
    and shared by the module's tests that ask for the same shape; every lab it started stops
    when the module's tests end, so no module leaves servers behind and no two modules hold
    their labs at once. The session's shape gives the session's ``lab``. A module names its
    lab with a fixture of its own (``five_instances = lab_of(redlock=5, ...)``), never ``lab``."""
    started: dict[tuple, labkit.Lab] = {}
    with contextlib.ExitStack() as stack:
        def lab_of(**shape) -> labkit.Lab:
            if shape == SHARED_SHAPE:
                return request.getfixturevalue("lab")
            key = tuple(sorted(shape.items()))
            if key not in started:
                started[key] = stack.enter_context(labkit.up(**shape, quiet=True))
            return started[key]
        yield lab_of


@pytest.fixture
def zk(lab):
    client = lab.zookeeper.client()
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def redis_client(lab):
    client = lab.redis.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def fenced_store(lab, unique_name):
    """An empty fenced store on the session lab's Redis, named after the test; emptied after."""
    from labkit.record.fencing import FencedStore

    store = FencedStore(lab.redis.client(), "store" + unique_name)
    store.reset()
    try:
        yield store
    finally:
        store.reset()
        store.client.close()


@pytest.fixture
def unique_name(request):
    """A lock name no other test uses."""
    return "/" + request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
