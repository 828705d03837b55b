"""Where a holder that is about to be cut off sits: the one set-up of the cut-off races of
notebooks 07 and 09 (labkit's holders, Curator's, the semaphore and the election).

``seats`` waits for the service's leader and puts the holder on the first follower (on the
leader for "old-leader"), the others on the rest, so that a partition can cut the holder's
member alone. ``ensemble_to_cut`` checks that a lab can run such a race: three ZooKeeper
members and the network layer.

``again_if_void`` runs a race again when the run proved nothing (a stalled machine: the holder
gave up, or its session expired, before the fault), up to ``VOID_RETRIES`` more times.

What can fail: ``TimeoutError`` when the service elects no leader within 30 s; ``ValueError``
from ``ensemble_to_cut`` on a lab of another shape; the void run's own error after the retries.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    from labkit.servers.lab import Lab
    from labkit.servers.services.zookeeper import ZooKeeperService

VOID_RETRIES = 3            # a batch's run that proved nothing runs again, up to this many times
RaceResult = TypeVar("RaceResult")


def ensemble_to_cut(lab: Lab, caller: str) -> ZooKeeperService:
    """The lab's ZooKeeper service, if it has 3 members and ``network=True``; else ValueError
    naming ``caller`` and the lab it needs."""
    zookeeper = lab.zookeeper
    if zookeeper is None or len(zookeeper.nodes) != 3 or lab.network is None:
        raise ValueError(f"{caller} needs a lab with 3 ZooKeeper members and network=True, "
                         "e.g. labkit.up(zookeeper=3, network=True)")
    return zookeeper


def seats(service: Any, topology: str = "follower-cut") -> tuple[Any, list[Any]]:
    """(the holder's member, the other members) of ``service`` (ZooKeeper or etcd): the
    leader for ``topology`` "old-leader", else the first follower."""
    leader = service.wait_for_leader(timeout=30)
    followers = [node for node in service.nodes if node.name != leader.name]
    if not followers and topology != "old-leader":
        raise ValueError(f"{topology}: the holder sits on a follower, and this service has only its leader "
                         f"{leader.name}: start it with 3 members")
    holder_node = leader if topology == "old-leader" else followers[0]
    return holder_node, [node for node in service.nodes if node.name != holder_node.name]


def again_if_void(race: Callable[[], RaceResult], void: tuple[type[BaseException], ...]) -> RaceResult:
    """``race()``, run again while it raises one of ``void`` (up to VOID_RETRIES times more):
    every run it returns is one that counts."""
    for attempt in range(VOID_RETRIES + 1):
        try:
            return race()
        except void:
            if attempt == VOID_RETRIES:
                raise
    raise AssertionError("unreachable")
