"""Experiments of the Redis vs consensus lesson (notebook 01) that take more than a few lines.

* ``acquire_and_release``: one lock round trip as an operation to time.
* ``pttl_until``: a Redis key's remaining TTL, sampled until something happens.
* ``acquire_within``: try a lock for a while; True if it was acquired, False if not.
* ``times_slower``: a measured ratio as the nearest of the choices a learner predicts from.
* ``kill_redis_holder``: two client processes on one Redis lock; the holder is SIGKILLed:
  the key's facts right after, its PTTL until the waiter holds the lock, and when it did.
* ``vanish_on_restart`` / ``resurrect_from_snapshot``: a Redis lock across a kill -9 and
  restart without persistence, and across a restart from a snapshot taken while it was held.
* ``grant_twice_on_failover``: replication cut, a lock on the primary, failover, a second client.
* ``kill_leaders``: SIGKILL the ZooKeeper and etcd leaders while A holds; can B get the lock?
* ``leader_crash_pairs``: client A and client B on one lock, on ZooKeeper and on etcd, each
  with its own session; the etcd clients talk to followers, so that killing the leader
  tests the cluster, not the loss of a client's only connection.

What can fail: ``TimeoutError`` (naming what was awaited) when a condition does not come in
time; the client libraries' errors when a server does not answer; ``LockTimeout`` is turned
into False by ``acquire_within`` only.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from labkit import faults
from labkit.clients import spawn_clients
from labkit.faults.redis import crash_and_restart, cut_replication, fail_over, key_facts
from labkit.locks import LockTimeout
from labkit.locks.redis_lock import RedisLock
from labkit.locks.registry import make_lock
from labkit.progress import shows_progress
from labkit.record.history import History
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


def acquire_and_release(lock: Any, timeout: float = 5.0) -> Callable[[], None]:
    """An operation that takes ``lock`` and lets it go again."""
    def operation() -> None:
        lock.acquire(timeout=timeout)
        lock.release()
    return operation


def pttl_until(redis_client: Any, key: str, done: Callable[[], bool], since: float,
               timeout: float, every: float = 0.02) -> list[tuple[float, int]]:
    """Sample ``PTTL key`` every ``every`` seconds until ``done()``; return (seconds since
    ``since`` (a ``time.time()`` value), PTTL in ms) pairs. Stops at ``timeout`` seconds
    without raising: the caller's asserts say what should have happened."""
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:   # a sampler, not a wait: every reading is kept
        samples.append((time.time() - since, redis_client.pttl(key)))
        time.sleep(every)
    return samples


def acquire_within(lock: Any, timeout: float) -> bool:
    """True if ``lock`` was acquired within ``timeout`` seconds, False if it timed out."""
    try:
        lock.acquire(timeout=timeout)
        return True
    except LockTimeout:
        return False


@shows_progress("holder and waiter pairs on each system")
def leader_crash_pairs(lab: "Lab", history: History, path: str,
                       session_timeout: float = 10.0, ttl: int = 5) -> tuple[dict[str, tuple[Any, Any]], ExitStack]:
    """{"ZooKeeper": (lock A, lock B), "etcd": (lock A, lock B)} on ``path``, each lock with
    its own session, and an ExitStack that closes every session and client. The
    ZooKeeper session timeout (10 s) outlives a leader election; the etcd clients talk to
    two followers. Events go to ``history`` as "ZooKeeper A", "etcd B", ..."""
    opened = ExitStack()
    pairs: dict[str, tuple[Any, Any]] = {}
    followers = [node for node in lab.etcd.nodes if node.role == "follower"]
    connections = {"ZooKeeper": [{"zookeeper": lab.zookeeper.hosts}] * 2,
                   "etcd": [{"etcd": node.endpoint} for node in followers]}
    for system, recipe in (("ZooKeeper", "zookeeper"), ("etcd", "etcd")):
        handles = [make_lock(recipe, reach, path, name, history.sink(f"{system} {name}"),
                             session_timeout=session_timeout, ttl=ttl) for name, reach in zip("AB", connections[system])]
        for handle in handles:
            opened.callback(handle.close)
        pairs[system] = tuple(handle.lock for handle in handles)
    return pairs, opened



