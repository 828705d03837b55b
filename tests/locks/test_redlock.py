"""Redlock on 5 real, independent redis-server processes (r1..r5): what it survives, and
the double grants a lesson makes happen on purpose (a clock step on a majority, a restart
without fsync, a holder paused past its validity)."""
from __future__ import annotations

import statistics
import time
import uuid

import pytest
import redis

import labkit
from labkit.clients import spawn_clients
from labkit.errors import InvalidClusterSize
from labkit.locks import LockTimeout
from labkit.locks.redis_lock import RedisLock
from labkit.locks.redlock import Redlock, instance_clients
from labkit.locks.registry import connections_of, make_lock
from labkit.harness.stress import stress
from labkit.record.checker import check_mutual_exclusion
from labkit.record.fencing import FencedStore
from labkit.record.history import History


@pytest.fixture(scope="module")
def five_instances(lab_of):
    """Five Redlock instances and nothing else."""
    return lab_of(zookeeper=0, etcd=0, redis=False, redlock=5)


@pytest.fixture
def redlock(five_instances):
    """The 5 instances, all running again after each test (some tests crash one)."""
    yield five_instances.redlock
    for node in five_instances.redlock.nodes:
        if node.state != "running":
            node.start()
            node.wait_ready()


@pytest.fixture
def name():
    return f"redlock-{uuid.uuid4().hex[:8]}"


def holders_on(redlock, name) -> list[str]:
    """Which instance has the key now, and with whose value (read straight from each server)."""
    values = []
    for node in redlock.nodes:
        client = node.client()
        try:
            raw = client.get(name)
        finally:
            client.close()
        values.append(raw.decode().split(":")[0] if raw else "-")
    return values


def test_acquire_and_release_on_all_five(redlock, name):
    history = History()
    lock = Redlock.connect(redlock.endpoints, name, ttl_ms=5000, identifier="alice", on_event=history.sink("alice"))
    try:
        before = time.monotonic()
        assert lock.acquire() is None and lock.token is None
        after = time.monotonic()
        assert lock.quorum == 3 and lock.acquired_on == redlock.endpoints
        assert holders_on(redlock, name) == ["alice"] * 5
        # validity = TTL - elapsed - drift (50 + 2 ms), counted from the end of the acquire:
        # it runs until start + TTL - drift, the start lying between before and after
        assert 0 < lock.validity_ms <= 5000 - 52
        assert before + 4.948 <= lock.valid_until <= after + 4.948 and lock.is_valid and lock.is_held
        assert before <= lock.valid_until - lock.validity_ms / 1000 <= after  # the end of the acquire
        assert lock.release() is True
        assert holders_on(redlock, name) == ["-"] * 5 and not lock.is_valid
        assert lock.release() is False  # nothing held any more
        assert [e.kind for e in history.events()] == ["requested", "acquired", "released"]
        acquired = history.events(kind="acquired")[0].detail
        assert acquired["token"] is None and len(acquired["instances"]) == 5
    finally:
        lock.close()


def test_a_held_lock_is_refused_to_another_client(redlock, name):
    alice = Redlock.connect(redlock.endpoints, name, identifier="alice")
    bob = Redlock.connect(redlock.endpoints, name, identifier="bob", retry_delay_ms=10)
    try:
        alice.acquire()
        with pytest.raises(LockTimeout):
            bob.acquire(timeout=0.3)
        assert bob.value is None and holders_on(redlock, name) == ["alice"] * 5  # bob's failed rounds left no key
        alice.release()
        bob.acquire(timeout=5)
        assert holders_on(redlock, name) == ["bob"] * 5
        bob.release()
    finally:
        alice.close()
        bob.close()


def test_survives_one_crashed_instance_with_mutual_exclusion(redlock, name):
    redlock.nodes[4].kill()  # r5: SIGKILL, it stays down for this test
    store = FencedStore(redlock.nodes[0].client(), f"{name}-store", fenced=False)
    votes = []

    def make(client_name, sink):
        return Redlock.connect(redlock.endpoints, name, ttl_ms=10_000, identifier=client_name, on_event=sink,
                               retry_delay_ms=5)

    run = stress(make, [f"client-{n}" for n in range(4)], store, rounds=3,
                 on_hold=lambda lock: votes.append(list(lock.acquired_on)))
    # r5 is down; a rival's interleaved round may take one more instance: 3 or 4 votes
    assert all(redlock.endpoints[4] not in vote and len(vote) >= 3 for vote in votes), votes
    assert run.most_inside == 1 and run.releases == [True] * 12
    verdict = check_mutual_exclusion(store.writes(), run.history)
    assert verdict.ok, verdict.explain()
    assert len(run.history.events(kind="acquired")) == 12 == len(votes)


