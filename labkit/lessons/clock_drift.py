"""Lease safety assumes bounded clock *drift*: a server whose monotonic clock runs fast
expires a session before the holder's deadline, unless the margin covers the drift.

``drift_race(lab, rate, margin)`` runs it on a real standalone ZooKeeper started with
``labkit.up(zookeeper=1, clocks=True)``. The server's monotonic clock (System.nanoTime, and
the timed waits of its session tracker) is made to run ``rate`` times as fast as the
machine's (``node.clock.monotonic_rate``). A ``ZooKeeperLock`` holder talks to it through a
``TcpLink`` with ``deadline_margin=margin``; a waiter queues behind it; the link is cut.
The holder gives up by its own clock, which runs at the machine's rate:

    holder gives up  = heard_at + timeout x (1 - margin) - heartbeat
    server frees     = touch + (timeout + rounding) / rate

``heard_at`` is the send time of the holder's newest answered request, ``touch`` that
request's arrival (a fraction of a millisecond later), ``heartbeat`` the holder's 0.1 s
heartbeat, and ``rounding``: ZooKeeper expires sessions on tick boundaries, rounded *up*
(ExpiryQueue.roundToNextInterval), so it adds between 0 and one tick (0.2 s here) of its
own clock. A margin m therefore covers a server clock fast by up to 1 / (1 - m) - 1: 20 %
covers 25 % fast and no more (the heartbeat and the rounding leave the holder a little
more), 40 % covers 67 %. ``fastest_covered_rate`` and ``surely_flips`` give the bounds.
Monotonic clocks ignore steps (``clock.step`` does not move them), not rate errors.

What can fail: ``ClockUnavailable`` on a lab without ``clocks=True``, ``TimeoutError`` if
the waiter never acquires, the client library's errors if the server is unreachable.
"""
from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from labkit.faults.relay import TcpLink
from labkit.lessons.client_deadlines import FirstEvents
from labkit.locks.zookeeper import ZooKeeperLock, heartbeat_for
from labkit.servers.services.zookeeper import TICK_MS

TICK = TICK_MS / 1000.0


def fastest_covered_rate(timeout: float, margin: float) -> float:
    """The fastest server monotonic clock the holder's deadline covers for sure: at that
    rate the server frees the lock no sooner than the holder gives up, even when its tick
    rounding adds nothing."""
    return timeout / (timeout * (1 - margin) - heartbeat_for(timeout))


def surely_flips(timeout: float, margin: float) -> float:
    """The rate above which the server frees the lock before the holder gives up whatever
    its tick rounding (a whole tick of its own clock)."""
    return (timeout + TICK) / (timeout * (1 - margin) - heartbeat_for(timeout))


@dataclass(frozen=True)
class DriftOutcome:
    """Times in ms after the cut: ``gave_up_ms`` when the holder's deadline passed (its
    ``is_held`` went False), ``freed_ms`` when the waiter's watch fired (the server had
    deleted the holder's node), ``acquired_ms`` the waiter's grant. ``heard_ms`` (negative):
    the send time of the holder's newest answered request."""

    rate: float
    margin: float
    timeout_s: float
    heard_ms: float
    gave_up_ms: float
    freed_ms: float
    acquired_ms: float
    held_after_grant: bool   # the holder's is_held read just after the waiter's grant

    @property
    def flipped(self) -> bool:
        """The server freed the lock while the holder still believed it held it."""
        return self.freed_ms < self.gave_up_ms

    @property
    def lead_ms(self) -> float:
        """How long before the server freed the lock the holder gave up (negative: after)."""
        return self.freed_ms - self.gave_up_ms

    def row(self) -> dict[str, Any]:
        return {"server clock rate": self.rate, "margin": self.margin, "timeout (s)": self.timeout_s,
                "holder gave up (ms)": round(self.gave_up_ms), "server freed (ms)": round(self.freed_ms),
                "holder's lead (ms)": round(self.lead_ms), "order": "FLIPPED" if self.flipped else "safe"}


def drift_race(lab, rate: float, margin: float, timeout: float = 3.0) -> DriftOutcome:
    """Make the lab's first ZooKeeper server's monotonic clock run ``rate`` times as fast,
    cut a holder with ``deadline_margin=margin`` off from it and time who acts first (see
    the module docstring). ``timeout``: the holder's session timeout in seconds. The
    server's clock goes back to the machine's rate at the end (keeping the lead it gained)."""
    server = lab.zookeeper.nodes[0]
    name = f"/drift-{uuid.uuid4().hex[:8]}"
    events = FirstEvents()

    server.clock.monotonic_rate(rate)   # before the holder's session starts: all of it runs fast
    try:
        with TcpLink(server.endpoint) as link, ThreadPoolExecutor(1) as pool:
            holder_client = KazooClient(hosts=link.address, timeout=timeout, **lab.zookeeper.auth)
            # the waiter's session must outlive the race on the fast clock: 6 s lasts 6 / rate
            waiter_client = lab.zookeeper.client(timeout=6.0)
            try:
                holder_client.start(timeout=15)
                holder = ZooKeeperLock(holder_client, name, "holder", on_event=events.sink("holder"),
                                       deadline_margin=margin)
                waiter = ZooKeeperLock(waiter_client, name, "waiter", on_event=events.sink("waiter"))
                holder.acquire(timeout=30)
                waiting = pool.submit(waiter.acquire, 60)
                events.wait_for("waiter", "watch", 30)
                cut_at = time.monotonic()
                link.cut()
                waiting.result(timeout=60)
                acquired_at = events.wait_for("waiter", "acquired", 1)[0]
                held_after_grant = holder.is_held
                gave_up_at = holder.give_up_at()       # no answer arrives after the cut: fixed
                heard_at = holder.contact.heard_at
                freed_at = events.first.get(("waiter", "woke"), (acquired_at, {}))[0]
                waiter.release()
                link.restore()                          # let the holder's client hear the news
            finally:
                for client in (waiter_client, holder_client):
                    client.stop()
                    client.close()
    finally:
        server.clock.monotonic_rate(1.0)
    return DriftOutcome(float(rate), float(margin), float(timeout), 1000 * (heard_at - cut_at),
                        1000 * (gave_up_at - cut_at), 1000 * (freed_at - cut_at), 1000 * (acquired_at - cut_at),
                        held_after_grant)
