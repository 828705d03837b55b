"""The many-client experiments of the ZooKeeper lesson (notebook 02): threads, barriers and
plots, so that a notebook cell shows the experiment and not its harness.
(``zookeeper_recipe`` holds the server probes and teaching locks they build on.)

* ``queue_order_plot``: place in the queue against turn, with the first-come-first-served line.
* ``wakeup_plots``: mean wakeups per release, and wakeups of the first release, against N.
* ``crash_holder`` / ``crash_plot``: SIGKILL a holder process just after a heartbeat and time
  the server's deletion of its node and the next waiter's acquire.
* ``middle_waiter_dies``: four client processes queue; the middle waiter's session is closed
  from a second connection; the waiter behind it wakes, re-checks and keeps waiting.
* ``cut_off_holder_history``: a holder behind a ``TcpLink`` that is cut; the waiter's turn,
  and what kazoo and the holder say at that moment.
* ``herd_cost``: one release in front of N waiters: how many woke, and how many packets the
  server sent for it (``mntr``: zk_packets_sent), for a predecessor or a parent watch.
* ``share_one_path``: locks of different implementations share one path, several rounds each,
  while an observer checks that each holder owns the lowest node.
* ``lost_create_reply``: a ``NaiveLock`` whose first create's reply is lost queues behind a
  holder, a bystander behind it; the holder releases; nobody gets the free lock.
* ``three_implementations``: ZooKeeperLock, kazoo's Lock and (when installed) Curator on one path.
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
from labkit.faults.relay import TcpLink
from labkit.harness.handoff import hand_off, server_watches
from labkit.harness.queue import queue_behind
from labkit.lessons.zookeeper_recipe import (RECIPE_BY_WATCH, LosesFirstCreateReply, NaiveLock, kill_just_after_heartbeat,
                                             watchers_of)
from labkit.locks import SessionExpired
from labkit.locks.curator import CuratorPeer, require_curator
from labkit.locks.kazoo_reference import KazooReferenceLock
from labkit.locks.registry import lock_factory
from labkit.locks.zookeeper import ZooKeeperLock, sequence_of, sorted_contenders
from labkit.record.plots import wakeups_per_release_plot
from labkit.progress import shows_progress
from labkit.record.events import Event
from labkit.record.history import History
from labkit.servers.services.zookeeper import parse_mntr
from labkit.timing import wait_until
from labkit.vocabulary import GUIDE_COLOUR

if TYPE_CHECKING:
    from labkit.servers.lab import Lab
    from labkit.servers.services.zookeeper import ZooKeeperNode, ZooKeeperService

HERD_SESSION_TIMEOUT = 10.0   # seconds: a busy machine must not expire a waiter mid-measurement


def queue_order_plot(ax: Any, creation_order: list[str], acquisition_order: list[str]) -> Any:
    """Each turn's holder against its place in the queue; the dotted diagonal is FIFO."""
    count = len(creation_order)
    ax.plot(range(1, len(acquisition_order) + 1), [creation_order.index(client) + 1 for client in acquisition_order],
            marker="o", label="measured")
    ax.plot([1, count], [1, count], color=GUIDE_COLOUR, linestyle=":", label="first come, first served")
    ax.set(title="Place in the queue vs turn", xlabel="turn (1 = first to hold the lock)",
           ylabel="place in the queue (by sequence number)")
    ax.legend()
    return ax


