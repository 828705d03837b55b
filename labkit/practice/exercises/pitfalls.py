"""The seed's pitfalls as experiments on a real ZooKeeper: predict, then run.

``wakeups_of_one_release(lab, watch="parent", waiters=10)`` queues ``waiters`` clients
behind a holder, each with its own session, all using ``ZooKeeperLock(watch=...)``;
then the holder deletes its node and the experiment counts the waiters that woke up
(``labkit.harness.handoff`` with one release; "woke" as ``wakeups_per_release`` counts it).
With ``watch="parent"`` every waiter's children-watch fires (all of them wake, one
wins); with ``watch="predecessor"`` only the next in line hears anything.

What can fail: TimeoutError if a waiter does not queue, or nobody takes the lock,
within ``timeout`` seconds (a loaded machine, or a server that does not answer).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labkit.harness.handoff import hand_off
from labkit.locks.registry import RecipeHandle
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.practice.exercises.recording_client import RecordingClient
from labkit.record.events import EventSink
from labkit.record.history import History

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


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


def wakeups_of_one_release(lab: Lab, watch: str = "parent", waiters: int = 10, timeout: float = 20.0) -> ReleaseWakeups:
    """Queue ``waiters`` behind a holder, release once, count who woke (see module doc)."""
    path = f"/pitfalls/wakeups-{watch}-{uuid.uuid4().hex[:8]}"
    clients: dict[str, RecordingClient] = {}

    def make(name: str, on_event: EventSink) -> RecipeHandle:
        client = clients[name] = RecordingClient(lab.zookeeper.client())

        def close() -> None:
            client.raw.stop()                      # a waiting acquire ends with SessionExpired
            client.raw.close()
        return RecipeHandle(ZooKeeperLock(client, path, identifier=name, watch=watch, on_event=on_event), close)

    def settled(history: History, waiting: list[str]) -> bool:
        # every notification sent so far has been handled (a parent watch fires when a
        # newcomer joins, too), and every waiter still waiting watches again
        return all(clients[name].deliver_pending_notifications(timeout) and clients[name].armed for name in waiting)

    names = ["holder"] + [f"w{number}" for number in range(1, waiters + 1)]
    run = hand_off(make, waiters, settled, releases=1, timeout=timeout, names=names, one_by_one=True)
    return ReleaseWakeups(watch, waiters, run.woken[0], run.history.events(kind="acquired")[1].client)
