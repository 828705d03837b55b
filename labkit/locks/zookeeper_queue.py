"""A ZooKeeper lock's queue as nodes on the server: which children of a lock's path are
contenders and in what order they are served (``sorted_contenders``), the queue read with
each owner's identifier (``queue_of``), how many children the member a client is connected to
has under the path (``contenders_seen``: 0 while that member has not applied the path's create),
and a node taken out once the connection is back (``delete_when_connected``). Kazoo's, Curator's
and labkit's recipes name their nodes differently; sorting by the number ZooKeeper appends, and
by nothing else, is what lets them queue together on one path (``ZooKeeperLock``, the election,
the references and the health census all read the queue through these).

What can go wrong: a child that matches no pattern here is no contender and is skipped, so a
recipe that names its nodes another way queues beside this one and excludes nobody.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

# Any child ending in "lock-" or kazoo's "__lock__" plus 10 digits is a contender, whoever
# made it: Curator's "_c_<uuid>-lock-N", kazoo's "<uuid>__lock__N" and ours "<uuid>-lock-N".
# Sorting by the number alone (ignoring prefixes) is what lets recipes share one queue.
# (Curator itself only understands names with "lock-": see kazoo_reference.py.)
CONTENDER_NAME = re.compile(r"(?:__lock__|lock-)(\d{10})$")
NODE_MARKER = "-lock-"   # Curator sorts by what follows the last "lock-": we must contain it
# The children of a counting semaphore's path (Curator's InterProcessSemaphoreV2 layout,
# zookeeper_semaphore.py): a mutex queued beside them would exclude nobody.
SEMAPHORE_CHILDREN = ("leases", "locks")


class QueuedNode(NamedTuple):
    """One node of the lock's queue as the server lists it (``ZooKeeperLock.contenders``): its
    sequence, its name and the identifier its owner wrote in it."""

    sequence: int
    node: str
    identifier: str


def sequence_of(node: str) -> int | None:
    """The queue position ZooKeeper gave ``node``, or None if it is no lock contender."""
    match = CONTENDER_NAME.search(node)
    return int(match.group(1)) if match else None


def sorted_contenders(children: list[str]) -> list[str]:
    """The contender nodes among ``children``, in queue order."""
    # Every waiter that wakes runs this over the whole queue: each name is parsed once
    # (at a thousand contenders, parsing twice cost as much as the server's reply).
    numbered = [(sequence_of(child), child) for child in children]
    return [child for number, child in sorted(pair for pair in numbered if pair[0] is not None)]


def queue_of(client: KazooClient, path: str) -> list[QueuedNode]:
    """The queue under ``path`` as the server lists it now: holder first, with the identifier
    each owner wrote in its node. Raises kazoo's NoNodeError if ``path`` does not exist."""
    queue = []
    for node in sorted_contenders(client.get_children(path)):
        try:
            data, _ = client.get(f"{path}/{node}")
        except NoNodeError:
            continue                              # it left while we were reading
        queue.append(QueuedNode(sequence_of(node), node, (data or b"").decode(errors="replace")))
    return queue


def contenders_seen(client: KazooClient, path: str) -> int:
    """How many contenders the member ``client`` is connected to has under ``path``: 0 while that
    member has not yet applied the create of ``path`` itself. ZooKeeper answers a read from the
    member's own copy, which may lag the leader (on a busy machine, by seconds), so a waiter's
    member can answer NoNode for a lock its holder's member already has."""
    try:
        return len(client.get_children(path))
    except NoNodeError:
        return 0


def delete_when_connected(client: KazooClient, node: str) -> None:
    """Take ``node`` (a full path) out of the queue once kazoo reconnects with the session
    alive: for a holder that gave up while the server could not be reached. If the session
    is gone instead, the server has deleted the node already."""
    def on_state(state: str) -> bool:
        if state == KazooState.CONNECTED:
            client.delete_async(node)
        return state != KazooState.SUSPENDED       # once: connected again, or the session is gone
    client.add_listener(on_state)
