"""Slow links (notebook 07, claim C23): the acquire time of Redis, ZooKeeper and etcd
against a delay injected on every link, predicted from each recipe's round trips.

What can fail, first: ``NetworkNotEnabled`` on a lab without ``network=True``; the client
libraries' timeouts when a delay is larger than their deadlines. The delay is removed
before the function returns, even when it fails.

How close is close: ``check_points`` holds each point between its round trips' worth of
delay (a floor nothing can beat) and ``upper_bound_ms``: the predicted round trips, plus the
no-delay acquire time measured in the same run, plus a margin for what a loaded machine adds
(the proxy wakes once per delayed hop): half of one round trip, never less than 50 ms. From
50 ms per link on, one round trip more than the recipe needs is over that bound by half a
round trip (50 ms at 50 ms); at 5 or 20 ms per link a round trip is within what a busy
machine adds, so the bound there only catches the grossly slow. ``slow_links(...,
extra_requests=1)`` sends one more request per acquire through the same delayed link, and
the check must refuse it at 50 ms (tests/lessons/test_partitions_lesson.py). Measured on 2 cores at
a load average of 12-13: at 50 ms the fastest acquires sat 36-50 ms under the bound, and with
one request more 53-80 ms over it.
"""
from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
from kazoo.exceptions import ConnectionLoss

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.errors import LockError
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.progress import shows_progress
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


# What the upper bound allows beyond the predicted round trips and the no-delay acquire:
# half of one round trip (2 x delay), so that one round trip more is refused by as much, but
# never less than LOADED_MS: a busy machine added up to 38 ms to an etcd acquire at 5 ms per
# link (16 delayed hops, each a timer wake-up of the proxy), 10-15 ms at 50 ms.
MARGIN_ROUND_TRIPS = 0.5
LOADED_MS = 50.0
FLOOR_FRACTION = 0.95   # the proxy's timer may fire a hair early: 5 % below the round trips


@dataclass
class SlowLinkPoint:
    """``fastest_ms`` is what the assertions use: a loaded machine only ever adds time, so
    the fastest of the rounds is the best estimate of what the round trips cost.
    ``baseline_ms``: the median acquire at no delay in the same run (what one acquire costs
    on this machine, at its load, besides the delayed round trips)."""

    system: str
    delay_ms: float
    predicted_ms: float
    fastest_ms: float
    median_ms: float
    samples: list[float] = field(default_factory=list)
    baseline_ms: float = 0.0
    extra_requests: int = 0

    def row(self) -> dict:
        return {"system": self.system, "delay (ms)": self.delay_ms, "predicted (ms)": round(self.predicted_ms),
                "fastest (ms)": round(self.fastest_ms), "median (ms)": round(self.median_ms),
                "upper bound (ms)": round(upper_bound_ms(self.system, self.delay_ms, self.baseline_ms))}


def round_trips(system: str) -> int:
    """The round trips of one acquire on a free lock, through the client's link and between servers."""
    return sum(ROUND_TRIPS[system].values())


def predicted_ms(system: str, delay_ms: float, base_ms: float) -> float:
    """``base_ms`` (the fastest acquire with no delay) plus one round trip (2 x delay) per trip."""
    return base_ms + 2 * delay_ms * round_trips(system)


def floor_ms(system: str, delay_ms: float) -> float:
    """What the delayed round trips alone cost, less 5 %: no acquire can be faster."""
    return FLOOR_FRACTION * 2 * delay_ms * round_trips(system)


def margin_ms(delay_ms: float) -> float:
    """What the upper bound allows beyond the round trips and the no-delay acquire: half a
    round trip, at least ``LOADED_MS``."""
    return max(MARGIN_ROUND_TRIPS * 2 * delay_ms, LOADED_MS)


def upper_bound_ms(system: str, delay_ms: float, baseline_ms: float) -> float:
    """The predicted round trips at ``delay_ms``, plus ``baseline_ms`` (the no-delay acquire
    of the same run), plus ``margin_ms``."""
    return baseline_ms + 2 * delay_ms * round_trips(system) + margin_ms(delay_ms)