def wakeup_plots(axes: Any, wakeups: dict[tuple[str, int], list[int]], waiter_counts: tuple[int, ...],
                 labels: list[str]) -> Any:
    """On two axes: the mean wakeups per release against N (the third label's line dashed:
    it lies on top of the first), and the wakeups of the first release against N."""
    mean_axes, first_axes = axes
    wakeups_per_release_plot({label: {n: sum(wakeups[label, n]) / len(wakeups[label, n]) for n in waiter_counts}
                              for label in labels}, ax=mean_axes, title="Waiters woken per release (mean over N releases)")
    mean_axes.get_lines()[2].set(linestyle="--", marker="s")
    for label, style in zip(labels, ("-o", "-o", "--s")):
        first_axes.plot(waiter_counts, [wakeups[label, n][0] for n in waiter_counts], style, label=label)
    first_axes.set(title="Waiters woken by the first release", xlabel="waiters N (each with its own session)",
                   ylabel="clients woken by one release")
    first_axes.grid(alpha=0.3)
    first_axes.legend()
    return axes


@dataclass(frozen=True)
class HolderCrash:
    """Seconds after the SIGKILL: until the observer saw the holder's node deleted, and
    until the waiter held the lock; the run's History."""

    session_timeout: float
    node_deleted_after: float
    next_holder_after: float
    history: History


def crash_holder(lab: "Lab", observer: KazooClient, path: str, session_timeout: float) -> HolderCrash:
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
    return HolderCrash(session_timeout, node_deleted_after, next_holder_after, history)


def crash_plot(ax: Any, runs: dict[float, HolderCrash], tick: float) -> Any:
    """Seconds from the kill until the node was deleted and the waiter held the lock, against
    the session timeout, with the band the notebook asserts (timeout - 1 tick ... + 1 s)."""
    timeouts = list(runs)
    ax.plot(timeouts, [runs[t].next_holder_after for t in timeouts], marker="o", label="next waiter holds the lock")
    ax.plot(timeouts, [runs[t].node_deleted_after for t in timeouts], marker="x", linestyle="none",
            label="holder's node deleted (observer)")
    ax.plot(timeouts, timeouts, color=GUIDE_COLOUR, linestyle=":", label="exactly the session timeout")
    ax.fill_between(timeouts, [t - tick for t in timeouts], [t + 1.0 for t in timeouts], color=GUIDE_COLOUR, alpha=0.15,
                    label="asserted band: timeout − 1 tick … timeout + 1 s")
    ax.set(title="SIGKILL the holder: how long the lock stays blocked", xlabel="session timeout (s)",
           ylabel="seconds after the kill")
    ax.legend(fontsize=8)
    return ax


@dataclass(frozen=True)
class MiddleWaiter:
    """Four clients, ``client-1`` holding: the nodes they created, their states right after
    ``client-3``'s session was closed, the queue then, how ``client-3``'s acquire ended, and
    the run's History."""

    node_of: dict[str, str]
    states_after_expiry: dict[str, str]
    queue_after_expiry: list[str]
    middle_outcome: str
    history: History


def middle_waiter_dies(lab: "Lab", observer: KazooClient, path: str, session_timeout: float,
                       work: float = 0.5) -> MiddleWaiter:
    """client-1 holds ``path``; 2, 3, 4 queue in that order; client-3's session is closed
    from a second connection once client-4's watch on its node is set; client-1 works for
    ``work`` s more, then each waiter in turn takes the lock and lets it go."""
    history = History()
    with spawn_clients(lab, "zookeeper", n=4, name=path, session_timeout=session_timeout, history=history) as four:
        holder, first_waiter, middle, last = four
        requests = queue_behind(four)          # the queue order is the client order
        node_of = {event.client: event.detail["node"] for event in history.events(kind="created")}
        wait_until(lambda: last.session["session_id"] in watchers_of(lab.zookeeper, node_of[middle.name]),
                   "client-4's watch on client-3's node to be set on the server", timeout=10)

        middle.expire_session()                # closeSession from a second connection
        history.wait_for("watch", client=last.name, count=2, timeout=10)   # client-4 woke, re-checked, watches again
        wait_until(lambda: last.session["session_id"] in watchers_of(lab.zookeeper, node_of[first_waiter.name]),
                   "client-4's new watch to be set on the server", timeout=10)
        states = four.states()
        observer.sync(path)
        queue = sorted_contenders(observer.get_children(path))
        try:
            middle.wait_reply(requests[middle.name], timeout=10)
            outcome = "acquired (?)"
        except SessionExpired as error:        # an error reply, not an event: put it on the timeline
            outcome = f"SessionExpired: {error}"
            history.append(Event(time.time(), middle.name, "error", {"message": str(error)}))

        time.sleep(work)                       # client-1 keeps working for a while (a chosen time)
        holder.release()
        for waiter in (first_waiter, last):    # then each waiter in turn takes the lock and lets it go
            waiter.wait_reply(requests[waiter.name], timeout=10)
            waiter.release()
    return MiddleWaiter(node_of, states, queue, outcome, history)


