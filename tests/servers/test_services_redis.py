"""Redis in the lab (labkit/servers/services/redis.py), on a lab of this module's own (a
primary with its replica, three Redlock instances: it is failed over and crashed here): the
server's argv keeps nothing on disk and reads a private lab's ACL first; a raw RESP probe
logs in, and returns a refused login instead of raising; each node reads its role; the
replica acknowledges the primary's writes once wait_replica_in_sync returns; Redlock names its
instances r1..rN, refuses a name it has not and forgets every key (and any SAVEd file) in a
crash restart; a Sentinel's endpoint is taken as the primary only if it is a node of the lab;
a manual promotion makes the replica the primary, with what was replicated, and leaves
the old primary a primary too (nothing reconfigures it). (Which sizes
are refused: tests/servers/test_plan.py.)"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from labkit.errors import UnknownNode
from labkit.servers.services.redis import RedisNode, RedlockNode, _command, redis_argv


@pytest.fixture(scope="module")
def redis_lab(lab_of):
    return lab_of(zookeeper=0, etcd=0, redis=True, replica=True, redlock=3)


@pytest.mark.no_servers
def test_the_server_keeps_nothing_on_disk_and_reads_the_acl_first():
    argv = redis_argv("/usr/bin/redis-server", 7001, "/data/r", replica_of=7000, announce_port=7100,
                      config_file="/run/acl.conf")
    assert argv[:2] == ["/usr/bin/redis-server", "/run/acl.conf"], "a config file must come right after the binary"
    words = " ".join(argv)
    assert "--save  --appendonly no" in words and "--dir /data/r" in words and "--port 7001" in words
    assert "--replicaof 127.0.0.1 7000" in words and "--replica-announce-port 7100" in words
    plain = redis_argv("redis-server", 7001, "/data/r")
    assert plain[1] == "--port" and "--replicaof" not in plain and "--replica-announce-port" not in plain


def test_a_raw_probe_logs_in_and_returns_a_refused_login(redis_lab):
    node = redis_lab.redis.primary
    assert _command(node.host, node.port, "PING", secret=node.secret).startswith(b"+PONG")
    if node.secret is None:
        pytest.skip("this lab is not private: there is no login to refuse")
    wrong = dataclasses.replace(node.secret, password="not-the-password")
    refused = _command(node.host, node.port, "PING", secret=wrong)
    assert refused.startswith(b"-") and b"PONG" not in refused


def test_each_node_reads_its_role_and_the_replica_acknowledges_the_primarys_writes(redis_lab):
    service = redis_lab.redis
    primary, replica = service.primary, service.replica
    assert isinstance(primary, RedisNode) and replica is not None and replica is not primary
    assert (primary.read_role(), replica.read_role()) == ("primary", "replica")
    assert primary.is_ready() and replica.is_ready()
    assert (service.host, service.port) == (primary.host, primary.port)
    service.wait_replica_in_sync(timeout=30)
    client = service.client()
    try:
        client.set("replicated", "yes")
        assert client.wait(1, 10_000) >= 1, "the stream to the replica flows"
        assert replica.client().get("replicated") == b"yes"
        assert client.get("labkit:replication-probe") is None, "the probe cleans up after itself"
    finally:
        client.close()


def test_redlock_names_its_instances_and_refuses_others(redis_lab):
    redlock = redis_lab.redlock
    assert [node.name for node in redlock.nodes] == ["r1", "r2", "r3"]
    assert redlock.endpoints == [f"{node.host}:{node.port}" for node in redlock.nodes]
    assert redlock.node("r2") is redlock.nodes[1] and redlock.node(redlock.nodes[2]) is redlock.nodes[2]
    assert all(isinstance(node, RedlockNode) and node.read_role() == "primary" for node in redlock.nodes)
    with pytest.raises(UnknownNode, match="no Redlock instance 'r9' \\(this lab has r1, r2, r3\\)"):
        redlock.node("r9")


def test_a_crash_restart_forgets_every_key_even_a_saved_one(redis_lab):
    redlock = redis_lab.redlock
    node = redlock.node("r2")
    client = node.client()
    client.set("vote", "alice")
    client.save()
    assert (Path(node.data_dir) / "dump.rdb").exists()
    client.close()
    old_pid = node.runner.pid if hasattr(node.runner, "pid") else None
    assert redlock.crash_restart("r2", timeout=30) is node
    client = node.client()
    try:
        assert client.ping() and client.get("vote") is None and client.dbsize() == 0
    finally:
        client.close()
    assert not (Path(node.data_dir) / "dump.rdb").exists()
    if old_pid is not None:
        assert node.runner.pid != old_pid, "a new process"
    assert redlock.node("r1").client().ping(), "the other instances were not touched"


def test_a_sentinels_endpoint_is_taken_only_if_it_is_a_node_of_the_lab(redis_lab):
    service = redis_lab.redis
    primary = service.primary
    assert service.now_primary(primary.endpoint) is primary
    with pytest.raises(UnknownNode, match="127.0.0.1:1 as primary, which is not a node of this lab"):
        service.now_primary("127.0.0.1:1")
    assert service.primary is primary


def test_a_manual_promotion_makes_the_replica_the_primary(redis_lab):
    service = redis_lab.redis
    old_primary, replica = service.primary, service.replica
    client = service.client()
    try:
        client.set("before-failover", "kept")
        assert client.wait(1, 10_000) >= 1
    finally:
        client.close()
    assert service.promote() is replica
    assert service.primary is replica and service.replica is old_primary
    assert replica.read_role() == old_primary.read_role() == "primary", "nothing reconfigures the old primary"
    promoted = service.client()
    try:
        assert promoted.get("before-failover") == b"kept" and promoted.set("after-failover", "yes")
    finally:
        promoted.close()
    with pytest.raises(UnknownNode, match="no replica to promote"):
        service.promote(redis_lab.redlock.node("r1"))     # not a node of this service