@dataclass(frozen=True)
class DeadRedisHolder:
    """The key right after the SIGKILL; (seconds since the kill, PTTL in ms) until client-2
    held the lock; seconds from the kill to client-2's acquire."""

    right_after_kill: dict[str, Any]
    countdown: list[tuple[float, int]]
    taken_over_after: float


@shows_progress("a Redis holder killed, a second client polling")
def kill_redis_holder(lab: "Lab", redis_client: Any, key: str, ttl: float, history: History) -> DeadRedisHolder:
    """client-1 holds ``key`` (TTL ``ttl`` s), client-2 polls for it; client-1 is SIGKILLed."""
    with spawn_clients(lab, recipe="redis", n=2, name=key, ttl=ttl, history=history) as clients:
        holder, waiter = clients[0], clients[1]
        holder.acquire()
        request = waiter.send("acquire", timeout=ttl + 10)        # client-2 starts polling now
        history.wait_for("requested", client=waiter.name)
        holder.kill()                                             # SIGKILL: no release, no goodbye
        killed_at = time.time()
        right_after_kill = key_facts(redis_client, key)
        countdown = pttl_until(redis_client, key, done=lambda: waiter.state == "holding", since=killed_at,
                               timeout=ttl + 10)
        waiter.wait_reply(request, timeout=10)
        taken_over_after = history.events(client=waiter.name, kind="acquired")[0].time - killed_at
    return DeadRedisHolder(right_after_kill, countdown, taken_over_after)


@dataclass(frozen=True)
class Vanished:
    """The key before the crash and after the restart; how long the restart took; client-B
    (holding the lock, if it could take it); what client-A believed, and what it learned
    when it asked."""

    before_crash: dict[str, Any]
    after_restart: dict[str, Any]
    restart_seconds: float
    client_b: RedisLock
    a_still_believes: bool
    a_finds_out: bool


def vanish_on_restart(lab: "Lab", redis_client: Any, key: str, history: History) -> Vanished:
    """client-A holds ``key`` (TTL 30 s); the primary is killed with SIGKILL and restarted;
    client-B asks for the lock; then client-A asks the server whether it still holds it."""
    client_a = RedisLock(lab.redis.client(), key, ttl_ms=30_000, identifier="client-A", on_event=history.sink("client-A"))
    client_a.acquire(timeout=1)
    before_crash = key_facts(redis_client, key)
    history.record_fault("kill -9 and restart", lab.redis.primary.name)
    restart_seconds = crash_and_restart(lab.redis.primary)
    after_restart = key_facts(redis_client, key)
    client_b = RedisLock(lab.redis.client(), key, ttl_ms=30_000, identifier="client-B", on_event=history.sink("client-B"))
    client_b.acquire(timeout=1)
    a_still_believes = client_a.value is not None      # A has not asked the server since it acquired
    return Vanished(before_crash, after_restart, restart_seconds, client_b, a_still_believes, client_a.is_held)


@dataclass(frozen=True)
class Resurrected:
    """client-C's value; the key after its release and after the restart; whether client-D
    got the lock within a second; client-C's lock object."""

    value_of_c: str
    after_release: dict[str, Any]
    after_restart: dict[str, Any]
    d_got_it: bool
    client_c: RedisLock


