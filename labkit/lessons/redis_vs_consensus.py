"""Experiments of the Redis vs consensus lesson (notebook 01) that take more than a few lines.

* ``acquire_and_release``: one lock round trip as an operation to time.
* ``pttl_until``: a Redis key's remaining TTL, sampled until something happens.
* ``acquire_within``: try a lock for a while; True if it was acquired, False if not.
* ``times_slower``: a measured ratio as the nearest of the choices a learner predicts from.
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
from typing import TYPE_CHECKING, Any, Callable

from labkit.locks import LockTimeout
from labkit.locks.registry import make_lock
from labkit.record.history import History

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
    while not done() and time.monotonic() < deadline:
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


SLOWER_CHOICES = ("about the same", "2×", "10×", "100×")


def times_slower(ratio: float) -> str:
    """The choice of ``SLOWER_CHOICES`` nearest to ``ratio`` on a log scale (1, 2, 10, 100)."""
    for bound, label in ((1.4, "about the same"), (4.5, "2×"), (32.0, "10×")):
        if ratio < bound:
            return label
    return "100×"
