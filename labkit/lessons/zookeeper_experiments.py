"""The many-client experiments of the ZooKeeper lesson (notebook 02): threads, barriers and
plots, so that a notebook cell shows the experiment and not its harness.
(``zookeeper_recipe`` holds the server probes and teaching locks they build on.)

* ``queue_order_plot``: place in the queue against turn, with the first-come-first-served line.
* ``crash_holder``: SIGKILL a holder process just after a heartbeat and time the server's
  deletion of its node and the next waiter's acquire.
* ``herd_cost``: one release in front of N waiters: how many woke, and how many packets the
  server sent for it (``mntr``: zk_packets_sent), for a predecessor or a parent watch.
* ``take_turns``: locks of different implementations share one path, several rounds each,
  while an observer checks that each holder owns the lowest node.
* ``naive_queue``: who owns each node of a ``NaiveLock`` path, and which one is an orphan.

What can fail: ``TimeoutError`` naming what was awaited (a contender that does not finish, a
watch that is not set, a node that is never deleted); a contender's own error is re-raised;
the client libraries' errors when ZooKeeper does not answer.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from labkit.clients import spawn_clients
from labkit.lessons.handoff import hand_off, server_watches
from labkit.lessons.zookeeper_recipe import RECIPES, kill_just_after_heartbeat, watchers_of
from labkit.locks.registry import lock_factory
from labkit.locks.zookeeper import sequence_of, sorted_contenders
from labkit.record.history import History
from labkit.servers.zookeeper import parse_mntr
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab
    from labkit.servers.zookeeper import ZooKeeperNode, ZooKeeperService

HERD_SESSION_TIMEOUT = 10.0   # seconds: a busy machine must not expire a waiter mid-measurement


def queue_order_plot(ax: Any, creation_order: list[str], acquisition_order: list[str]) -> Any:
    """Each turn's holder against its place in the queue; the dotted diagonal is FIFO."""
    count = len(creation_order)
    ax.plot(range(1, len(acquisition_order) + 1), [creation_order.index(client) + 1 for client in acquisition_order],
            marker="o", label="measured")
    ax.plot([1, count], [1, count], color="gray", linestyle=":", label="first come, first served")
    ax.set(title="Place in the queue vs turn", xlabel="turn (1 = first to hold the lock)",
           ylabel="place in the queue (by sequence number)")
    ax.legend()
    return ax


@dataclass(frozen=True)
class CrashRun:
    """Seconds after the SIGKILL: until the observer saw the holder's node deleted, and
    until the waiter held the lock; the run's History."""

    session_timeout: float
    node_deleted_after: float
    next_holder_after: float
    history: History


def crash_holder(lab: "Lab", observer: KazooClient, path: str, session_timeout: float) -> CrashRun:
    """Two lock client processes on ``path``: the holder is SIGKILLed just after the server
    heard its heartbeat, while the waiter watches its node and ``observer`` watches it too.
    Raises TimeoutError if the waiter never watches, or the node is never deleted."""
    history = History()
    with spawn_clients(lab, "zookeeper", n=2, name=path, session_timeout=session_timeout, history=history) as pair:
        holder, waiter = pair
        holder.acquire(timeout=10)
        holder_node = history.events(client=holder.name, kind="acquired")[0].detail["node"]
        waiting = waiter.send("acquire", timeout=session_timeout + 20)
        wait_until(lambda: waiter.session.get("session_id") in watchers_of(lab.zookeeper, holder_node),
                   "the waiter to watch the holder's node", timeout=10)
        deleted = threading.Event()
        observer.sync(holder_node)             # the observer's server has seen the holder's create
        if not observer.exists(holder_node, watch=lambda event: deleted.set()):
            raise TimeoutError(f"the holder's node {holder_node} is gone before the kill")
        killed_at = kill_just_after_heartbeat(holder, lab.zookeeper)
        if not deleted.wait(session_timeout + 10):
            raise TimeoutError(f"the killed holder's node was never deleted (session timeout {session_timeout} s)")
        node_deleted_after = time.time() - killed_at
        waiter.wait_reply(waiting, timeout=10)
        next_holder_after = history.events(client=waiter.name, kind="acquired")[0].time - killed_at
        waiter.release()
    return CrashRun(session_timeout, node_deleted_after, next_holder_after, history)


