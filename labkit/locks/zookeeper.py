"""The ZooKeeper lock recipe, written out on kazoo's primitives so that each step can be read.

What can go wrong, first:

- SUSPENDED: the connection to the server dropped. The session may still be alive (and the
  lock with it) or it may be expiring right now: you cannot know. ``lock.is_suspended``
  becomes True and a "suspended" event is emitted: stop writing to the protected resource
  until "reconnected".
- The client-side deadline: kazoo says LOST only once it reconnects and hears that the
  session expired. A holder cut off from the ensemble would go on believing it holds while
  the leader expires its session and gives the lock to the next waiter. So the holder
  counts for itself (Chubby calls it "jeopardy") and gives up first (``zookeeper_deadline.py``
  says when, and why a follower's answer proves less than the leader's). ``is_held`` checks
  that deadline every time it is read; when it passes a "lost" event says "client-side
  deadline". Do not wait for SUSPENDED: kazoo says it only after two thirds of a timeout of
  silence (Curator's advice is the same: treat SUSPENDED as lost). And a deadline does not
  replace fencing: a write sent just before it can still arrive late.
- LOST: the session expired, so the server deleted my ephemeral node and someone else may
  hold the lock already. ``is_held`` becomes False and a "lost" event is emitted; a waiter's
  ``acquire`` raises ``SessionExpired``. Start again with a new session. Closing the client
  on purpose (``client.stop()``) ends the session too: that is a "released" event.
- ``acquire(timeout)`` raises ``LockTimeout`` (and deletes my node, so I leave the queue).
- ``release()`` raises ``LockError`` if the delete cannot reach the server: my node, and so
  the lock, stays until a later ``release()`` succeeds or the session ends.

The recipe:

1. create ``<path>/<uuid>-lock-`` as an EPHEMERAL + SEQUENTIAL node. ZooKeeper appends a
   10-digit sequence number: the order of the queue. Ephemeral: it dies with my session.
2. list the children and sort them by that number (``zookeeper_queue.py``); if mine is the
   lowest, I hold the lock.
3. otherwise watch the node just before mine (``watch="predecessor"``) or the whole
   parent (``watch="parent"``: every waiter wakes on every change, the herd), and when the
   watch fires go back to step 2: re-check, never assume.
"""
from __future__ import annotations

import threading
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, KeeperState

from labkit.record.events import EventSink, ignore_events
from labkit.locks.errors import LockError, LockTimeout, PathInUse, SessionExpired
from labkit.locks.zookeeper_deadline import GivesUpAtDeadline, HolderDeadline, heartbeat_for  # noqa: F401 (lessons import heartbeat_for here)
from labkit.locks.zookeeper_queue import (NODE_MARKER, SEMAPHORE_CHILDREN, QueuedNode, delete_when_connected,
                                         queue_of, sequence_of, sorted_contenders)

WATCH_KINDS = ("predecessor", "parent")


