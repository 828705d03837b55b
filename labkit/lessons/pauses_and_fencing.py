"""Notebook 04: a pause longer than the session timeout, and what fencing does about it.

``pause_past_timeout`` freezes a holder (SIGSTOP) longer than its session timeout or
lease TTL, lets a second client take the lock meanwhile, then lets the first one write
late to a store, fenced or not (``pause_past_timeout_at_once``: several such runs at the
same time). ``redis_lock_values`` / ``pairs_in_order`` /
``sort_rank_plot``: a Redis lock's values carry no order. ``holder_behind_link``: a holder
whose connection can be cut (its release fails while its session lives).
``fenced_and_unfenced`` / ``take_over_and_write``: the check-then-write race.

What can fail: ``labkit.clients.ClientError`` / ``ClientTimeout`` when a client process
does not start or answer, ``TimeoutError`` when an expected event does not come.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

import redis

from kazoo.client import KazooClient

from labkit.faults.relay import TcpLink
from labkit.harness.frozen_holder import frozen_holder
from labkit.locks.redis_lock import RedisLock
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.progress import shows_progress
from labkit.record.checker import Verdict, check_mutual_exclusion
from labkit.record.events import EventSink, ignore_events
from labkit.record.fencing import FencedStore, StoreWrite
from labkit.record.history import History
from labkit.vocabulary import GUIDE_COLOUR

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


@dataclass
class PauseOutcome:
    """What ``pause_past_timeout`` saw. Tokens are ZooKeeper czxids (the lock node's) or etcd
    create revisions; ``writes`` is the store's own record, in the order it ran them."""

    recipe: str
    fenced: bool
    history: History
    writes: list[StoreWrite]
    old_token: int
    new_token: int
    late_write_accepted: bool
    new_holder_acquired_at: float   # time.time() of the second client's "acquired"
    old_holder_told_at: float       # time.time() of the paused client's "lost"

    @property
    def verdict(self) -> Verdict:
        return check_mutual_exclusion(self.writes)

    def rows(self) -> list[dict[str, Any]]:
        """The store's record as table rows, time in seconds since its first write."""
        origin = self.writes[0].time
        return [{"t (s)": round(write.time - origin, 3), "client": write.client, "token": write.token,
                 "value": write.value, "accepted": write.accepted, "reason": write.reason}
                for write in self.writes]


@shows_progress("a holder paused past its timeout")
def pause_past_timeout(lab: Lab, recipe: str = "zookeeper", fenced: bool = True, timeout: float = 1.0,
                       pause: float = 3.0, name: str | None = None) -> PauseOutcome:
    """Two client processes of ``recipe`` share a lock and a FencedStore (``fenced`` or not).

    client-1 acquires and writes; it is frozen with SIGSTOP for ``pause`` seconds, longer
    than its session timeout / lease TTL (``timeout`` seconds); client-2 acquires as soon
    as the server lets it, and writes; client-1 resumes and, still believing it holds the
    lock, writes with its old token. Raises ValueError if ``pause`` is not longer than
    ``timeout``, ClientTimeout if client-2 never gets the lock.
    """
    if pause <= timeout:
        raise ValueError(f"pause ({pause} s) must be longer than the timeout ({timeout} s), or nothing is lost")
    name = name or f"/locks/pause-{recipe}-{'fenced' if fenced else 'unfenced'}-{time.time_ns()}"
    history = History()
    with frozen_holder(lab, recipe, name, pause, fenced=fenced, history=history,
                       session_timeout=timeout, ttl=timeout) as run:
        told = history.wait_for("lost", client=run.frozen.name, timeout=timeout + 10)[0]
        other = run.new_holder
        other.release_through_blips()  # so that its hold ends as a release, not with the closing session
    acquired = history.events(client=other.name, kind="acquired")[0]
    writes = run.writes
    return PauseOutcome(recipe, fenced, history, writes, run.old_token, run.new_token, run.late_write_accepted,
                        acquired.time, told.time)


@shows_progress("holders paused past their timeouts, side by side")
def pause_past_timeout_at_once(lab: Lab, cases: dict[str, tuple[str, bool]], timeout: float = 1.0,
                               pause: float = 3.0) -> dict[str, PauseOutcome]:
    """``pause_past_timeout`` for every case (label → (recipe, fenced)) at the same time:
    each has its own lock, store and client processes, so the runs do not meet, and they
    take the time of one. Raises the first run's error."""
    with ThreadPoolExecutor(len(cases)) as pool:
        futures = {label: pool.submit(pause_past_timeout, lab, recipe, fenced=fenced, timeout=timeout, pause=pause)
                   for label, (recipe, fenced) in cases.items()}
        return {label: future.result() for label, future in futures.items()}


# ---- why a Redis lock has no safe token --------------------------------------------------------
def redis_lock_values(redis_client: redis.Redis, name: str, n: int = 12) -> list[str]:
    """Take and release a Redis lock on ``name`` ``n`` times; return the random part of its
    value each time, in acquisition order."""
    lock = RedisLock(redis_client, name, ttl_ms=2000, identifier="holder")
    values = []
    for _ in range(n):
        lock.acquire(timeout=2)
        values.append(lock.value.split(":", 1)[1])
        lock.release()
    return values


def pairs_in_order(values: list[str]) -> tuple[int, int]:
    """(pairs of values that sort in the order they came, all pairs)."""
    pairs = [(a, b) for index, a in enumerate(values) for b in values[index + 1:]]
    return sum(a < b for a, b in pairs), len(pairs)


def sort_rank_plot(values: list[str], ax: Any = None) -> Any:
    """Rank of each value when sorted, against the order the values were taken."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3), layout="constrained")
    order = range(1, len(values) + 1)
    rank = {value: position for position, value in enumerate(sorted(values), start=1)}
    ax.plot(order, [rank[value] for value in values], marker="o", label="Redis lock values")
    ax.plot(order, order, linestyle=":", color=GUIDE_COLOUR, label="a usable token (rank = order taken)")
    ax.set_xlabel("acquisition number (1 = first)")
    ax.set_ylabel("rank of the value when sorted")
    ax.set_title("Random lock values carry no order")
    ax.legend()
    return ax


# ---- a holder whose only road to ZooKeeper can be cut ------------------------------------------
def holder_behind_link(lab: Lab, path: str, session_timeout: float,
                       on_event: EventSink = ignore_events) -> tuple[TcpLink, KazooClient, ZooKeeperLock]:
    """A ``ZooKeeperLock`` on ``path`` that holds the lock, whose client reaches the first
    ZooKeeper node only through a ``TcpLink`` (cut it with ``link.cut()``). The caller
    closes the client and the link. Raises LockTimeout if the lock is not free within 10 s."""
    link = TcpLink(lab.zookeeper.nodes[0].endpoint)
    client = KazooClient(hosts=link.address, timeout=session_timeout, **lab.zookeeper.auth)
    client.start(timeout=10)
    lock = ZooKeeperLock(client, path, identifier="holder", on_event=on_event)
    lock.acquire(timeout=10)
    return link, client, lock


def fenced_and_unfenced(lab: Lab, name: str) -> dict[bool, FencedStore]:
    """Two empty stores on the lab's Redis: {False: unfenced, True: fenced}."""
    stores = {fenced: FencedStore(lab.redis.client(), f"{name}:{'fenced' if fenced else 'unfenced'}", fenced=fenced)
              for fenced in (False, True)}
    for store in stores.values():
        store.reset()
    return stores


def take_over_and_write(lab: Lab, path: str, stores: Iterable[FencedStore], identifier: str = "other") -> int:
    """A new client takes the lock on ``path``, writes to every store with its token,
    releases and closes its session. Returns its token."""
    client = lab.zookeeper.client(timeout=4.0)
    try:
        lock = ZooKeeperLock(client, path, identifier=identifier)
        token = lock.acquire(timeout=10)
        for store in stores:
            store.write(identifier, token, "the new holder's data")
        lock.release()
        return token
    finally:
        client.stop()
        client.close()
