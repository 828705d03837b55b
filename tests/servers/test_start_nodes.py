"""Starting a laid-out lab (labkit/servers/start.py): every node's action runs at once (each
waits at a barrier the others must reach, so one at a time would time out) and the first error
comes out only once every action is done; the sentinels are left for last; and a real lab (a
Redis primary and its replica, started by labkit.up without quiet) prints one whole line per
node as it answers, and returns with the replica in sync."""
from __future__ import annotations

import re
import threading
import time
from types import SimpleNamespace

import pytest

import labkit
from labkit.servers.start import _in_parallel, _servers


@pytest.mark.no_servers
def test_every_nodes_action_runs_at_once():
    nodes = ["a", "b", "c", "d"]
    together = threading.Barrier(len(nodes))
    done = []
    _in_parallel(nodes, lambda node: (together.wait(timeout=30), done.append(node)))
    assert sorted(done) == nodes


@pytest.mark.no_servers
def test_the_first_error_comes_out_once_every_action_is_done():
    finished = []

    def action(node):
        if node == "bad":
            raise RuntimeError("bad did not start")
        time.sleep(0.2)                       # the others are still starting when bad fails
        finished.append(node)

    with pytest.raises(RuntimeError, match="bad did not start"):
        _in_parallel(["ok-1", "bad", "ok-2"], action)
    assert sorted(finished) == ["ok-1", "ok-2"], "no node is left half-started behind the error"


@pytest.mark.no_servers
def test_the_sentinels_start_last():
    kinds = ["zookeeper", "sentinel", "redis", "sentinel", "etcd"]
    lab = SimpleNamespace(nodes=[SimpleNamespace(name=f"n{number}", kind=kind) for number, kind in enumerate(kinds)])
    assert [node.kind for node in _servers(lab)] == ["zookeeper", "redis", "etcd"]


def test_a_lab_prints_a_line_per_node_and_starts_its_replica_in_sync(capfd):
    with labkit.up(zookeeper=0, etcd=0, redis=True, replica=True) as lab:
        said = capfd.readouterr().out
        for node in lab.redis.nodes:
            assert re.search(rf"^  {node.name}\s+{re.escape(node.endpoint)}\s+ready in\s+\d+\.\d s$", said, re.MULTILINE), said
        client = lab.redis.client()
        try:
            client.set("started", "yes")
            assert client.wait(1, 10_000) == 1, "the replica acknowledges at once: it was in sync"
        finally:
            client.close()
