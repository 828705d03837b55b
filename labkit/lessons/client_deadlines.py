"""A holder cut off from its servers must stop holding *before* the server frees its lock.

``cut_off_holder(lab, recipe)`` runs the experiment on real servers: a holder talks to
the server through a ``TcpLink`` (a relay on 127.0.0.1), a waiter talks to it directly and
queues behind the holder; then the link is cut (bytes dropped both ways, nobody told).
Nothing reaches the holder any more: not "your session expired", not "your lease is gone".
Its only guide is its own clock, the client-side deadline of ``ZooKeeperLock`` and
``EtcdSession``. The outcome says, in milliseconds after the cut, when the holder gave up
(its "lost" event) and when the server freed the lock (the waiter's watch fired because the
server deleted the holder's node or key), and the waiter's acquire.

What can fail: ``TimeoutError`` if the holder never gives up or the waiter never acquires
within the deadline (the message says which), the client libraries' errors if the lab's
servers are unreachable.
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from labkit.faults.relay import TcpLink
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.registry import recipe_named
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.progress import shows_progress
from labkit.servers.services.etcd import etcd_client
from labkit.timing import wait_until

# the recipes of labkit with a client-side deadline (is_held turns False before the server frees)
DEADLINE_RECIPES = ("zookeeper", "etcd")


@dataclass(frozen=True)
class CutOffOutcome:
    """Times in ms after the cut. ``gave_up_ms``: the holder's "lost" event; ``freed_ms``:
    the waiter's watch fired (the server deleted the holder's node/key); ``acquired_ms``:
    the waiter holds the lock. ``timeout_s``: the session timeout or lease TTL."""

    recipe: str
    timeout_s: float
    gave_up_ms: float
    freed_ms: float
    acquired_ms: float
    lost_reason: str
    holder_still_held_after: bool   # is_held read after the waiter acquired: must be False

    @property
    def gave_up_first(self) -> bool:
        return self.gave_up_ms < self.freed_ms <= self.acquired_ms and not self.holder_still_held_after

    def row(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "timeout (s)": self.timeout_s, "holder gave up (ms)": round(self.gave_up_ms),
                "server freed (ms)": round(self.freed_ms), "waiter acquired (ms)": round(self.acquired_ms),
                "margin (ms)": round(self.freed_ms - self.gave_up_ms)}


class FirstEvents:
    """The first time each (client, kind) happened, in monotonic seconds, plus details: an
    ``on_event`` sink per client (``sink``), and ``wait_for`` one of them with a deadline."""

    def __init__(self):
        self.first: dict[tuple[str, str], tuple[float, dict]] = {}
        self._lock = threading.Lock()

    def sink(self, client: str):
        def on_event(kind: str, **detail: Any) -> None:
            with self._lock:
                self.first.setdefault((client, kind), (time.monotonic(), detail))
        return on_event

    def wait_for(self, client: str, kind: str, timeout: float) -> tuple[float, dict]:
        wait_until(lambda: (client, kind) in self.first, f"a {kind!r} event from {client}", timeout, 0.005,
                   error=TimeoutError(f"no {kind!r} event from {client} within {timeout:.0f} s"))
        return self.first[(client, kind)]


@shows_progress("a holder cut off from its server, until it gives up")
def cut_off_holder(lab, recipe: str = "zookeeper", timeout: float = 2.0) -> CutOffOutcome:
    """Cut a lock holder off from its server and time who acts first (see the module
    docstring). ``timeout``: the holder's session timeout (ZooKeeper) or lease TTL (etcd,
    whole seconds). Uses the lab's first node of that service."""
    recipe_named(recipe, among=DEADLINE_RECIPES)
    clock, name = FirstEvents(), f"cut-off-{uuid.uuid4().hex[:8]}"
    if recipe == "zookeeper":
        target = lab.zookeeper.nodes[0].endpoint
        run = _ZooKeeperPair
    else:
        target = lab.etcd.nodes[0].endpoint
        run = _EtcdPair
    with TcpLink(target) as link, ThreadPoolExecutor(1) as pool:
        with run(lab, link, name, timeout, clock) as (holder, waiter):
            holder.acquire(timeout=30)
            waiting = pool.submit(waiter.acquire, 30 + 10 * timeout)
            clock.wait_for("waiter", "watch", timeout=30)
            cut_at = time.monotonic()
            link.cut()
            waiting.result(timeout=30 + 10 * timeout)
            acquired_at = clock.wait_for("waiter", "acquired", timeout=1)[0]
            still_held = holder.is_held
            gave_up_at, lost = clock.wait_for("holder", "lost", timeout=1)
            freed_at = clock.first.get(("waiter", "woke"), (acquired_at, {}))[0]
            waiter.release()
            link.restore()                        # let the holder's client hear the news and close
    return CutOffOutcome(recipe, float(timeout), 1000 * (gave_up_at - cut_at), 1000 * (freed_at - cut_at),
                         1000 * (acquired_at - cut_at), str(lost.get("reason", "")), still_held)


class _ZooKeeperPair:
    """The holder's KazooClient goes through the link; the waiter's goes straight."""

    def __init__(self, lab, link: TcpLink, name: str, timeout: float, clock: FirstEvents):
        self.holder_client = KazooClient(hosts=link.address, timeout=timeout, **lab.zookeeper.auth)
        self.waiter_client = lab.zookeeper.client(timeout=max(timeout, 4.0))
        path = f"/{name}"
        self.holder_client.start(timeout=15)
        self.locks = (ZooKeeperLock(self.holder_client, path, "holder", on_event=clock.sink("holder")),
                      ZooKeeperLock(self.waiter_client, path, "waiter", on_event=clock.sink("waiter")))

    def __enter__(self):
        return self.locks

    def __exit__(self, *exc_info) -> None:
        for client in (self.waiter_client, self.holder_client):
            client.stop()
            client.close()


class _EtcdPair:
    """The holder's etcd client goes through the link; the waiter's goes straight."""

    def __init__(self, lab, link: TcpLink, name: str, timeout: float, clock: FirstEvents):
        host, port = link.address.rsplit(":", 1)
        self.clients = [etcd_client(host, int(port), timeout=10, **lab.etcd.auth), lab.etcd.client(timeout=10)]
        self.sessions = [EtcdSession(self.clients[0], ttl=int(timeout), on_event=clock.sink("holder")),
                         EtcdSession(self.clients[1], ttl=max(int(timeout), 5))]
        self.locks = (EtcdMutex(self.sessions[0], name, "holder", on_event=clock.sink("holder")),
                      EtcdMutex(self.sessions[1], name, "waiter", on_event=clock.sink("waiter")))

    def __enter__(self):
        return self.locks

    def __exit__(self, *exc_info) -> None:
        for session in self.sessions:
            session.close()
        for client in self.clients:
            client.close()