def resurrect_from_snapshot(lab: "Lab", redis_client: Any, key: str, history: History) -> Resurrected:
    """client-C holds ``key`` (TTL 60 s); SAVE; client-C releases; kill -9 and restart (Redis
    loads the snapshot); client-D asks for the lock for one second."""
    client_c = RedisLock(redis_client, key, ttl_ms=60_000, identifier="client-C", on_event=history.sink("client-C"))
    client_c.acquire(timeout=1)
    value_of_c = client_c.value
    redis_client.save()                                   # a snapshot (dump.rdb) while client-C holds the lock
    history.record_fault("SAVE (snapshot)", lab.redis.primary.name)
    client_c.release()
    after_release = key_facts(redis_client, key)
    history.record_fault("kill -9 and restart", lab.redis.primary.name)
    crash_and_restart(lab.redis.primary)
    after_restart = key_facts(redis_client, key)
    client_d = RedisLock(redis_client, key, ttl_ms=60_000, identifier="client-D", on_event=history.sink("client-D"))
    return Resurrected(value_of_c, after_release, after_restart, acquire_within(client_d, timeout=1.0), client_c)


@dataclass(frozen=True)
class GrantedTwice:
    """The promoted replica and the two clients that each got OK for the same lock."""

    new_primary: Any
    client_a: Any   # a RedisLock, or a library's lock
    client_b: Any


def grant_twice_on_failover(redis: Any, key: str, history: History, work: float = 0.2,
                            lock_type: Callable[..., Any] = RedisLock) -> GrantedTwice:
    """On a primary + replica (``redis``, e.g. ``lab.redis``): replication cut, client-A
    locks ``key`` on the primary, the primary is killed and the replica promoted, client-B
    locks ``key`` on it; both then work for ``work`` s. ``lock_type``: labkit's RedisLock,
    or a library's lock built the same way (``labkit.locks.redis_peers``)."""
    history.record_fault("cut replication", "redis1 -> redis2")
    cut_replication(redis)
    client_a = lock_type(redis.client(), key, ttl_ms=30_000, identifier="client-A", on_event=history.sink("client-A"))
    client_a.acquire(timeout=1)                # OK from the primary: the write is on the primary only
    history.record_fault("kill primary, promote replica", "redis1")
    new_primary = fail_over(redis)
    client_b = lock_type(redis.client(), key, ttl_ms=30_000, identifier="client-B", on_event=history.sink("client-B"))
    client_b.acquire(timeout=1)
    time.sleep(work)                           # both work under "their" lock (a chosen time)
    history.record_fault("both still believe they hold it", key)
    return GrantedTwice(new_primary, client_a, client_b)


@shows_progress("the leaders killed under their lock holders")
def kill_leaders(lab: "Lab", pairs: dict[str, tuple[Any, Any]], history: History, patience: float = 2.0) -> dict[str, bool]:
    """With each A holding: SIGKILL the ZooKeeper leader and the etcd leader, wait for new
    ones and for the ZooKeeper clients to reconnect; then each B tries for ``patience`` s.
    Returns {"ZooKeeper B": blocked?, "etcd B": blocked?}; prints which node died."""
    for cluster in (lab.zookeeper, lab.etcd):
        killed = faults.kill_leader(cluster, history)           # SIGKILL the node that orders the writes
        print(f"killed {killed.name}; new leader: {cluster.wait_for_leader(30).name}")
    zookeeper_a, zookeeper_b = pairs["ZooKeeper"]
    wait_until(lambda: zookeeper_a.client.connected and zookeeper_b.client.connected,   # kazoo reconnects elsewhere
               "the ZooKeeper clients to reconnect", timeout=15)
    return {"ZooKeeper B": not acquire_within(zookeeper_b, patience),
            "etcd B": not acquire_within(pairs["etcd"][1], patience)}


SLOWER_CHOICES = ("about the same", "2×", "10×", "100×")


def times_slower(ratio: float) -> str:
    """The choice of ``SLOWER_CHOICES`` nearest to ``ratio`` on a log scale (1, 2, 10, 100)."""
    for bound, label in ((1.4, "about the same"), (4.5, "2×"), (32.0, "10×")):
        if ratio < bound:
            return label
    return "100×"
