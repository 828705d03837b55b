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
"""
import os
from pathlib import Path

import pytest

os.environ.setdefault("LABKIT_HOME", str(Path.home() / ".local" / "state" / "labkit-tests"))

import labkit  # noqa: E402  (after LABKIT_HOME)

pytest_plugins = ("pytester",)   # tests/test_notebook_stderr.py runs a small nbval session

LEGS = {
    # leg: (backend, does a test with these markers run?)
    "local": ("local", lambda marks: "docker" not in marks),
    "quick": ("local", lambda marks: not marks & {"docker", "slow", "browser"}),
    "docker": ("docker", lambda marks: bool(marks & {"backend", "docker"}) and "local_backend" not in marks),
    "pythons": ("local", lambda marks: "no_servers" in marks and not marks & {"docker", "slow", "browser"}),
}


def pytest_addoption(parser):
    parser.addoption("--leg", choices=sorted(LEGS), default="local",
                     help="which tests run and where their servers run (tests/conftest.py)")


def pytest_configure(config):
    os.environ["LABKIT_BACKEND"] = LEGS[config.getoption("--leg")][0]


def pytest_report_header(config):
    leg = config.getoption("--leg")
    return f"leg: {leg} (servers: {LEGS[leg][0]})"


def pytest_collection_modifyitems(config, items):
    runs = LEGS[config.getoption("--leg")][1]
    selected, deselected = [], []
    for item in items:
        if not isinstance(item, pytest.Function):  # a notebook cell (nbval)
            selected.append(item)
            continue
        marks = {mark.name for mark in item.iter_markers()}
        (selected if runs(marks) else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


@pytest.fixture(scope="session")
def lab():
    """One ZooKeeper node, one etcd member, a Redis primary and 3 Redlock instances, shared
    by the session. Do not kill or pause its nodes: start your own lab for that."""
    with labkit.up(zookeeper=1, etcd=1, redis=True, redlock=3, quiet=True) as shared:
        yield shared


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
def unique_name(request):
    """A lock name no other test uses."""
    return "/" + request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
