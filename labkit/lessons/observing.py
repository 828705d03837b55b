"""Notebook 06: the faults a lock health dashboard must show, timed on real servers.

* ``node_gone_after_kill``: SIGKILL a ZooKeeper holder just after the server heard its
  heartbeat, and time until the server deletes its lock node (one session timeout).
* ``first_hand_on``: when the lock passed to another client after a fault.

What can fail: ``TimeoutError`` when the node is not deleted or no heartbeat comes in time.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kazoo.client import KazooClient

from labkit.clients import LockClient
from labkit.lessons.zookeeper_recipe import kill_just_after_heartbeat
from labkit.record.history import History
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.services.zookeeper import ZooKeeperService


def node_gone_after_kill(holder: LockClient, zookeeper: ZooKeeperService, observer: KazooClient, node: str, timeout: float = 30.0) -> float:
    """SIGKILL ``holder`` (a lock client process holding the lock with ``node``) just after
    the server received one of its heartbeats, so that the server's count of its silence
    starts at the kill; return the seconds until ``observer`` (a KazooClient) sees ``node``
    gone. Raises TimeoutError if it is still there after ``timeout`` seconds."""
    killed_at = kill_just_after_heartbeat(holder, zookeeper)
    wait_until(lambda: observer.exists(node) is None, f"the dead holder's node {node} to go", timeout=timeout)
    return time.time() - killed_at


def first_hand_on(history: History, after: float, other_than: str) -> float:
    """Time of the first "acquired" after ``after`` by a client other than ``other_than``.
    Raises ValueError if the lock never passed on."""
    for event in history.events(kind="acquired"):
        if event.time > after and event.client != other_than:
            return event.time
    raise ValueError(f"no client other than {other_than} acquired the lock after {after}")
