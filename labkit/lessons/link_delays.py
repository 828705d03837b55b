"""Slow links (notebook 07, claim C23): the acquire time of Redis, ZooKeeper and etcd
against a delay injected on every link, predicted from each recipe's round trips.

What can fail, first: ``NetworkNotEnabled`` on a lab without ``network=True``; the client
libraries' timeouts when a delay is larger than their deadlines. The delay is removed
before the function returns, even when it fails.
"""
from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass, field

import matplotlib.pyplot as plt

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.vocabulary import SERVICE_COLOURS


# Round trips of one acquire on a free lock, through the client's link and between servers.
ROUND_TRIPS = {
    # SET NX PX: one request, one reply
    "redis": {"client": 1, "quorum": 0},
    # create (the leader commits it: one round trip to a follower) + getChildren (local)
    "zookeeper": {"client": 2, "quorum": 1},
    # lease grant + txn: both go through the leader's log (one quorum round trip each)
    "etcd": {"client": 2, "quorum": 2},
}


@dataclass
class SlowLinkPoint:
    """``fastest_ms`` is what the assertions use: a loaded machine only ever adds time, so
    the fastest of the rounds is the best estimate of what the round trips cost."""

    system: str
    delay_ms: float
    predicted_ms: float
    fastest_ms: float
    median_ms: float
    samples: list[float] = field(default_factory=list)

    def row(self) -> dict:
        return {"system": self.system, "delay (ms)": self.delay_ms, "predicted (ms)": round(self.predicted_ms),
                "fastest (ms)": round(self.fastest_ms), "median (ms)": round(self.median_ms)}


def predicted_ms(system: str, delay_ms: float, base_ms: float) -> float:
    """``base_ms`` (the fastest acquire with no delay) plus one round trip (2 x delay) per trip."""
    trips = ROUND_TRIPS[system]
    return base_ms + 2 * delay_ms * (trips["client"] + trips["quorum"])


def slow_links(lab, delays_ms=(0, 5, 20, 50), rounds: int = 5) -> list[SlowLinkPoint]:
    """Every link of the lab (servers and the ``slow-1`` client) held ``d`` ms each way;
    time ``rounds`` acquires and releases of a free lock per system. The clients talk to the
    leaders, so that a write costs exactly one quorum round trip (leader -> follower -> leader);
    through a follower it would add the forward to the leader. Points per system and delay;
    the prediction uses the fastest acquire at d = 0 as its base."""
    zookeeper = lab.zookeeper.client(timeout=10, via="slow-1", nodes=[lab.zookeeper.leader()])
    etcd = lab.etcd.client(node=lab.etcd.leader(), via="slow-1", timeout=10)
    parent = f"/slow-{uuid.uuid4().hex[:6]}"   # one parent for every acquire: creating it is not part of the price
    redis_client = lab.redis.client(via="slow-1")

    def redis_acquire():
        name = f"slow:{uuid.uuid4().hex[:6]}"
        began = time.perf_counter()
        redis_client.set(name, "slow-1", nx=True, px=10_000)
        took = time.perf_counter() - began
        redis_client.delete(name)
        return took

    def zookeeper_acquire():
        lock = ZooKeeperLock(zookeeper, parent, "slow-1")
        began = time.perf_counter()
        lock.acquire(timeout=10)
        took = time.perf_counter() - began
        lock.release()
        return took

    def etcd_acquire():
        began = time.perf_counter()
        session = EtcdSession(etcd, ttl=10)
        mutex = EtcdMutex(session, parent, "slow-1")
        mutex.lock(timeout=10)
        took = time.perf_counter() - began
        mutex.unlock()
        session.close()
        return took

    acquires = {"redis": redis_acquire, "zookeeper": zookeeper_acquire, "etcd": etcd_acquire}
    points, base = [], {}
    try:
        for acquire in acquires.values():
            acquire()                      # warm: connections open, first-use costs paid
        for delay in delays_ms:
            lab.heal()
            if delay:
                lab.delay(delay)
            for system, acquire in acquires.items():
                samples = [1000 * acquire() for _ in range(rounds)]
                base.setdefault(system, min(samples))
                points.append(SlowLinkPoint(system, delay, predicted_ms(system, delay, base[system]),
                                            min(samples), statistics.median(samples), samples))
    finally:
        lab.heal()
        zookeeper.stop()
        zookeeper.close()
        etcd.close()
        redis_client.close()
    return points


def plot_slow_links(points: list[SlowLinkPoint], ax=None):
    """Predicted (lines), fastest (dots) and median (crosses) acquire time against the delay per link."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    for color, system in zip((SERVICE_COLOURS[name] for name in ("Redis", "ZooKeeper", "etcd")), ROUND_TRIPS):
        mine = [point for point in points if point.system == system]
        delays = [point.delay_ms for point in mine]
        ax.plot(delays, [point.predicted_ms for point in mine], color=color, alpha=0.6,
                label=f"{system}: predicted ({sum(ROUND_TRIPS[system].values())} round trips)")
        ax.plot(delays, [point.fastest_ms for point in mine], "o", color=color, label=f"{system}: fastest")
        ax.plot(delays, [point.median_ms for point in mine], "x", color=color, alpha=0.6)
    ax.set_xlabel("delay per link, each way (ms)")
    ax.set_ylabel("acquire time (ms)")
    ax.set_title("A slow link multiplies the round trips of an acquire")
    ax.legend(fontsize=8)
    return ax