def test_a_frozen_instance_costs_one_instance_timeout_not_the_ttl(redlock, name):
    lock = Redlock.connect(redlock.endpoints, name, ttl_ms=5000, instance_timeout_ms=50)
    frozen = redlock.nodes[1]
    frozen.pause()  # SIGSTOP: it accepts connections but never answers
    try:
        began = time.monotonic()
        lock.acquire(timeout=5)
        took_ms = (time.monotonic() - began) * 1000
        assert frozen.endpoint not in lock.acquired_on and len(lock.acquired_on) == 4
        assert took_ms < 2000  # one reply timeout (50 ms) plus the others, not the 5 s TTL
        assert lock.validity_ms <= 5000 - 50 - 52  # the time waiting for r2 came off the validity
        # ... once: the validity runs from the end of the acquire, until its start + TTL - drift
        assert began + 4.948 <= lock.valid_until <= began + 4.948 + took_ms / 1000
        lock.release()
    finally:
        frozen.resume()
        lock.close()


def test_restart_without_fsync_grants_the_lock_twice(redlock, name):
    """A wins r1 r2 r3; r3 crashes and restarts empty (appendonly off); B wins r3 r4 r5."""
    ttl_ms = 10_000  # long: the double grant must not depend on how loaded the machine is
    blocker = [node.client() for node in redlock.nodes[3:]]
    alice = Redlock.connect(redlock.endpoints, name, ttl_ms=ttl_ms, identifier="alice")
    bob = Redlock.connect(redlock.endpoints, name, ttl_ms=ttl_ms, identifier="bob")
    try:
        for client in blocker:  # someone else's stale votes on r4 r5, so A wins exactly r1 r2 r3
            client.set(name, "carol:stale", px=ttl_ms)
        alice.acquire(timeout=5)
        assert alice.acquired_on == redlock.endpoints[:3]
        for client in blocker:  # carol's keys expire (deleted here rather than waited for)
            client.delete(name)
        assert holders_on(redlock, name) == ["alice", "alice", "alice", "-", "-"]

        redlock.crash_restart("r3")
        assert holders_on(redlock, name) == ["alice", "alice", "-", "-", "-"]
        bob.acquire(timeout=5)
        assert bob.acquired_on == redlock.endpoints[2:]
        assert holders_on(redlock, name) == ["alice", "alice", "bob", "bob", "bob"]

        # both validity windows are open at the same moment: two holders, by their own clocks
        now = time.monotonic()
        assert alice.is_valid and bob.is_valid
        assert max(alice.valid_until - alice.validity_ms / 1000, bob.valid_until - bob.validity_ms / 1000) \
            <= now < min(alice.valid_until, bob.valid_until)
        assert not alice.is_held  # only the servers can tell: alice's majority is gone
        assert bob.release() is True
    finally:
        for client in blocker:
            client.close()
        alice.close()
        bob.close()


def test_a_clock_step_on_three_instances_grants_the_lock_twice(name):
    """Redis expires keys by its own wall clock: stepped 30 s ahead on r1 r2 r3, they drop
    alice's 10 s key at once, and bob wins a majority while alice's validity still runs."""
    with labkit.up(zookeeper=0, etcd=0, redis=False, redlock=5, clocks=True, quiet=True) as lab:
        alice = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=10_000, identifier="alice")
        bob = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=10_000, identifier="bob")
        try:
            alice.acquire(timeout=5)
            assert holders_on(lab.redlock, name) == ["alice"] * 5
            for node in lab.redlock.nodes[:3]:
                node.clock.step(30)
            assert holders_on(lab.redlock, name) == ["-", "-", "-", "alice", "alice"]
            bob.acquire(timeout=5)
            assert bob.acquired_on == lab.redlock.endpoints[:3]
            assert alice.is_valid and bob.is_valid  # both hold, each by its own (correct) clock
        finally:
            alice.close()
            bob.close()


