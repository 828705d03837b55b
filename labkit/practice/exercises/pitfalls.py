"""The seed's pitfalls as experiments on a real ZooKeeper: predict, then run.

``wakeups_of_one_release(lab, watch="parent", waiters=10)`` queues ``waiters`` clients
behind a holder, each with its own session, all using ``ZooKeeperLock(watch=...)``;
then the holder deletes its node and the experiment counts the waiters that woke up.
With ``watch="parent"`` every waiter's children-watch fires (all of them wake, one
wins); with ``watch="predecessor"`` only the next in line hears anything.

What can fail: TimeoutError if a waiter does not queue, or nobody takes the lock,
within ``timeout`` seconds (a loaded machine, or a server that does not answer).
"""
from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from labkit.practice.exercises.recording_client import RecordingClient
from labkit.record.history import History
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.timing import wait_until


@dataclass
class ReleaseWakeups:
    """Who woke when the holder let go. ``woken`` lists waiter names in the order they woke."""

    watch: str
    waiters: int
    woken: list[str]
    next_holder: str

    @property
    def count(self) -> int:
        return len(self.woken)

    def __str__(self) -> str:
        return (f"watch={self.watch}: {self.count} of {self.waiters} waiters woke when the holder let go; "
                f"{self.next_holder} took the lock")


def wakeups_of_one_release(lab: Any, watch: str = "parent", waiters: int = 10, timeout: float = 20.0) -> ReleaseWakeups:
    """Queue ``waiters`` behind a holder, release once, count who woke (see module doc)."""
    path = f"/pitfalls/wakeups-{watch}-{uuid.uuid4().hex[:8]}"
    history = History()
    clients = [RecordingClient(lab.zookeeper.client()) for _ in range(waiters + 1)]
    names = ["holder"] + [f"w{number}" for number in range(1, waiters + 1)]
    locks = [ZooKeeperLock(client, path, identifier=name, watch=watch, on_event=history.sink(name))
             for client, name in zip(clients, names)]
    holder, queued = locks[0], locks[1:]
    try:
        holder.acquire(timeout=timeout)
        with ThreadPoolExecutor(waiters) as pool:
            try:
                for lock, client in zip(queued, clients[1:]):
                    pool.submit(lock.acquire, timeout)
                    wait_until(lambda: client.armed, f"{lock.identifier} waits on its watch", timeout)
                # a parent watch fires when a newcomer joins too: let everyone set its watch again
                for client in clients[1:]:
                    client.deliver_pending_notifications(timeout)
                    wait_until(lambda: client.armed, "every waiter watches again", timeout)
                released_at = time.time()
                holder.release()
                wait_until(lambda: any(lock.is_held for lock in queued), "the next waiter takes the lock", timeout)
                for client in clients[1:]:
                    client.deliver_pending_notifications(timeout)   # every wake-up of this release has run
                woken = [event.client for event in history.events(kind="woke") if event.time >= released_at]
                next_holder = next(lock.identifier for lock in queued if lock.is_held)
            finally:
                for client in clients:
                    client.raw.stop()                          # waiting acquires end with SessionExpired
    finally:
        for client in clients:
            client.raw.close()
    return ReleaseWakeups(watch, waiters, list(dict.fromkeys(woken)), next_holder)
