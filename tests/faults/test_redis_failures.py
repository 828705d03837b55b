"""The Redis failures of notebook 01, on real redis-server processes.

Tests that kill, restart or freeze a server start their own small Redis lab (it starts in
a fraction of a second); the others use the shared ``lab`` fixture.
"""
import pytest

import labkit
from labkit.clients import spawn_clients
from labkit.locks.redis_lock import RedisLock
from labkit.faults.redis import (crash_and_restart, cut_replication, fail_over, key_facts,
                                   wait_for_replication, wait_until_gone)


@pytest.fixture
def redis_lab():
    with labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True) as lab:
        yield lab


@pytest.fixture
def replicated_lab():
    with labkit.up(zookeeper=0, etcd=0, redis=True, replica=True, quiet=True) as lab:
        yield lab


def test_wait_until_gone_measures_the_ttl(lab, unique_name):
    client = lab.redis.client()
    client.set(unique_name, "x", px=300)
    waited = wait_until_gone(client, unique_name, timeout=5)
    assert 0.25 <= waited <= 1.5
    assert key_facts(client, unique_name) == {"key": unique_name, "value": None, "ttl_ms": -2}


def test_wait_until_gone_names_the_key_when_it_stays(lab, unique_name):
    client = lab.redis.client()
    client.set(unique_name, "x", px=10_000)
    try:
        with pytest.raises(TimeoutError, match=unique_name):
            wait_until_gone(client, unique_name, timeout=0.05)
    finally:
        client.delete(unique_name)


def test_cut_replication_needs_a_replica(lab):
    with pytest.raises(ValueError, match="replica=True"):
        cut_replication(lab.redis)


def test_a_killed_client_keeps_its_lock_until_the_ttl(lab, unique_name):
    with spawn_clients(lab, recipe="redis", n=1, name=unique_name, ttl=1.0) as clients:
        clients[0].acquire()
        clients[0].kill()
        facts = key_facts(lab.redis.client(), unique_name)
        assert facts["value"].startswith("client-1:") and facts["ttl_ms"] > 0
        waited = wait_until_gone(lab.redis.client(), unique_name, timeout=5)
    assert facts["ttl_ms"] / 1000 - 0.02 <= waited <= 1.5


def test_a_crash_without_persistence_loses_the_lock(redis_lab):
    first = RedisLock(redis_lab.redis.client(), "lock:vanish", ttl_ms=30_000, identifier="first")
    first.acquire(timeout=1)
    crash_and_restart(redis_lab.redis.primary)
    assert key_facts(redis_lab.redis.client(), "lock:vanish")["value"] is None
    second = RedisLock(redis_lab.redis.client(), "lock:vanish", ttl_ms=30_000, identifier="second")
    second.acquire(timeout=1)
    assert first.value is not None and second.is_held      # two clients believe they hold it
    assert not first.is_held                               # until the first one asks


def test_a_restart_from_an_old_snapshot_brings_back_a_released_lock(redis_lab):
    client = redis_lab.redis.client()
    holder = RedisLock(client, "lock:ghost", ttl_ms=30_000, identifier="holder")
    holder.acquire(timeout=1)
    value = holder.value
    client.save()
    assert holder.release()
    assert key_facts(client, "lock:ghost")["value"] is None
    crash_and_restart(redis_lab.redis.primary)
    facts = key_facts(client, "lock:ghost")
    assert facts["value"] == value and facts["ttl_ms"] > 0


def test_freezing_the_replica_alone_does_not_lose_the_write(replicated_lab):
    # the kernel accepts the stream into the frozen replica's socket buffer
    wait_for_replication(replicated_lab.redis)
    replicated_lab.redis.replica.pause()
    holder = RedisLock(replicated_lab.redis.client(), "lock:kept", ttl_ms=30_000)
    holder.acquire(timeout=1)
    fail_over(replicated_lab.redis)
    assert key_facts(replicated_lab.redis.client(), "lock:kept")["value"] == holder.value


def test_failover_after_a_cut_link_grants_the_lock_twice(replicated_lab):
    wait_for_replication(replicated_lab.redis)
    frozen = cut_replication(replicated_lab.redis)
    assert frozen.state == "paused"
    first = RedisLock(replicated_lab.redis.client(), "lock:twice", ttl_ms=30_000, identifier="first")
    first.acquire(timeout=1)
    new_primary = fail_over(replicated_lab.redis)
    assert new_primary is frozen and new_primary.role == "primary"
    second = RedisLock(replicated_lab.redis.client(), "lock:twice", ttl_ms=30_000, identifier="second")
    second.acquire(timeout=1)
    assert first.value is not None and second.is_held


def test_wait_for_replication_times_out_on_a_frozen_replica(replicated_lab):
    replicated_lab.redis.replica.pause()
    try:
        with pytest.raises(TimeoutError, match="did not acknowledge"):
            wait_for_replication(replicated_lab.redis, timeout=0.3)
    finally:
        replicated_lab.redis.replica.resume()
