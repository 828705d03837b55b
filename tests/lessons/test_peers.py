"""The libraries learners use (redis-py's Lock, python-redis-lock, pottery's Redlock) under the
faults that break labkit's own Redis locks, on real servers (labkit/lessons/peers.py): the
failures are the algorithms', not labkit's. Each experiment must leave the lab as it found it."""
from __future__ import annotations

import importlib.metadata

import pytest
import redis

import labkit
from labkit import cli
from labkit.bench import peers as bench_peers
from labkit.lessons import peers
from labkit.lessons import redlock_double_grants as double_grants
from labkit.locks.errors import LockTimeout
from labkit.locks.redis_peers import PotteryRedlock, PythonRedisLock, RedisPyLock
from labkit.locks.registry import connections_of


@pytest.fixture(scope="module")
def clocked_lab(lab_of):
    """Redis and 5 Redlock instances, each on a clock of its own."""
    return lab_of(zookeeper=0, etcd=0, redis=True, redlock=5, clocks=True)


@pytest.fixture
def lab_as_found(clocked_lab):
    """After the test: every instance running, every clock on the machine's time."""
    yield clocked_lab
    for node in clocked_lab.redlock.nodes:
        assert node.state == "running", f"{node.name} was left {node.state}"
        assert abs(node.clock.offset) < 0.01, f"{node.name}'s clock was left {node.clock.offset:+.3f} s off"


@pytest.mark.no_servers
def test_the_peers_refuse_what_their_library_cannot_take():
    client = redis.Redis(port=1)        # never connected: the checks come first
    with pytest.raises(ValueError, match="whole seconds"):
        PythonRedisLock(client, "x", ttl_ms=1500)
    assert RedisPyLock(client, "x").token is None and PythonRedisLock(client, "x").key == "lock:x"


@pytest.mark.backend   # servers in containers on the Docker leg
def test_a_paused_holder_loses_the_lock_with_every_library_and_no_token_fences_it(clocked_lab):
    runs = peers.pause_each(clocked_lab, ttl=1.0, pause=3.0)
    assert set(runs) == set(peers.REDIS_LOCKS)
    for library, run in runs.items():
        assert run.outcome.two_holders, (library, run.writes, run.verdict.explain())
        assert [write.client for write in run.writes] == ["client-1", "bob", "client-1"]
        # bob got the lock while client-1 was frozen: python-redis-lock's renewal thread was frozen too
        assert run.bob_waited < run.pause, (library, run.bob_waited)
        assert all(write.token is None for write in run.writes), library
        assert run.fenced_refuses_everything, f"{library}: a fenced store has no token to compare"
        assert "lost" in run.events["client-1"], (library, run.events)
    assert runs["python-redis-lock"].events["client-1"].count("lost") >= 1


@pytest.mark.backend   # servers in containers on the Docker leg
def test_a_failover_grants_the_lock_twice_with_every_library():
    runs = peers.failover_each()
    for library, run in runs.items():
        assert run.open_holds == ["client-A", "client-B"], (library, run.open_holds)
        assert run.a_believes and run.b_holds and run.outcome.two_holders, library


def test_pottery_grants_twice_after_a_clock_step_on_a_majority(lab_as_found):
    run = double_grants.clock_step_double_grant(lab_as_found, ttl_ms=10_000, work=0.05, connect=PotteryRedlock.connect)
    assert run.holders == ["bob", "bob", "bob", "alice", "alice"]
    assert run.second_instances == ["r1", "r2", "r3"]
    assert run.first_validity_left > 0 and not run.verdict.ok
    assert peers.double_grant_outcome("pottery Redlock", run).two_holders


def test_pottery_grants_twice_after_a_restart_without_fsync(lab_as_found):
    run = double_grants.restart_double_grant(lab_as_found, ttl_ms=10_000, work=0.05, connect=PotteryRedlock.connect)
    assert run.holders == ["alice", "alice", "bob", "bob", "bob"], "r3 should have forgotten alice's vote"
    assert run.second_instances == ["r3", "r4", "r5"]
    assert run.first_validity_left > 0 and not run.verdict.ok


def test_pottery_lets_a_paused_holder_write_late_and_gives_no_token(lab_as_found):
    run = double_grants.pause_double_grant(lab_as_found, ttl=1.0, pause=2.0, recipe="pottery", connect=PotteryRedlock.connect)
    assert run.first_validity_left < 0, "bob should acquire only after client-1's validity ran out"
    assert [write.client for write in run.writes] == ["client-1", "bob", "client-1"] and not run.verdict.ok
    assert all(write.token is None for write in run.writes)
    fenced = double_grants.offer_to_a_fenced_store(lab_as_found, run.writes, run.history)
    assert not any(write.accepted for write in fenced)
    # bob holds a majority and client-1 no instance (its keys expired during its pause); that
    # every instance answered bob's SET in time is not the claim: at load 24-40 one had not (#34)
    assert run.holders.count("bob") >= 3 and set(run.holders) <= {"bob", "-"}, run.holders


@pytest.mark.no_servers
def test_doctor_shows_the_version_of_every_peer(capsys):
    versions = {item["name"]: item["version"] for item in bench_peers.library_versions()}
    assert versions["pottery"] == importlib.metadata.version("pottery")
    assert versions["python-redis-lock"] == importlib.metadata.version("python-redis-lock")
    assert versions["redis-py"] == importlib.metadata.version("redis")
    cli.main(["doctor"])
    shown = capsys.readouterr().out
    assert "The libraries labkit is compared with" in shown
    assert f"pottery            {versions['pottery']}" in shown


@pytest.mark.slow   # ~6 s alone: a lab with three sentinels, and their failover
def test_a_real_sentinel_failover_grants_the_lock_twice_with_every_library():
    with labkit.up(zookeeper=0, etcd=0, redis=True, replica=True, sentinels=3, quiet=True) as sentinel_lab:
        runs = peers.sentinel_failover_all(sentinel_lab)
    assert set(runs) == set(peers.REDIS_LOCKS)
    for library, run in runs.items():
        assert run.open_holds == ["client-A", "client-B"], (library, run.open_holds)
        assert run.a_believes and run.b_holds and run.outcome.two_holders, library


@pytest.mark.parametrize("recipe, key", [("redlock", "{}"), ("pottery", "redlock:{}")])
def test_a_bench_redlock_outlasts_keys_that_failed_rounds_left_on_a_majority(clocked_lab, unique_name, recipe, key):
    """What a busy machine does to a Redlock round, forced: a majority of instances hold a key
    that a failed round set (its answers came after the 50 ms vote). The bench's TTL lets such a
    key expire before its acquire gives up; with the TTL of 10 s it had (the negative control),
    the same acquire gives up."""
    connections = connections_of(clocked_lab)
    for ttl, gives_up in ((bench_peers.REDLOCK_TTL, False), (10.0, True)):
        name = f"{unique_name}-{ttl:g}"
        for node in clocked_lab.redlock.nodes[:3]:
            client = node.client()
            assert client.set(key.format(name), "a failed round's value", nx=True, px=int(ttl * 1000))
            client.close()
        step, cleanup = bench_peers.lock_cycle(recipe, connections, name, "bench", ttl=ttl)
        try:
            if gives_up:
                with pytest.raises(LockTimeout):
                    step()
            else:
                step()
        finally:
            cleanup()
