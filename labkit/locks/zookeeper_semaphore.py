"""A counting semaphore on ZooKeeper, in the layout of Curator's ``InterProcessSemaphoreV2``
(Curator 5.4, curator-recipes .../locks/InterProcessSemaphoreV2.java), so that labkit and
Curator's Java clients share one semaphore.

What can go wrong, first:

- The client-side deadline: a lease is an ephemeral node, and a holder cut off from the
  ensemble hears nothing (kazoo says LOST only after it reconnects) while the leader expires
  its session and gives the slot to the next waiter. So each holder keeps the lock's own
  deadline, ``HolderDeadline`` (zookeeper_deadline.py: the send time of the newest answered
  request, plus the session timeout, minus a margin, the leader's lag and a heartbeat): it
  heartbeats while it holds, ``is_held`` reads the deadline each time, and when it passes a
  "lost" event says "client-side deadline" and my lease node is deleted (now, or once the
  connection is back). ``ZooKeeperLock`` does exactly the same, and so does the etcd
  semaphore through its session. Curator's InterProcessSemaphoreV2 keeps no such deadline;
  ``client_deadline=False`` is that behaviour (the negative control of
  ``lessons/semaphore_deadlines.py``: cut off, it believes it holds after the next waiter got
  its slot). A deadline does not replace fencing: fence what a holder writes with ``token``
  (the czxid of its lease node), as for a mutex.
- A session too short to leave time to hold (after the margin, the lag and a heartbeat) is
  refused by ``acquire`` with a ``ValueError`` that says how long it must be.
- LOST: the session expired, the server deleted my lease node and the slot went to the next
  waiter; ``is_held`` turns False and a "lost" event says so. SUSPENDED ("suspended" event,
  ``is_suspended``) while holding: stop writing until "reconnected".
- ``acquire(timeout)`` raises ``LockTimeout`` and leaves nothing behind (its lease node and
  its place in the internal mutex are deleted); ``SessionExpired`` if the lease node vanished
  while it waited.
- Everyone on the path must agree on ``limit``. Curator does not check it, and neither can
  this recipe: each client compares the count with its own limit.
- ``PathInUse`` when the path is already a mutex's (its children are lock contenders).

The layout and the protocol, as Curator does it:

1. take an ordinary ZooKeeper mutex on ``<path>/locks`` (Curator's ``InterProcessMutex``:
   nodes ``_c_<uuid>-lock-<seq>``; labkit's ``ZooKeeperLock`` queues with them);
2. holding it, create ``<path>/leases/_c_<uuid>-lease-<seq>``, EPHEMERAL + SEQUENTIAL;
3. list ``<path>/leases`` with a watch; if it holds at most ``limit`` children, mine is a
   lease: release the mutex and return. Otherwise wait for the watch (a lease went), and
   list again -- still holding the mutex;
4. release = delete my lease node.

Why no herd: only the one waiter that holds the mutex watches the leases, so a freed slot
wakes exactly one client. The other waiters wait in the mutex's queue, each on its
predecessor; when the admitted waiter lets go of the mutex, one more client wakes to become
the waiter at the head. A lease's number is no queue position: the count is what matters.

One difference from Curator, for speed: when nobody waits in the mutex's queue and fewer
than ``limit`` leases exist (one round trip to see both), this recipe creates its lease
without taking the mutex, and lists the leases again in the same round trip. Same nodes,
same count rule, so it stays safe beside Curator (see ``_took_free_slot``); it saves the
mutex's three round trips when a slot is free. If the count then says full (another client
came at that moment), it deletes its lease and queues the long way.
"""
from __future__ import annotations

import threading
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, KeeperState

from labkit.locks.errors import LockError, LockTimeout, PathInUse, SessionExpired, check_semaphore_size
from labkit.locks.zookeeper import ZooKeeperLock, sequence_of
from labkit.locks.zookeeper_deadline import GivesUpAtDeadline, HolderDeadline
from labkit.locks.zookeeper_queue import delete_when_connected
from labkit.record.events import EventSink, ignore_events