class ZooKeeperLock(GivesUpAtDeadline):
    """An exclusive lock on ``path`` for one ``KazooClient`` (one session).

    ``token`` (the fencing token) is ``czxid``, the zxid of my node's create: ZooKeeper's
    one global counter, ordered through the leader's log, so it grows for as long as the
    ensemble lives. ``sequence``, the number in my node's name, orders the queue (kazoo and
    Curator sort by it too) but is no token: it is a counter of the parent node, and a
    parent deleted and re-created (Curator makes lock parents *container* nodes, which the
    server deletes when empty) starts again at 0 -- a new holder would carry a lower number.

    The client-side deadline is kept by ``self.client_deadline``, a ``HolderDeadline``
    (``zookeeper_deadline.py``: when it falls, how ``deadline_margin`` and ``server_lag`` are
    chosen): it heartbeats while the lock is held and calls the lock back when it passes. A
    session too short to leave time to hold is refused by ``acquire`` with a ``ValueError``
    that says how long it must be.

    ``node_marker`` (a class attribute) is what my node's name carries before its sequence:
    ``-lock-`` so that Curator counts it; a variant may spell it as another recipe's queue
    expects (the election speaks kazoo's ``__lock__``, zookeeper_election.py).

    Not re-entrant, and one hold at a time per object. Each thread or process needs its own
    lock object; give each its own client if they must queue against each other.
    """

    node_marker = NODE_MARKER

    def __init__(self, client: KazooClient, path: str, identifier: str = "",
                 watch: str = "predecessor", on_event: EventSink = ignore_events,
                 deadline_margin: float = 0.2, server_lag: float | None = None):
        if watch not in WATCH_KINDS:
            raise ValueError(f"watch={watch!r} is not one of {WATCH_KINDS}: "
                             "use 'predecessor' (wakes one waiter) or 'parent' (wakes them all)")
        self.client = client
        self.path = path.rstrip("/")
        self.identifier = identifier
        self.watch = watch
        # Made before my first request, whose answer must count (zookeeper_contact.py).
        self.client_deadline = HolderDeadline(client, deadline_margin, server_lag)
        self.contact = self.client_deadline.contact
        self.node: str | None = None      # my child's name, without the path
        self.sequence: int | None = None  # its number: my place in the queue
        self.token: int | None = None     # my node's czxid, once I hold the lock
        self.czxid: int | None = None
        self._gave_up = False             # the client-side deadline passed while I held the lock
        self.is_suspended = False
        self._emit = on_event
        self._held = False
        self._session_lost = False
        self._connected = threading.Event()
        self._connected.set()
        self._wake = threading.Event()
        self._guard = threading.Lock()
        self._wait_number = 0             # which wait a watch belongs to (see _watcher)
        self._queue: list[str] = []

    @property
    def is_held(self) -> bool:
        """True from acquire until release, until the client-side deadline passes, or until
        the session is LOST, whichever comes first. The deadline is checked at each read."""
        return self._held and time.monotonic() < self.give_up_at()

    @property
    def deadline_margin(self) -> float:
        """The fraction of the session timeout the deadline keeps in hand (``HolderDeadline``)."""
        return self.client_deadline.deadline_margin

    @property
    def server_lag(self) -> float:
        """Seconds subtracted from the deadline for the leader's lag (``HolderDeadline``)."""
        return self.client_deadline.server_lag

    @property
    def heartbeat(self) -> float:
        """Seconds between the holder's heartbeats (``heartbeat_for`` its session timeout)."""
        return self.client_deadline.heartbeat

    def give_up_at(self) -> float:
        """The client-side deadline (``time.monotonic()``): the holder stops holding then,
        before the leader can have expired the session. Now, if nothing was ever answered."""
        return self.client_deadline.give_up_at()

    def time_left(self) -> float:
        """Seconds until the client-side deadline; 0 when not holding."""
        return max(self.give_up_at() - time.monotonic(), 0.0) if self._held else 0.0

    def acquire(self, timeout: float | None = None) -> int:
        """Queue up and block until I hold the lock; return the fencing token.

        Raises LockTimeout after ``timeout`` seconds (my node is deleted), SessionExpired if
        the session ends while waiting, LockError if this object already holds the lock.
        """
        if self.node is not None:
            raise LockError(f"this lock object already holds or waits for {self.path!r}; "
                            "release() it first (the lock is not re-entrant)")
        self.client_deadline.check_session_is_long_enough(self.path)
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        self._session_lost = False
        self._gave_up = False
        self.client.add_listener(self._on_connection_state)
        self._emit("requested", path=self.path)
        try:
            got_it = self._create_my_node(deadline) and self._wait_until_lowest(deadline)
        except BaseException:
            self._leave_queue()
            raise
        if not got_it:
            waited = time.monotonic() - started
            self._leave_queue()
            self._emit("timeout", waited=waited)
            raise LockTimeout(self.path, waited)
        self._held = True
        self.token = self.czxid
        self._emit("acquired", token=self.token, node=f"{self.path}/{self.node}", sequence=self.sequence)
        self.client_deadline.start(f"{self.path}/{self.node}", self._give_up)
        return self.token

    def _create_my_node(self, deadline: float | None) -> bool:
        """Put my node in the queue. False if the connection stayed down past the deadline."""
        # The uuid makes my node findable: if the connection drops after the server created
        # it but before the reply arrived, a blind retry would leave an orphan node ahead of
        # me in the queue until my session dies, and I would wait on myself. (Curator's trick.)
        name_prefix = uuid.uuid4().hex + self.node_marker
        tried = False
        while True:
            try:
                found = self._find_my_node(name_prefix) if tried else None
                tried = True
                # makepath: the first lock on a path creates its parent (no cost afterwards)
                created, stat = found or self.client.create(
                    f"{self.path}/{name_prefix}", self.identifier.encode(), ephemeral=True,
                    sequence=True, makepath=True, include_data=True)
                break
            except ConnectionLoss:
                if not self._wait_for_connection(deadline):
                    return False
                if self._session_lost:            # my session, and any node it made, is gone
                    raise SessionExpired(f"my session expired while queueing for {self.path!r}: "
                                         "start a new session (KazooClient) to queue again") from None
        self.node = created.rsplit("/", 1)[1]
        self.sequence = sequence_of(self.node)
        self.czxid = stat.czxid
        self._emit("created", node=created, sequence=self.sequence)
        return True

    def _find_my_node(self, name_prefix: str):
        """(path, stat) of the node my lost create made, or None if it never happened."""
        try:
            children = self.client.get_children(self.path)
        except NoNodeError:
            return None                           # not even the parent exists yet
        for child in children:
            if child.startswith(name_prefix):
                stat = self.client.exists(f"{self.path}/{child}")
                if stat is not None:
                    return f"{self.path}/{child}", stat
        return None

    def _wait_until_lowest(self, deadline: float | None) -> bool:
        """Re-check until mine is the lowest node (True) or the deadline passes (False)."""
        # A wake-up only says "something changed", never "it is yours": the predecessor may
        # have gone because its session died while an earlier node still holds the lock.
        # So every wake-up goes back to listing the children. (A watch wakes this, not a poll.)
        while not self._session_lost:
            self._wake.clear()
            try:
                if self._i_am_lowest(self.client.get_children(self.path)):
                    return True
                if not self._arm_watch():
                    continue                      # what I meant to watch is gone already: re-check now
            except ConnectionLoss:
                if not self._wait_for_connection(deadline):
                    return False
                continue                          # the queue may have moved while I was away
            except SessionExpiredError:
                break
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._wake.wait(remaining):
                self._retire_watch()
                return False
        self._session_lost = True
        raise SessionExpired(f"my session expired while waiting for {self.path!r}, and with it "
                             "my node: start a new session (KazooClient) to queue again")

    def _i_am_lowest(self, children: list[str]) -> bool:
        queue = sorted_contenders(children)
        if any(child in SEMAPHORE_CHILDREN for child in children):
            raise PathInUse(f"{self.path!r} is a counting semaphore's path (it has {'/'.join(SEMAPHORE_CHILDREN)} "
                            "children): a mutex there would not exclude the semaphore's holders",
                            hint="give the mutex a path of its own")
        if self.node not in queue:
            # Someone deleted my node, or the session expired: I am out of the queue.
            self._session_lost = True
            raise SessionExpired(f"my node {self.node!r} under {self.path!r} is gone (session "
                                 "expired or the node was deleted): start a new session to queue again")
        self._queue = queue
        return queue[0] == self.node

    def _arm_watch(self) -> bool:
        """Set this wait's watch. False if there is nothing to wait for any more."""
        callback = self._watcher()
        if self.watch == "parent":
            # The herd: one change under the parent wakes every waiter, though only the
            # next in line can win. Kept so that learners can count the cost.
            self._emit("watch", target=self.path, what="parent")
            if self._i_am_lowest(self.client.get_children(self.path, watch=callback)):
                self._retire_watch()              # the queue moved meanwhile: nothing to wait for
                return False
            return True
        # Watch only the node just before mine: its deletion is the only change that can
        # make me the lowest, and each release then wakes exactly one waiter.
        predecessor = f"{self.path}/{self._queue[self._queue.index(self.node) - 1]}"
        self._emit("watch", target=predecessor, what="predecessor")
        try:
            # get() rather than exists(): exists() on a missing node would leave a watch
            # waiting for a node that will never be created (Curator does the same).
            self.client.get(predecessor, watch=callback)
        except NoNodeError:
            self._retire_watch()
            return False
        return True

    def _watcher(self):
        """A watch callback that wakes this wait once, and ignores firings of older waits."""
        with self._guard:
            self._wait_number += 1
            wait_number = self._wait_number

        def on_watch(event):
            if event.type == EventType.NONE:      # the session closed, not a change: just re-check
                self._wake.set()
                return
            with self._guard:
                if wait_number != self._wait_number:
                    return                        # I already moved on from that wait
                self._wait_number += 1
            self._emit("woke", reason=event.type.lower(), target=event.path)
            self._wake.set()

        return on_watch

    def _retire_watch(self) -> None:
        with self._guard:
            self._wait_number += 1

    def _wait_for_connection(self, deadline: float | None) -> bool:
        """Block until kazoo reconnects (or the session is lost). False if the deadline passed."""
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._connected.wait(remaining)

    def _on_connection_state(self, state: str) -> bool:
        # Runs on kazoo's connection thread: only flags, events and async calls here.
        if state == KazooState.SUSPENDED:
            self.is_suspended = True
            self._connected.clear()
            self._emit("suspended", path=self.path)
        elif state == KazooState.CONNECTED:
            if self.is_suspended:
                self.is_suspended = False
                self._emit("reconnected", path=self.path)
            if self._gave_up and self.node is not None:
                # The session survived, and my node with it, but I told my caller the lock
                # was lost: let the next waiter in rather than hold a lock nobody uses.
                self.client.delete_async(f"{self.path}/{self.node}")
            self._connected.set()
        elif state == KazooState.LOST:
            self.client_deadline.stop()
            self._session_lost = True
            self.is_suspended = False
            if self._held:
                self._held, token, self.token = False, self.token, None
                if self.client.client_state == KeeperState.CLOSED:
                    self._emit("released", token=token, reason="the client closed its session (client.stop()): "
                               "the server deletes my node when the close reaches it, or at the session timeout")
                else:
                    self._emit("lost", reason="session expired: the server deleted my node", token=token)
            self._connected.set()                 # unblock waits; they will see the loss
            self._wake.set()
            return True                           # kazoo removes this listener
        return False

    def held_node(self) -> str:
        """The full path of my lock node (``self.node`` under its parent)."""
        return f"{self.path}/{self.node}"

    def release(self) -> None:
        """Delete my node (idempotent). Raises LockError if the server cannot be reached:
        the lock then stays held until a later release() succeeds or the session ends.
        After the client-side deadline gave the lock up, an unreachable server is no error:
        the node is deleted as soon as the connection is back (or goes with the session)."""
        if self.node is None:
            return
        node = f"{self.path}/{self.node}"
        try:
            self.client.delete(node)
        except (NoNodeError, SessionExpiredError):
            pass                                  # gone already: the session ended, and its nodes with it
        except KazooException as error:
            if self._gave_up:
                delete_when_connected(self.client, node)
                self._forget_node()
                return
            self._emit("error", message=f"release failed: {error!r}")
            raise LockError(f"could not delete {self.path}/{self.node} ({error!r}); the lock stays "
                            "held until release() succeeds or the session ends (client.stop())") from error
        was_held, token = self._held, self.token
        self._forget_node()
        if was_held:
            self._emit("released", token=token)

    def _leave_queue(self) -> None:
        """Best-effort delete of my node after a failed acquire; the session end is the backstop."""
        if self.node is not None and not self._session_lost:
            try:
                self.client.delete(f"{self.path}/{self.node}")
            except KazooException:
                pass
        self._forget_node()

    def _forget_node(self) -> None:
        self.client_deadline.stop()
        self.client.remove_listener(self._on_connection_state)
        self.node = self.sequence = self.token = self.czxid = None
        self._held = False

    def contenders(self) -> list[QueuedNode]:
        """The queue as the server sees it now: holder first, with each node's identifier."""
        return queue_of(self.client, self.path)

    def __enter__(self) -> "ZooKeeperLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()