def check_points(points: list[SlowLinkPoint]) -> list[str]:
    """What is wrong with each point (empty: every point costs its round trips, no fewer and
    no more): faster than its round trips, or slower than ``upper_bound_ms``."""
    problems = []
    for p in points:
        low, high = floor_ms(p.system, p.delay_ms), upper_bound_ms(p.system, p.delay_ms, p.baseline_ms)
        trips = f"{round_trips(p.system)} round trip{'s' * (round_trips(p.system) != 1)}"
        where = f"{p.system} at {p.delay_ms:g} ms per link: the fastest acquire took {p.fastest_ms:.0f} ms"
        if p.fastest_ms < low:
            problems.append(f"{where}, less than its {trips} ({low:.0f} ms)")
        elif p.fastest_ms > high:
            problems.append(f"{where}, more than its {trips} + the no-delay acquire "
                            f"({p.baseline_ms:.0f} ms) + a {margin_ms(p.delay_ms):.0f} ms margin = {high:.0f} ms: "
                            "a round trip more than predicted?")
    return problems


@shows_progress("lock rounds over slowed links")
def slow_links(lab, delays_ms=(0, 5, 20, 50), rounds: int = 5, extra_requests: int = 0) -> list[SlowLinkPoint]:
    """Every link of the lab (servers and the ``slow-1`` client) held ``d`` ms each way;
    time ``rounds`` acquires and releases of a free lock per system. The clients talk to the
    leaders, so that a write costs exactly one quorum round trip (leader -> follower -> leader);
    through a follower it would add the forward to the leader. Points per system and delay;
    the prediction uses the fastest acquire at d = 0 as its base. ``delays_ms`` must start
    with 0: that is the baseline. ``extra_requests``: a control for ``check_points``, each
    acquire also sends that many reads through the same link before it returns (Redis PING,
    ZooKeeper exists, etcd serializable get: one client round trip each, no quorum)."""
    if not delays_ms or delays_ms[0] != 0:
        raise ValueError(f"delays_ms={delays_ms!r} must start with 0: the no-delay acquire is the baseline")
    zookeeper = lab.zookeeper.client(timeout=10, via="slow-1", nodes=[lab.zookeeper.leader()])
    etcd = lab.etcd.client(node=lab.etcd.leader(), via="slow-1", timeout=10)
    parent = f"/slow-{uuid.uuid4().hex[:6]}"   # one parent for every acquire: creating it is not part of the price
    redis_client = lab.redis.client(via="slow-1")

    def redis_acquire():
        name = f"slow:{uuid.uuid4().hex[:6]}"
        began = time.perf_counter()
        redis_client.set(name, "slow-1", nx=True, px=10_000)
        for _ in range(extra_requests):
            redis_client.ping()
        took = time.perf_counter() - began
        redis_client.delete(name)
        return took

    def zookeeper_acquire():
        lock = ZooKeeperLock(zookeeper, parent, "slow-1")
        began = time.perf_counter()
        lock.acquire(timeout=10)
        for _ in range(extra_requests):
            zookeeper.exists(parent)
        took = time.perf_counter() - began
        retry_until = time.monotonic() + 30
        while True:
            try:
                lock.release()
                return took
            except LockError as error:        # a loaded machine's blip: kazoo reconnects, the session lives
                if not isinstance(error.__cause__, ConnectionLoss) or time.monotonic() > retry_until:
                    raise

    def etcd_acquire():
        began = time.perf_counter()
        session = EtcdSession(etcd, ttl=10)
        mutex = EtcdMutex(session, parent, "slow-1")
        mutex.lock(timeout=10)
        for _ in range(extra_requests):
            etcd.get(parent, serializable=True)
        took = time.perf_counter() - began
        mutex.unlock()
        session.close()
        return took

    acquires = {"redis": redis_acquire, "zookeeper": zookeeper_acquire, "etcd": etcd_acquire}
    points, base, baseline = [], {}, {}
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
                baseline.setdefault(system, statistics.median(samples))
                points.append(SlowLinkPoint(system, delay, predicted_ms(system, delay, base[system]),
                                            min(samples), statistics.median(samples), samples,
                                            baseline[system], extra_requests))
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
                label=f"{system}: predicted ({round_trips(system)} round trips)")
        ax.plot(delays, [point.fastest_ms for point in mine], "o", color=color, label=f"{system}: fastest")
        ax.plot(delays, [point.median_ms for point in mine], "x", color=color, alpha=0.6)
    ax.set_xlabel("delay per link, each way (ms)")
    ax.set_ylabel("acquire time (ms)")
    ax.set_title("A slow link multiplies the round trips of an acquire")
    ax.legend(fontsize=8)
    return ax
