"""What the servers count while clients queue for a ZooKeeper lock: ``mntr`` against ``wchc``.

* ``predecessor_watch_census``: with the predecessor recipe, which node each waiter's
  session watches (``wchc``), next to ``mntr``'s ephemeral-node and watch counts.
* ``parent_watch_census``: the same queue with the parent-watching recipe: ``mntr`` counts
  one watch per waiter, ``wchc`` lists none (they are child watches), and one release
  wakes them all.
* ``watch_census_plot``: both censuses side by side.

What can fail: ``TimeoutError`` when the watches do not appear on the server in time,
``labkit.clients.ClientError`` when a client's command fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from labkit.clients import LockClient, spawn_clients
from labkit.harness.queue import queue_behind, release_in_turn
from labkit.health.server_numbers import parse_wchc, parse_wchs, session_hex, watch_kinds
from labkit.locks.zookeeper import sorted_contenders
from labkit.record.history import History
from labkit.servers.services.zookeeper import parse_mntr
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

ROWS = ("waiters", "counted by mntr", "listed by wchc (data watches)", "not listed (child watches)")


@dataclass(frozen=True)
class PredecessorCensus:
    """``watched``: waiter name → the paths ``wchc`` lists for its session;
    ``predecessor``: waiter name → the path of the node just ahead of its own;
    ``contenders``: the lock's children, lowest first; ``mntr``: the server's numbers."""

    watched: dict[str, list[str]]
    predecessor: dict[str, str]
    contenders: list[str]
    mntr: dict[str, Any]

    def counts(self) -> dict[str, int]:
        listed = sum(map(len, self.watched.values()))
        return dict(zip(ROWS, (len(self.watched), int(self.mntr["zk_watch_count"]), listed,
                               int(self.mntr["zk_watch_count"]) - listed)))


def predecessor_watch_census(lab: Lab, clients: list[LockClient], history: History, observer: KazooClient,
                             lock: str, timeout: float = 30.0) -> PredecessorCensus:
    """The first of ``clients`` (live lock client processes of the predecessor recipe on
    ``lock``) acquires, the others queue; once every waiter's watch is on the server, read
    ``mntr``, ``wchc`` and the queue; then hand the lock on to each in turn."""
    holder, *waiters = clients
    holder.acquire(timeout=timeout)
    pending = {waiter.name: waiter.send("acquire", timeout=None) for waiter in waiters}   # queue, don't wait
    sessions = {waiter.name: session_hex(waiter.session["session_id"]) for waiter in waiters}
    wait_until(lambda: all(parse_wchc(lab.zookeeper.four_letter("wchc")).get(session) for session in sessions.values()),
               "every waiter's watch on the server", timeout=timeout)
    mntr = parse_mntr(lab.zookeeper.four_letter("mntr"))
    watches = parse_wchc(lab.zookeeper.four_letter("wchc"))
    observer.sync(lock)   # its server may be a follower that has not applied every waiter's create yet
    contenders = sorted_contenders(observer.get_children(lock))
    predecessor = {}
    for waiter in waiters:
        mine = history.events(client=waiter.name, kind="created")[-1].detail["node"].rsplit("/", 1)[1]
        predecessor[waiter.name] = f"{lock}/{contenders[contenders.index(mine) - 1]}"
    release_in_turn([holder, *waiters], pending, timeout=timeout)
    return PredecessorCensus({name: watches.get(session, []) for name, session in sessions.items()},
                             predecessor, contenders, mntr)


@dataclass(frozen=True)
class ParentCensus:
    """``kinds``: data and child watches on the server while the waiters waited;
    ``listed``: how many of them ``wchc`` listed for the waiters' sessions;
    ``woken_by_first_release``: waiters woken when the first holder let go."""

    waiters: int
    kinds: dict[str, int]
    listed: int
    woken_by_first_release: int

    def counts(self) -> dict[str, int]:
        return dict(zip(ROWS, (self.waiters, self.kinds["data"] + self.kinds["child"], self.listed,
                               self.kinds["child"])))


def parent_watch_census(lab: Lab, clients: int, session_timeout: float, lock: str = "/locks/herd",
                        timeout: float = 30.0) -> ParentCensus:
    """``clients`` processes of the parent-watching recipe queue on ``lock``; once each
    waiter's child watch is on the server, count the watches and what ``wchc`` lists for
    the waiters' sessions; then hand the lock on in turn and count the first wakeups."""
    with spawn_clients(lab, "zookeeper-parent", n=clients, name=lock, session_timeout=session_timeout) as group:
        pending = queue_behind(group)
        waiters = list(group)[1:]
        sessions = {session_hex(waiter.session["session_id"]) for waiter in waiters}

        def server_watches() -> dict[str, int]:
            return watch_kinds(parse_mntr(lab.zookeeper.four_letter("mntr")), parse_wchs(lab.zookeeper.four_letter("wchs")))

        wait_until(lambda: server_watches()["child"] >= len(waiters), "the waiters' watches on the parent", timeout)
        kinds = server_watches()
        listed = parse_wchc(lab.zookeeper.four_letter("wchc"))
        release_in_turn(group, pending, timeout=timeout)
        woken = group.history.wakeups_per_release()[0]
    return ParentCensus(len(waiters), kinds, sum(len(listed.get(session, [])) for session in sessions), woken)


def watch_census_plot(censuses: dict[str, dict[str, int]]) -> Any:
    """Grouped bars: for each recipe (name → ``counts()``), waiters, watches counted by
    ``mntr``, listed by ``wchc``, and not listed."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
    width = 0.8 / len(censuses)
    for number, (recipe, counts) in enumerate(censuses.items()):
        offset = (number - (len(censuses) - 1) / 2) * width
        ax.bar([index + offset for index in range(len(ROWS))], [counts[row] for row in ROWS], width, label=recipe)
    ax.set_xticks(range(len(ROWS)), ROWS)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("count (waiters or watches)")
    waiters = max(counts["waiters"] for counts in censuses.values())
    ax.set_title(f"{waiters} waiters: what mntr counts and what wchc lists")
    ax.legend()
    return figure