def test_a_holder_paused_past_its_validity_has_no_token_to_be_fenced_with(redlock, name):
    history = History()
    options = {"ttl_ms": 600, "instance_timeout_ms": 25}  # a short TTL needs short instance timeouts
    alice = Redlock.connect(redlock.endpoints, name, identifier="alice", on_event=history.sink("alice"), **options)
    bob = Redlock.connect(redlock.endpoints, name, identifier="bob", on_event=history.sink("bob"),
                          retry_delay_ms=10, **options)
    store = FencedStore(redlock.nodes[0].client(), f"{name}-store", fenced=True)
    try:
        alice.acquire(timeout=5)
        time.sleep(max(0.0, alice.valid_until - time.monotonic()) + 0.7)  # "paused": past validity and TTL
        bob.acquire(timeout=5)
        assert alice.value is not None and not alice.is_valid  # alice still believes; only her clock says no
        assert alice.token is None and bob.token is None       # nothing a resource could compare
        # a fenced store cannot tell the late write from bob's: both come without a token
        assert store.write("bob", bob.token, "bob's write") is False
        assert store.write("alice", alice.token, "alice's late write") is False
        assert alice.release() is False  # her key is bob's now: "lost"
        assert history.events(client="alice", kind="lost")
        assert bob.release() is True
    finally:
        alice.close()
        bob.close()
        store.client.close()


def test_latency_redlock_on_five_against_one_set_nx(redlock, name):
    rounds = 150
    single_client = instance_clients(redlock.endpoints[:1])[0]
    single = RedisLock(single_client, f"{name}-single", ttl_ms=5000)
    lock = Redlock.connect(redlock.endpoints, name, ttl_ms=5000)
    timings: dict[str, list[float]] = {"redlock": [], "set_nx": []}
    try:
        for _ in range(rounds):
            for label, each in (("redlock", lock), ("set_nx", single)):
                began = time.perf_counter()
                each.acquire(timeout=5)
                timings[label].append((time.perf_counter() - began) * 1000)
                each.release()
    finally:
        lock.close()
        single_client.close()
    p50 = {label: statistics.median(samples) for label, samples in timings.items()}
    p99 = {label: statistics.quantiles(samples, n=100)[98] for label, samples in timings.items()}
    print(f"\nacquire p50: Redlock on 5 {p50['redlock']:.3f} ms, single SET NX {p50['set_nx']:.3f} ms "
          f"(x{p50['redlock'] / p50['set_nx']:.1f}); p99 {p99['redlock']:.3f} / {p99['set_nx']:.3f} ms")
    assert len(timings["redlock"]) == len(timings["set_nx"]) == rounds


def test_the_registry_runs_redlock_in_client_processes(five_instances, redlock, name):
    handle = make_lock("redlock", connections_of(five_instances), name, "probe", lambda kind, **detail: None, ttl=2.0)
    try:
        assert isinstance(handle.lock, Redlock) and handle.lock.endpoints == redlock.endpoints
    finally:
        handle.close()
    store = FencedStore(redlock.nodes[0].client(), f"{name}-store", fenced=False)
    with spawn_clients(five_instances, "redlock", n=2, name=name, store=store, ttl=5.0) as clients:
        clients.run(loops=2, hold=0.01)
        verdict = check_mutual_exclusion(store.writes(), clients.history)
    assert verdict.ok, verdict.explain()
    assert len(clients.history.events(kind="acquired")) == 4


def test_bad_inputs_are_refused_with_a_reason(redlock, name):
    endpoints = redlock.endpoints
    with pytest.raises(ValueError, match="at least 3"):
        Redlock(instance_clients(endpoints[:2]), name)
    with pytest.raises(ValueError, match="appears twice"):
        Redlock(instance_clients(endpoints[:2] + endpoints[:1]), name)
    with pytest.raises(ValueError, match="no validity"):
        Redlock(instance_clients(endpoints), name, ttl_ms=2)
    plain = [redis.Redis(host=e.rsplit(":", 1)[0], port=int(e.rsplit(":", 1)[1]), **redlock.auth) for e in endpoints]
    with pytest.raises(ValueError, match="instance_clients"):  # default clients wait and retry for seconds
        Redlock(plain, name)
    with pytest.raises(ValueError, match="tenth"):
        Redlock.connect(endpoints, name, ttl_ms=300, instance_timeout_ms=50)
    with pytest.raises(InvalidClusterSize, match="fewer than 3"):
        labkit.up(zookeeper=0, etcd=0, redis=False, redlock=2, quiet=True)
    with pytest.raises(InvalidClusterSize, match="nothing to promote"):
        labkit.up(zookeeper=0, etcd=0, redis=True, sentinels=3, quiet=True)
    with pytest.raises(InvalidClusterSize, match="1, 3 or 5"):
        labkit.up(zookeeper=0, etcd=0, redis=True, replica=True, sentinels=2, quiet=True)