def mntr_number(node: ZooKeeperNode, name: str) -> int:
    """One integer of a ZooKeeper server's ``mntr`` answer, e.g. "zk_packets_sent"."""
    value = parse_mntr(node.four_letter("mntr")).get(name)
    if not isinstance(value, int):
        raise ValueError(f"{node.name} answered mntr without {name}: is 4lw.commands.whitelist=* set?")
    return value


@dataclass(frozen=True)
class HerdCost:
    """One release in front of ``waiters`` waiters: ``woken`` of them woke, and the server
    sent ``packets_sent`` packets between the release and the moment every waiter still
    waiting had its watch set again (notifications, getChildren/exists answers, and the
    few pings that fell into that window)."""

    watch: str
    waiters: int
    woken: int
    packets_sent: int
    seconds: float


def herd_cost(zookeeper: ZooKeeperService, path: str, waiters: int, watch: str = "predecessor",
              timeout: float = 60.0) -> HerdCost:
    """``waiters`` + 1 ZooKeeperLocks with ``watch`` ("predecessor" or "parent"), one session
    each, all on the first running server (whose ``mntr`` then counts the whole experiment).
    One holds, the others queue and watch; the holder releases once (``labkit.lessons.handoff``);
    returns the HerdCost. Every session is closed on the way out."""
    server = zookeeper.first_running()
    make = lock_factory(RECIPES[watch], {"zookeeper": server.endpoint}, path, session_timeout=HERD_SESSION_TIMEOUT)
    marks: dict[str, float] = {}

    def before_release(_: int) -> None:
        marks["packets"], marks["started"] = mntr_number(server, "zk_packets_sent"), time.monotonic()

    def after_settled(_: int) -> None:
        marks["seconds"] = time.monotonic() - marks["started"]
        marks["packets"] = mntr_number(server, "zk_packets_sent") - marks["packets"]

    run = hand_off(make, waiters, server_watches(server), releases=1, timeout=timeout,
                   before_release=before_release, after_settled=after_settled)
    return HerdCost(watch, waiters, run.wakeups[0], int(marks["packets"]), marks["seconds"])


def take_turns(locks: dict[str, Any], observer: KazooClient, path: str, rounds: int,
               work: float = 0.05, timeout: float = 120.0) -> tuple[list[tuple[str, int, bool]], int]:
    """Every lock (label -> lock on ``path``) takes the lock ``rounds`` times, all starting
    together. While holding, the observer asks its server (after a ``sync``) which node is
    the lowest. Returns ([(label, sequence of its node, its node is the lowest)] in the
    order of the holds, the most holders ever inside at once)."""
    inside: list[str] = []
    holds: list[tuple[str, int, bool]] = []
    most_inside = 0
    inside_lock, start_together = threading.Lock(), threading.Barrier(len(locks))

    def contend(label: str, lock: Any) -> None:
        nonlocal most_inside
        start_together.wait(timeout=60)
        for _ in range(rounds):
            lock.acquire(timeout=60)
            try:
                with inside_lock:
                    inside.append(label)
                    most_inside = max(most_inside, len(inside))
                observer.sync(path)            # ask after the observer's server has caught up with the leader
                lowest = sorted_contenders(observer.get_children(path))[0]
                node = lock.node.rsplit("/", 1)[-1]
                holds.append((label, sequence_of(node), node == lowest))
                time.sleep(work)               # the work done under the lock (a chosen time)
                with inside_lock:
                    inside.remove(label)
            finally:
                lock.release()

    with ThreadPoolExecutor(len(locks)) as pool:
        for turn in [pool.submit(contend, label, lock) for label, lock in locks.items()]:
            turn.result(timeout=timeout)
    return holds, most_inside


def naive_queue(observer: KazooClient, path: str, unlucky: Any) -> list[dict[str, str]]:
    """The children of ``path`` in queue order: node, owner ("unlucky" if the session of
    ``unlucky`` (a LosesFirstCreateReply) owns it, else "bystander"), and what it is."""
    observer.sync(path)                        # the observer's server catches up with the leader first
    rows = []
    for child in sorted(observer.get_children(path)):
        _, stat = observer.get(f"{path}/{child}")
        owner = "unlucky" if stat.ephemeralOwner == unlucky.client_id[0] else "bystander"
        role = "orphan: its create's reply was lost" if f"{path}/{child}" in unlucky.lost_replies else "its node"
        rows.append({"node": child, "owner (session)": owner, "what it is": role})
    return rows