@dataclass(frozen=True)
class CutOffHolder:
    """When the waiter got the lock: kazoo's state on the holder's client and the holder's
    ``is_held``; the run's History (holder's ``lost``, waiter's ``woke`` and ``acquired``)."""

    kazoo_state_then: str
    holder_says_held: bool
    history: History


def cut_off_holder_history(lab: "Lab", waiter_client: KazooClient, path: str, session_timeout: float,
                           on_close: Any) -> CutOffHolder:
    """A holder reaches one ZooKeeper server only through a ``TcpLink``; a waiter (on
    ``waiter_client``) queues behind it; the link is cut until the waiter holds the lock.
    ``on_close(callback)`` registers the holder client's clean-up (an ExitStack's
    ``callback``): a client cut off at the end is closed with the notebook's others."""
    history = History()
    with TcpLink(lab.zookeeper.nodes[0].endpoint) as link:    # the holder's only way to ZooKeeper
        cut_off = KazooClient(hosts=link.address, timeout=session_timeout, **lab.zookeeper.auth)
        cut_off.start(timeout=15)
        on_close(cut_off.close)
        on_close(cut_off.stop)
        holder = ZooKeeperLock(cut_off, path, identifier="holder", on_event=history.sink("holder"))
        waiter = ZooKeeperLock(waiter_client, path, identifier="waiter", on_event=history.sink("waiter"))
        holder.acquire(timeout=10)
        with ThreadPoolExecutor(1) as waiting:
            waiter_turn = waiting.submit(waiter.acquire, 30)
            history.wait_for("watch", client="waiter", timeout=10)
            history.record_fault("cut the holder's link", "holder")
            link.cut()
            waiter_turn.result(timeout=30)
        kazoo_state_then, holder_says_held = cut_off.state, holder.is_held   # the moment the waiter holds
        waiter.release()
    return CutOffHolder(kazoo_state_then, holder_says_held, history)


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


@shows_progress("a herd of waiters woken by one release")
def herd_cost(zookeeper: ZooKeeperService, path: str, waiters: int, watch: str = "predecessor",
              timeout: float = 60.0) -> HerdCost:
    """``waiters`` + 1 ZooKeeperLocks with ``watch`` ("predecessor" or "parent"), one session
    each, all on the first running server (whose ``mntr`` then counts the whole experiment).
    One holds, the others queue and watch; the holder releases once (``labkit.harness.handoff``);
    returns the HerdCost. Every session is closed on the way out."""
    server = zookeeper.first_running()
    make = lock_factory(RECIPE_BY_WATCH[watch], {"zookeeper": server.endpoint}, path, session_timeout=HERD_SESSION_TIMEOUT)
    marks: dict[str, float] = {}

    def before_release(_: int) -> None:
        marks["packets"], marks["started"] = mntr_number(server, "zk_packets_sent"), time.monotonic()

    def after_settled(_: int) -> None:
        marks["seconds"] = time.monotonic() - marks["started"]
        marks["packets"] = mntr_number(server, "zk_packets_sent") - marks["packets"]

    run = hand_off(make, waiters, server_watches(server), releases=1, timeout=timeout,
                   before_release=before_release, after_settled=after_settled)
    return HerdCost(watch, waiters, run.wakeups[0], int(marks["packets"]), marks["seconds"])


