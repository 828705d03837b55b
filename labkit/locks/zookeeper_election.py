"""ZooKeeperElection: leader election on ZooKeeper, in the queue of kazoo's ``Election``.

What can go wrong, first: everything that can go wrong with the ZooKeeper lock
(zookeeper.py), because an election *is* that lock. SUSPENDED means you may have lost the
leadership; a session that expires deletes my node and elects the next candidate while a
paused leader may still believe it leads. So the leader's **epoch**, the czxid of its node
(the zxid of its create, one counter for the whole ensemble), must travel with everything
it does, and the resource must refuse an epoch lower than one it has seen
(``labkit.record.fencing``). ``campaign(timeout)`` raises ``LockTimeout``, or
``SessionExpired`` when the session ends while waiting, or ``ValueError`` for a session too
short to leave time to lead (it says how long it must be); ``leader()`` raises
``NoElectedLeader`` on an empty election; a path that is not a ZooKeeper path raises
``InvalidElectionName`` before anything is created.

A leader *cut off* from the ensemble is not left believing: it keeps the lock's client-side
deadline (``HolderDeadline``, zookeeper_deadline.py, through the ZooKeeperLock it is), so it
heartbeats while it leads, ``is_leader`` reads the deadline each time, and when it passes a
"lost" event says "client-side deadline" and my node is deleted (now, or once the connection
is back). It steps down before the ensemble's leader can expire its session and elect the
next candidate, whether its own link is cut or its server is a follower cut from the
leader; etcd's election does the same through its session's deadline (etcd_election.py).
kazoo's ``Election`` keeps no deadline: its leader function runs on, cut off, after the next
candidate is elected (``lessons/semaphore_deadlines.py`` races both). A paused leader
notices only when it wakes: that is what the epoch is for.

Why kazoo's ``Election`` as the peer, and not Curator's ``LeaderLatch``: kazoo's election is
nothing but kazoo's ``Lock`` on the election path (``run(func)`` holds the lock while
``func`` runs), which is the point of this module: an election is a lock with an epoch.
Its nodes are ``<uuid>__lock__<seq>`` holding the candidate's identifier, the layout
ZooKeeperLock already queues with, so a labkit candidate and a kazoo candidate share one
queue in one Python process, without a JVM that takes seconds to start on a busy machine.
``LeaderLatch`` names its nodes ``_c_<uuid>-latch-<seq>`` and sorts by what follows
``latch-``: a lock recipe and a latch never see each other's nodes, so sharing its queue
would have meant a recipe of its own rather than the lock with an epoch.

The one change from ZooKeeperLock: my node is spelled with kazoo's ``__lock__``, because
kazoo's ``Election`` (as shipped, no ``extra_lock_patterns``) counts only those; with the
lock's ``-lock-`` spelling kazoo would not see us and would elect itself beside us.
"""
from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from labkit.locks.contract import HeldInside
from labkit.locks.errors import InvalidElectionName, NoElectedLeader
from labkit.locks.zookeeper import ZooKeeperLock, sorted_contenders
from labkit.record.events import EventSink, ignore_events

KAZOO_NODE_MARKER = "__lock__"


@dataclass(frozen=True)
class ZooKeeperLeader:
    """The leader as ZooKeeper stores it: its node, its identifier (the node's data) and its
    epoch (the node's czxid: the fencing token of its whole term)."""

    node: str
    identifier: str
    epoch: int


def check_election_path(path: object) -> str:
    """``path`` if it can be an election's parent node, else raise InvalidElectionName."""
    segments = path.split("/")[1:] if isinstance(path, str) else []
    if (not isinstance(path, str) or not path.startswith("/") or path == "/" or path.endswith("/")
            or any(segment in ("", ".", "..") for segment in segments) or "\x00" in path):
        raise InvalidElectionName(
            f"{path!r} is not a valid ZooKeeper election path: it must start with '/', have no empty, "
            "'.' or '..' segment, no trailing '/' and no NUL character",
            hint="use a path such as '/elections/scheduler'")
    return path


class _KazooSpelledLock(ZooKeeperLock):
    node_marker = KAZOO_NODE_MARKER


class ZooKeeperElection(HeldInside):
    """One candidate in the election at ``path``, on one KazooClient (one session).

    ``campaign(timeout)`` blocks until elected and returns my epoch; ``acquire`` is the
    same, so the election follows the lock contract (docs/RECIPES.md). ``deadline_margin``
    and ``server_lag`` choose the leader's client-side deadline, as for ``ZooKeeperLock``.
    """

    def __init__(self, client: KazooClient, path: str, identifier: str = "",
                 on_event: EventSink = ignore_events, deadline_margin: float = 0.2,
                 server_lag: float | None = None):
        self.path = check_election_path(path)
        self.client = client
        self.identifier = identifier
        self._lock = _KazooSpelledLock(client, path, identifier=identifier, on_event=on_event,
                                       deadline_margin=deadline_margin, server_lag=server_lag)

    def campaign(self, timeout: float | None = None) -> int:
        """Queue my node and block until it is the lowest; return my epoch (its czxid)."""
        return self._lock.acquire(timeout)

    acquire = campaign

    def resign(self) -> None:
        """Step down: delete my node, so the next candidate is elected at once."""
        self._lock.release()

    release = resign

    @property
    def is_leader(self) -> bool:
        """True while elected, until the client-side deadline (zookeeper.py) or LOST."""
        return self._lock.is_held

    is_held = is_leader

    def give_up_at(self) -> float:
        """The leader's client-side deadline (``time.monotonic()``, ``HolderDeadline``'s)."""
        return self._lock.give_up_at()

    def time_left(self) -> float:
        """Seconds until the client-side deadline; 0 when not leading."""
        return self._lock.time_left()

    @property
    def epoch(self) -> int | None:
        """My node's czxid while I lead (None otherwise)."""
        return self._lock.token if self._lock.is_held else None

    token = epoch

    def leader(self) -> ZooKeeperLeader:
        """The current leader: the lowest node under the path, whoever made it (kazoo's,
        Curator's lock nodes, ours). Raises NoElectedLeader when nobody campaigns."""
        for node in self._queue():
            try:
                data, stat = self.client.get(f"{self.path}/{node}")
            except NoNodeError:
                continue                          # it left while we looked: the next one leads
            return ZooKeeperLeader(node, data.decode(errors="replace"), stat.czxid)
        raise NoElectedLeader(f"election {self.path!r} has no candidate, so no leader")

    def candidates(self) -> list[str]:
        """Every candidate's identifier, leader first (what kazoo's ``contenders()`` says)."""
        found = []
        for node in self._queue():
            try:
                found.append(self.client.get(f"{self.path}/{node}")[0].decode(errors="replace"))
            except NoNodeError:
                pass
        return found

    def _queue(self) -> list[str]:
        try:
            return sorted_contenders(self.client.get_children(self.path))
        except NoNodeError:
            return []

    def __repr__(self) -> str:
        state = f"leader, epoch {self.epoch}" if self.is_leader else "not leader"
        return f"ZooKeeperElection({self.path!r}, {state})"
