"""Shared fixtures. Every integration test talks to real servers on 127.0.0.1.

LABKIT_BACKEND (local | docker | auto) picks where the servers run, so the same tests
exercise both backends. Tests keep their labs under their own LABKIT_HOME so that they
never touch a learner's running lab.
"""
import os
from pathlib import Path

import pytest

os.environ.setdefault("LABKIT_HOME", str(Path.home() / ".local" / "state" / "labkit-tests"))
os.environ.setdefault("LABKIT_BACKEND", "local")

import labkit  # noqa: E402  (after the environment above)


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