def share_one_path(locks: dict[str, Any], observer: KazooClient, path: str, rounds: int,
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


@dataclass(frozen=True)
class LostReply:
    """The queue right after the holder released (``naive_queue`` rows); each waiter's
    acquire result after 3 s; the queue once both gave up; whether a latecomer got the lock;
    the unlucky client and the bystander's lock, for the rest of the lesson."""

    queue_after_release: list[dict[str, str]]
    outcomes: dict[str, bool]
    left_behind: list[dict[str, str]]
    latecomer_got_it: bool
    unlucky_client: LosesFirstCreateReply
    bystander: NaiveLock


def lost_create_reply(lab: "Lab", new_client: Any, observer: KazooClient, path: str, session_timeout: float,
                      on_close: Any, patience: float = 3.0) -> LostReply:
    """A NaiveLock holder; an unlucky NaiveLock (its first create's reply is lost) queues,
    then a bystander; the holder releases; both wait ``patience`` s; then a latecomer tries
    for 1 s. ``new_client()`` gives a client with its own session; ``on_close`` registers
    the unlucky client's clean-up."""
    holder = NaiveLock(new_client(), path)
    unlucky_client = LosesFirstCreateReply(hosts=lab.zookeeper.hosts, timeout=session_timeout)
    unlucky_client.start(timeout=15)
    on_close(unlucky_client.close)
    on_close(unlucky_client.stop)
    unlucky, bystander = NaiveLock(unlucky_client, path), NaiveLock(new_client(), path)
    if not holder.acquire(timeout=5):
        raise TimeoutError(f"the first NaiveLock could not take the free lock {path}")
    with ThreadPoolExecutor(2) as waiting:
        unlucky_turn = waiting.submit(unlucky.acquire, patience)      # its first create's reply is lost
        wait_until(lambda: unlucky.node is not None, "the unlucky client to queue", timeout=10)
        bystander_turn = waiting.submit(bystander.acquire, patience)
        wait_until(lambda: bystander.node is not None, "the bystander to queue", timeout=10)
        holder.release()                                             # the lock is free now
        queue_after_release = naive_queue(observer, path, unlucky_client)
        outcomes = {"unlucky": unlucky_turn.result(patience + 10), "bystander": bystander_turn.result(patience + 10)}
    left_behind = naive_queue(observer, path, unlucky_client)
    latecomer_got_it = bystander.acquire(timeout=1)   # anyone who comes now queues behind the orphan
    return LostReply(queue_after_release, outcomes, left_behind, latecomer_got_it, unlucky_client, bystander)


@shows_progress("starting three lock implementations on one path")
def three_implementations(new_client: Any, hosts: str, path: str, session_timeout: float, history: History,
                          on_close: Any) -> dict[str, Any]:
    """{"ZooKeeperLock": ..., "kazoo's Lock": ..., "Curator": ...} on ``path``, each with its
    own session and events to ``history``; Curator (a JVM, through CuratorPeer) is left out,
    with a printed reason, when it cannot run here, unless the run expects it
    (``require_curator``: then CuratorUnavailable)."""
    locks: dict[str, Any] = {
        "ZooKeeperLock": ZooKeeperLock(new_client(), path, identifier="ZooKeeperLock",
                                       on_event=history.sink("ZooKeeperLock")),
        "kazoo's Lock": KazooReferenceLock(new_client(), path, identifier="kazoo's Lock",
                                           on_event=history.sink("kazoo's Lock"))}
    skipped = require_curator("its part in this queue")
    if skipped:
        print(skipped)
        return locks
    locks["Curator"] = CuratorPeer(hosts, path, session_timeout=session_timeout, identifier="Curator",
                                   on_event=history.sink("Curator"))
    on_close(locks["Curator"].close)
    return locks
