"""The Redis lock on a real Redis server (the session lab's primary)."""
from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from labkit.harness.stress import stress
from labkit.record.checker import check_mutual_exclusion
from labkit.record.fencing import FencedStore
from labkit.record.history import History
from labkit.locks import LockTimeout
from labkit.locks.redis_lock import RedisLock

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def lock_name():
    return f"test-lock-{uuid.uuid4().hex[:8]}"


def wait_until_gone(client, key: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while client.exists(key):
        assert time.monotonic() < deadline, f"{key} still exists after {timeout} s"
        time.sleep(0.01)  # poll interval: Redis has no way to tell us when a key expires


def test_acquire_release_events_and_no_token(redis_client, lock_name):
    history = History()
    lock = RedisLock(redis_client, lock_name, ttl_ms=5000, identifier="alice", on_event=history.sink("alice"))
    with lock as held:
        assert held is lock and lock.token is None and lock.is_held
        assert redis_client.get(lock_name).decode() == lock.value and lock.value.startswith("alice:")
        assert 0 < lock.remaining_ms() <= 5000
    assert not lock.is_held and not redis_client.exists(lock_name)
    assert lock.release() is False  # idempotent: nothing held any more
    assert [e.kind for e in history.events()] == ["requested", "acquired", "released"]
    assert history.events(kind="acquired")[0].detail["token"] is None


def test_mutual_exclusion_with_twelve_threads(lab, lock_name):
    store = FencedStore(lab.redis.client(), f"{lock_name}-store", fenced=False)

    def make(name, sink):
        return RedisLock(lab.redis.client(), lock_name, ttl_ms=10_000, identifier=name, on_event=sink)

    try:
        run = stress(make, [f"client-{n}" for n in range(12)], store, rounds=3,
                     close=lambda lock: lock.client.close(), retry_interval=0.002)
        assert run.most_inside == 1
        assert run.releases == [True] * 36
        assert len(run.history.events(kind="acquired")) == 36
        verdict = check_mutual_exclusion(store.writes(), history=run.history)
        assert verdict.ok, verdict.explain()
        assert "72 accepted writes by 36 holds" in verdict.summary
    finally:
        store.reset()
        store.client.close()


DEAD_HOLDER = """
import sys, time, redis
from labkit.record.history import remote_sink
from labkit.locks.redis_lock import RedisLock
from labkit.servers.secret import login_for
client = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), **login_for(f"127.0.0.1:{sys.argv[1]}", "redis"))
lock = RedisLock(client, sys.argv[2], ttl_ms=int(sys.argv[3]), on_event=remote_sink(sys.argv[4], "holder"))
lock.acquire(timeout=10)
time.sleep(120)  # stands in for a holder doing work; the test kills it long before
"""


def test_a_killed_holders_lock_is_freed_only_by_the_ttl(lab, redis_client, lock_name):
    ttl_ms = 1000
    with History() as history:
        holder = subprocess.Popen([sys.executable, "-c", DEAD_HOLDER, str(lab.redis.port), lock_name, str(ttl_ms),
                                   history.listen()], cwd=REPOSITORY)
        try:
            (acquired,) = history.wait_for("acquired", client="holder", timeout=30)
            holder.kill()
            holder.wait(10)
            assert redis_client.exists(lock_name), "the lock vanished with its holder: Redis has no client liveness"
            waiter = RedisLock(redis_client, lock_name, ttl_ms=5000, on_event=history.sink("waiter"))
            waiter.acquire(timeout=10)
            waiter.release()
        finally:
            holder.kill()
            holder.wait(10)
    waited = history.events(client="waiter", kind="acquired")[0].time - acquired.time
    assert ttl_ms / 1000 * 0.95 <= waited <= ttl_ms / 1000 + 3.0, f"freed after {waited:.3f} s for a TTL of {ttl_ms} ms"


def test_a_holder_past_its_ttl_overlaps_the_next_one_and_the_store_shows_it(redis_client, lock_name):
    history = History()
    store = FencedStore(redis_client, f"{lock_name}-store", fenced=False)
    alice = RedisLock(redis_client, lock_name, ttl_ms=200, identifier="alice", on_event=history.sink("alice"))
    bob = RedisLock(redis_client, lock_name, ttl_ms=5000, identifier="bob", on_event=history.sink("bob"))
    try:
        alice.acquire()
        assert store.write("alice", None, "alice 1")
        bob.acquire(timeout=5)  # granted once alice's TTL ran out; alice is not told
        assert store.write("bob", None, "bob 1")
        assert store.write("alice", None, "alice 2")  # she still believes she holds it
        verdict = check_mutual_exclusion(store.writes(), history=history)
        assert not verdict.ok
        (overlap,) = verdict.overlaps
        assert (overlap.first_client, overlap.second_client) == ("alice", "bob")
        # fencing cannot save a Redis lock: it has no token, so a fenced store refuses everyone
        assert not FencedStore(redis_client, f"{lock_name}-store").write("bob", None, "bob 2")
    finally:
        bob.release()
        store.reset()


def test_release_by_a_non_owner_is_refused(redis_client, lock_name):
    history = History()
    alice = RedisLock(redis_client, lock_name, ttl_ms=300, identifier="alice", on_event=history.sink("alice"))
    bob = RedisLock(redis_client, lock_name, ttl_ms=5000, identifier="bob", on_event=history.sink("bob"))
    alice.acquire()
    with pytest.raises(LockTimeout, match=lock_name):
        bob.acquire(timeout=0.05)
    assert bob.release() is False
    assert redis_client.get(lock_name).decode() == alice.value
    bob.acquire(timeout=5)  # alice's TTL runs out while she still believes she holds it
    try:
        assert alice.release() is False  # her script sees bob's value and deletes nothing
        assert bob.is_held and redis_client.get(lock_name).decode() == bob.value
        assert history.events(client="alice", kind="lost")[0].detail["reason"].startswith("the key had expired")
        assert [e.kind for e in history.events(client="bob")] == ["requested", "timeout", "requested", "acquired"]
    finally:
        bob.release()


def test_extend_keeps_the_lock_and_fails_once_it_expired(redis_client, lock_name):
    history = History()
    lock = RedisLock(redis_client, lock_name, ttl_ms=300, on_event=history.sink("alice"))
    lock.acquire()
    assert lock.extend(5000)
    assert redis_client.pttl(lock_name) > 1000
    assert lock.extend(50)
    wait_until_gone(redis_client, lock_name)
    assert lock.extend() is False
    assert not lock.is_held and lock.value is None
    assert [e.kind for e in history.events()] == ["requested", "acquired", "lost"]
    assert lock.extend() is False  # nothing held: nothing to extend, no second "lost"
    assert len(history.events(kind="lost")) == 1


def test_invalid_ttl_is_refused(redis_client):
    with pytest.raises(ValueError, match="ttl_ms must be positive"):
        RedisLock(redis_client, "x", ttl_ms=0)
