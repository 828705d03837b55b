"""Starting a laid-out lab: every node at once (a container takes ~0.3 s to create, a JVM
~1 s to answer), then a wait until each answers, with a line per node, its leaders elected
and its replica in sync; a private lab's etcd auth turned on; the sentinels last.

What can fail: NodeStartError with the node's last log lines, NoLeader, FailoverTimeout;
``labkit.servers.lab.up`` then stops everything it started.
"""
from __future__ import annotations

import threading
from typing import Callable, Protocol

from labkit.progress import Progress, showing_progress
from labkit.servers.network.links import Network
from labkit.servers.secret import LabSecret
from labkit.servers.services.etcd import EtcdService
from labkit.servers.services.node import Node
from labkit.servers.services.redis import RedisService
from labkit.servers.services.sentinel import SentinelService
from labkit.servers.services.zookeeper import ZooKeeperService


class StartingLab(Protocol):
    """The lab being started, as far as starting it reads it: labkit.servers.lab.Lab (which
    imports this module, so this module names what it needs instead)."""

    network: Network | None
    secret: LabSecret | None
    zookeeper: ZooKeeperService | None
    etcd: EtcdService | None
    redis: RedisService | None
    sentinel: SentinelService | None

    @property
    def nodes(self) -> list[Node]: ...
    def save_state(self) -> None: ...


def start_nodes(lab: StartingLab, say: Callable[[str], None], timeout: float | None, quiet: bool = False) -> None:
    """Start every node (each runner records its pid or container in the lab's state file as
    soon as it runs); return once every node answers (see the module's docstring). Shown as
    progress (labkit.progress), a step per node; as plain lines only when ``quiet`` (else
    ``say`` prints a line per node already)."""
    with showing_progress("starting the lab's servers", total=len(_servers(lab)), step_lines=quiet) as shown:
        _in_parallel(_servers(lab), lambda node: node.start())
        if lab.network is not None:
            lab.network.connect()
            lab.save_state()   # the proxy's control port, known once it answers
        _wait_all_ready(lab, say, timeout, shown)
        if lab.secret and lab.etcd:
            lab.etcd.enable_auth(lab.secret)
        if lab.sentinel:
            _start_sentinels(lab, say, timeout)


def _in_parallel(nodes: list, action) -> None:
    """Run ``action(node)`` for every node at once (a container takes ~0.3 s to create, a
    JVM ~1 s to answer); re-raise the first error once all are done."""
    errors: list[BaseException] = []

    def run(node):
        try:
            action(node)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(node,), daemon=True) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _servers(lab: StartingLab) -> list:
    """Every node but the sentinels, which start last (see _start_sentinels)."""
    return [node for node in lab.nodes if node.kind != "sentinel"]


def _start_sentinels(lab: StartingLab, say, timeout: float | None) -> None:
    """Sentinels start only once the primary answers and the replica is in sync: a sentinel
    that found the primary silent for a moment could start a failover with nothing to promote."""
    _in_parallel(lab.sentinel.nodes, lambda node: node.start())
    _in_parallel(lab.sentinel.nodes, lambda node: node.wait_ready(timeout))
    seconds = lab.sentinel.wait_until_watching(timeout or 30)
    say(f"  {len(lab.sentinel.nodes)} sentinels watch {lab.redis.primary.name} (agreed in {seconds:.1f} s)")


def _wait_all_ready(lab: StartingLab, say, timeout: float | None, shown: Progress) -> None:
    """Probe every node in parallel; print a line per node as it answers (and a step of
    ``shown``)."""
    printing = threading.Lock()  # one whole line per node, even when two answer at once

    def wait(node):
        seconds = node.wait_ready(timeout)
        with printing:
            say(f"  {node.name:<7} {node.endpoint:<16} ready in {seconds:4.1f} s")
            shown.step(f"{node.name} ready in {seconds:.1f} s")

    _in_parallel(_servers(lab), wait)
    if lab.zookeeper and len(lab.zookeeper.nodes) > 1:
        with shown.waiting("the ZooKeeper ensemble to elect a leader", 2.0):
            leader = lab.zookeeper.wait_for_leader(timeout or 30)
        say(f"  zookeeper leader: {leader.name}")
    if lab.etcd and len(lab.etcd.nodes) > 1:
        with shown.waiting("the etcd cluster to elect a leader", 2.0):
            leader = lab.etcd.wait_for_leader(timeout or 30)
        say(f"  etcd leader: {leader.name}")
    if lab.redis and lab.redis.replica is not None:
        lab.redis.wait_replica_in_sync(timeout or 15)