LOCKS = "locks"          # Curator's LOCK_PARENT
LEASES = "leases"        # Curator's LEASE_PARENT
LEASE_NAME = "lease-"    # Curator's LEASE_BASE_NAME
PROTECTION = "_c_"       # Curator's withProtection(): "_c_" + uuid + "-" before the name


class ZooKeeperSemaphore(GivesUpAtDeadline):
    """Up to ``limit`` holders of ``path`` at once, one lease per ``acquire``.

    ``token`` is the czxid of my lease node (for a fenced resource), ``node`` its name.
    ``mutex`` is the internal lock on ``<path>/locks``; its own events are not passed on,
    except its watches and wake-ups, with ``what="line"`` (the line of waiters moved),
    beside the "watch"/"woke" with ``what="slot"`` of the head, that a freed lease wakes.
    One lease per object at a time; give each thread or process its own object.

    ``deadline_margin`` and ``server_lag`` choose the holder's client-side deadline, kept by
    ``self.client_deadline`` (a ``HolderDeadline``, as for ``ZooKeeperLock``; the internal
    mutex gets the same two). ``client_deadline=False`` keeps none (``self.client_deadline``
    is None): a cut-off holder then believes it holds until kazoo says LOST. Unsafe, as
    Curator's semaphore is; kept to be measured against.
    """

    def __init__(self, client: KazooClient, path: str, limit: int, identifier: str = "",
                 on_event: EventSink = ignore_events, deadline_margin: float = 0.2,
                 server_lag: float | None = None, client_deadline: bool = True):
        self.path = path.rstrip("/")
        self.limit = check_semaphore_size(limit, self.path)
        self.client = client
        self.identifier = identifier
        self.leases_path = f"{self.path}/{LEASES}"
        self._emit = on_event
        # Made before my first request, whose answer must count (zookeeper_contact.py).
        self.client_deadline = HolderDeadline(client, deadline_margin, server_lag) if client_deadline else None
        self.mutex = ZooKeeperLock(client, f"{self.path}/{LOCKS}", identifier=identifier,
                                   on_event=self._line_events, deadline_margin=deadline_margin,
                                   server_lag=server_lag)
        self.node: str | None = None
        self.token: int | None = None
        self._held = False
        self._gave_up = False                     # the client-side deadline passed while I held a lease
        self._session_lost = False
        self.is_suspended = False
        self._guard = threading.Lock()
        self._checked_path = False
        self._changed = threading.Event()
        self._waiting = False                     # a wait armed the leases watch and sleeps on it

    def _line_events(self, kind: str, **detail) -> None:
        # The mutex's queue is the line of waiters: its watches and wake-ups are mine too.
        if kind in ("watch", "woke"):
            detail["what"] = "line"
            self._emit(kind, **detail)

    @property
    def is_held(self) -> bool:
        """True from acquire until release, until the client-side deadline passes (read at
        each call), or until the session is LOST, whichever comes first."""
        return self._held and time.monotonic() < self.give_up_at()

    def give_up_at(self) -> float:
        """The client-side deadline (``time.monotonic()``) of my lease, ``HolderDeadline``'s;
        infinity with ``client_deadline=False``."""
        return float("inf") if self.client_deadline is None else self.client_deadline.give_up_at()

    def time_left(self) -> float:
        """Seconds until the client-side deadline; 0 when not holding."""
        return max(self.give_up_at() - time.monotonic(), 0.0) if self._held else 0.0

    def _check_path(self, children: list[str]) -> None:
        # A mutex's contenders live right under its path; a semaphore's under locks/ and leases/.
        contenders = [child for child in children if sequence_of(child) is not None]
        if contenders:
            raise PathInUse(f"{self.path!r} is a mutex's path ({len(contenders)} lock node(s) under it, "
                            f"e.g. {contenders[0]!r}): a semaphore there would not exclude its holders",
                            hint="give the semaphore a path of its own")
        self._checked_path = True

    def acquire(self, timeout: float | None = None) -> int:
        """Block until I hold a lease; return its token (the lease node's czxid).
        Raises LockTimeout, SessionExpired, PathInUse, or LockError if this object holds already."""
        if self.node is not None:
            raise LockError(f"this semaphore object already holds a lease of {self.path!r}; release() it first")
        if self.client_deadline is not None:
            self.client_deadline.check_session_is_long_enough(self.path)
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        self._gave_up = self._session_lost = False
        self._emit("requested", path=self.path, limit=self.limit)
        try:
            took = self._took_free_slot()
        except BaseException:
            self._delete_lease()
            raise
        if not took:
            self._acquire_in_line(timeout, deadline, started)
        self._held = True
        self.client.add_listener(self._on_connection_state)
        self._emit("acquired", token=self.token, node=f"{self.leases_path}/{self.node}")
        if self.client_deadline is not None:
            self.client_deadline.start(f"{self.leases_path}/{self.node}", self._give_up)
        return self.token

    def _took_free_slot(self) -> bool:
        """The short way, when nobody waits and a slot is free: create my lease without the
        mutex. (Curator always takes the mutex; the nodes are the same.) Safe because every
        client lists the leases *after* creating its own and counts them all: of any N + 1
        leases alive together, the one created last was listed after the others existed, so
        its client saw N + 1 and did not hold. Without the mutex, a client that finds the
        semaphore full goes back, deletes its lease and queues the long way."""
        ahead = [self.client.get_children_async(f"{self.path}/{LOCKS}"), self.client.get_children_async(self.leases_path)]
        looked_at_path = None if self._checked_path else self.client.get_children_async(self.path)
        waiting, leases = (_children_or_none(result) for result in ahead)
        if looked_at_path is not None:
            self._check_path(_children_or_none(looked_at_path))
        if [child for child in waiting if sequence_of(child) is not None] or len(leases) >= self.limit:
            return False                          # someone waits, or no slot is free: queue up
        created = self._create_lease_async()
        listed = self.client.get_children_async(self.leases_path)
        self._took_lease(*created.get())
        try:
            children = listed.get()               # sent right after the create: it counts my lease
        except NoNodeError:                       # the create made the parent after this list
            children = self.client.get_children(self.leases_path)
        if self.node in children and len(children) <= self.limit:
            return True
        self._delete_lease()                      # someone came at the same moment: go the long way
        return False

    def _acquire_in_line(self, timeout: float | None, deadline: float | None, started: float) -> None:
        try:
            self.mutex.acquire(timeout)           # step 1: one waiter at a time past this point
        except LockTimeout:
            self._timed_out(started)
        try:
            self._took_lease(*self._create_lease_async().get())   # step 2
            admitted = self._wait_for_slot(deadline)   # step 3
        except BaseException:
            self._delete_lease()
            raise
        finally:
            self.mutex.release()                  # the next waiter may now check the count
        if not admitted:
            self._delete_lease()
            self._timed_out(started)

    def _timed_out(self, started: float) -> None:
        waited = time.monotonic() - started
        self._emit("timeout", waited=waited)
        raise LockTimeout(self.path, waited)

    def _create_lease_async(self):
        # Curator's protection prefix: a create whose answer was lost can be found again by it.
        name = f"{PROTECTION}{uuid.uuid4()}-{LEASE_NAME}"
        return self.client.create_async(f"{self.leases_path}/{name}", self.identifier.encode(),
                                        ephemeral=True, sequence=True, makepath=True, include_data=True)

    def _took_lease(self, created: str, stat) -> None:
        self.node = created.rsplit("/", 1)[1]
        self.token = stat.czxid
        self._emit("created", node=created, sequence=int(self.node[-10:]))

    def _wait_for_slot(self, deadline: float | None) -> bool:
        """List the leases until at most ``limit`` exist (mine among them). False at the deadline."""
        watch = None                              # the first look arms no watch: most acquires need none
        while True:                               # the recipe as a learner reads it: a watch wakes it, not a poll
            self._changed.clear()
            try:
                children = self.client.get_children(self.leases_path, watch=watch)
            except SessionExpiredError:
                children = []
            if self.node not in children:
                raise SessionExpired(f"my lease node {self.node!r} under {self.leases_path!r} is gone (session "
                                     "expired or the node was deleted): start a new session to try again")
            if len(children) <= self.limit:
                self._waiting = False             # a watch still armed will fire once, unheard
                return True
            if watch is None:
                watch = self._on_leases_changed   # look again, this time with the watch
                continue
            self._waiting = True
            self._emit("watch", target=self.leases_path, what="slot", leases=len(children))
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._changed.wait(remaining):
                self._waiting = False
                return False

    def _on_leases_changed(self, event) -> None:
        # Runs on kazoo's event thread. One watch, on the leases: only the waiter holding the
        # mutex has it armed, so a freed lease wakes one client.
        if self._waiting and event.type != EventType.NONE:
            self._waiting = False
            self._emit("woke", what="slot", reason=event.type.lower(), target=event.path)
        self._changed.set()

    def _on_connection_state(self, state: str) -> bool:
        # Runs on kazoo's connection thread: only flags, events and async calls here.
        if state == KazooState.SUSPENDED:
            self.is_suspended = True
            if self._held:
                self._emit("suspended", path=self.path)
        elif state == KazooState.CONNECTED:
            if self.is_suspended and self._held:
                self._emit("reconnected", path=self.path)
            self.is_suspended = False
            if self._gave_up and self.node is not None:
                # The session survived, and my lease with it, but I told my caller it was
                # lost: give the slot to the next waiter rather than keep one nobody uses.
                self.client.delete_async(f"{self.leases_path}/{self.node}")
        elif state == KazooState.LOST:
            self._stop_deadline()
            self._session_lost = True
            self.is_suspended = False
            with self._guard:
                was_held, self._held = self._held, False
            if was_held:
                token, self.token = self.token, None
                if self.client.client_state == KeeperState.CLOSED:
                    self._emit("released", token=token, reason="the client closed its session")
                else:
                    self._emit("lost", token=token, reason="session expired: the server deleted my lease node")
            return True                           # kazoo removes this listener
        return False

    def held_node(self) -> str:
        """The full path of my lease node (``self.node`` under its parent)."""
        return f"{self.leases_path}/{self.node}"

    def _stop_deadline(self) -> None:
        if self.client_deadline is not None:
            self.client_deadline.stop()

    def _delete_lease(self) -> None:
        if self.node is not None:
            try:
                self.client.delete(f"{self.leases_path}/{self.node}")
            except (NoNodeError, SessionExpiredError):
                pass                              # gone with the session already
            except KazooException:
                pass                              # the session's end deletes it: best effort
        self.node = self.token = None

    def release(self) -> None:
        """Delete my lease node (idempotent). Raises LockError if the server cannot be
        reached: the lease then stays taken until release() succeeds or the session ends.
        After the client-side deadline gave the lease up, an unreachable server is no error:
        the node is deleted as soon as the connection is back (or goes with the session)."""
        if self.node is None:
            return
        node = f"{self.leases_path}/{self.node}"
        try:
            self.client.delete(node)
        except (NoNodeError, SessionExpiredError):
            pass
        except KazooException as error:
            if self._gave_up:
                delete_when_connected(self.client, node)
                self._forget_lease()
                return
            raise LockError(f"could not delete my lease {node} ({error!r}); the slot stays "
                            "taken until release() succeeds or the session ends") from error
        was_held, token = self._held, self.token
        self._forget_lease()
        if was_held:
            self._emit("released", token=token)

    def _forget_lease(self) -> None:
        self._stop_deadline()
        self.client.remove_listener(self._on_connection_state)
        with self._guard:
            self._held = False
        self.node = self.token = None

    def holders(self) -> list[str]:
        """The lease nodes under ``<path>/leases`` now (each client's, Curator's too)."""
        try:
            return sorted(self.client.get_children(self.leases_path))
        except NoNodeError:
            return []

    def __enter__(self) -> "ZooKeeperSemaphore":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def _children_or_none(result) -> list[str]:
    """The children an async get_children found; none if the node does not exist yet."""
    try:
        return result.get()
    except NoNodeError:
        return []
