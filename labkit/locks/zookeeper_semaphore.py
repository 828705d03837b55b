"""A counting semaphore on ZooKeeper, in the layout of Curator's ``InterProcessSemaphoreV2``
(Curator 5.4, curator-recipes .../locks/InterProcessSemaphoreV2.java), so that labkit and
Curator's Java clients share one semaphore.

What can go wrong, first:

- LOST: a lease is an ephemeral node. When the session expires the server deletes it and
  the slot goes to the next waiter; ``is_held`` turns False and a "lost" event says so.
  Until the client hears LOST it may still believe it holds: fence what it writes with
  ``token`` (the czxid of its lease node), as for a mutex. This recipe keeps no client-side
  deadline of its own while holding (Curator keeps none either).
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
from labkit.record.events import EventSink, ignore_events

LOCKS = "locks"          # Curator's LOCK_PARENT
LEASES = "leases"        # Curator's LEASE_PARENT
LEASE_NAME = "lease-"    # Curator's LEASE_BASE_NAME
PROTECTION = "_c_"       # Curator's withProtection(): "_c_" + uuid + "-" before the name


class ZooKeeperSemaphore:
    """Up to ``limit`` holders of ``path`` at once, one lease per ``acquire``.

    ``token`` is the czxid of my lease node (for a fenced resource), ``node`` its name.
    ``mutex`` is the internal lock on ``<path>/locks``; its own events are not passed on,
    except its watches and wake-ups, with ``what="line"`` (the line of waiters moved),
    beside the "watch"/"woke" with ``what="slot"`` of the head, that a freed lease wakes.
    One lease per object at a time; give each thread or process its own object.
    """

    def __init__(self, client: KazooClient, path: str, limit: int, identifier: str = "",
                 on_event: EventSink = ignore_events, server_lag: float | None = None):
        self.path = path.rstrip("/")
        self.limit = check_semaphore_size(limit, self.path)
        self.client = client
        self.identifier = identifier
        self.leases_path = f"{self.path}/{LEASES}"
        self._emit = on_event
        self.mutex = ZooKeeperLock(client, f"{self.path}/{LOCKS}", identifier=identifier,
                                   on_event=self._line_events, server_lag=server_lag)
        self.node: str | None = None
        self.token: int | None = None
        self._held = False
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
        return self._held

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
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
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
        if state == KazooState.LOST and self._held:
            self._held, token = False, self.token
            if self.client.client_state == KeeperState.CLOSED:
                self._emit("released", token=token, reason="the client closed its session")
            else:
                self._emit("lost", token=token, reason="session expired: the server deleted my lease node")
            return True                           # kazoo removes this listener
        return not self._held

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
        reached: the lease then stays taken until release() succeeds or the session ends."""
        if self.node is None:
            return
        try:
            self.client.delete(f"{self.leases_path}/{self.node}")
        except (NoNodeError, SessionExpiredError):
            pass
        except KazooException as error:
            raise LockError(f"could not delete my lease {self.leases_path}/{self.node} ({error!r}); the slot stays "
                            "taken until release() succeeds or the session ends") from error
        was_held, token = self._held, self.token
        self._held = False
        self.node = self.token = None
        self.client.remove_listener(self._on_connection_state)
        if was_held:
            self._emit("released", token=token)

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
