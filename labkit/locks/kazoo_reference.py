"""kazoo's own ``Lock``, under labkit's events, so that graphs compare it with ZooKeeperLock.

What can go wrong, first: as with any ZooKeeper lock, SUSPENDED means you may not hold it
any more (``is_suspended``, a "suspended" event: stop writing), LOST means the session
expired and the lock is gone (``is_held`` becomes False, a "lost" event). ``acquire``
raises ``LockTimeout`` after ``timeout`` seconds; kazoo deletes its node first.

kazoo's algorithm runs untouched: we only listen. It wakes when the watch on its
predecessor fires (``Lock._watch_predecessor``): that is where we count "woke".

One deliberate change, the node's name. kazoo names its nodes ``<uuid>__lock__<seq>``.
Curator sorts the children by what follows the last ``lock-`` in each name, and
``__lock__`` has none, so Curator would sort kazoo's nodes by their random uuid and could
take the lock while kazoo holds it. With ``curator_compatible=True`` (the default) kazoo's
node is spelled ``<uuid>-lock-<seq>``, as Curator's and ZooKeeperLock's are, and
``extra_lock_patterns`` makes kazoo count theirs; pass False to see kazoo exactly as shipped.
"""
from __future__ import annotations

import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout as KazooLockTimeout
from kazoo.protocol.states import EventType, KazooState
from kazoo.recipe.lock import Lock

from labkit.locks.contract import HeldInside
from labkit.locks.errors import LockError, LockTimeout, SessionExpired
from labkit.record.events import EventSink, ignore_events
from labkit.locks.zookeeper import NODE_MARKER, sequence_of


class _ListenedLock(Lock):
    """kazoo's Lock with hooks that report what it does; behaviour unchanged."""

    def __init__(self, client, path, identifier, on_event):
        super().__init__(client, path, identifier, extra_lock_patterns=[NODE_MARKER])
        self._emit = on_event
        self.acquiring = False
        self._announced = None

    def _get_predecessor(self, node):
        if node != self._announced:               # kazoo looks right after creating its node
            self._announced = node
            self._emit("created", node=f"{self.path}/{node}", sequence=sequence_of(node))
        predecessor = super()._get_predecessor(node)
        if predecessor is not None:               # kazoo now sets a watch on it with get()
            self._emit("watch", target=f"{self.path}/{predecessor}", what="predecessor")
        return predecessor

    def _watch_predecessor(self, event):
        # NONE is the session closing, not a release; after acquire, no one is waiting.
        if self.acquiring and event.type != EventType.NONE:
            self._emit("woke", reason=event.type.lower(), target=event.path)
        super()._watch_predecessor(event)


class _CuratorSpelledLock(_ListenedLock):
    _NODE_NAME = NODE_MARKER                      # "<uuid>-lock-<seq>", as Curator sorts it


class KazooReferenceLock(HeldInside):
    """kazoo's ``Lock`` on ``path`` with the labkit recipe contract (see docs/RECIPES.md).

    ``token`` is its node's czxid, as for ZooKeeperLock (kazoo's Lock itself gives none), so
    that both can fence one store; ``sequence`` is its place in the queue.
    """

    def __init__(self, client: KazooClient, path: str, identifier: str = "",
                 on_event: EventSink = ignore_events, curator_compatible: bool = True):
        lock_class = _CuratorSpelledLock if curator_compatible else _ListenedLock
        self.client = client
        self.path = path.rstrip("/")
        self.identifier = identifier
        self.kazoo_lock = lock_class(client, self.path, identifier, on_event)
        self.token: int | None = None
        self.sequence: int | None = None
        self.is_suspended = False
        self._emit = on_event
        self._held = False

    @property
    def is_held(self) -> bool:
        return self._held

    @property
    def node(self) -> str | None:
        return self.kazoo_lock.node

    def acquire(self, timeout: float | None = None) -> int:
        """Block until held; return the token. Raises LockTimeout (labkit's) after ``timeout``."""
        if self._held:
            raise LockError(f"this lock object already holds {self.path!r}; release() it first "
                            "(kazoo's Lock is not re-entrant: a second acquire would wait forever)")
        started = time.monotonic()
        self._emit("requested", path=self.path)
        self.client.add_listener(self._on_connection_state)
        self.kazoo_lock.acquiring = True
        try:
            got_it = self.kazoo_lock.acquire(timeout=timeout)
        except KazooLockTimeout:
            got_it = False
        except BaseException:
            self.client.remove_listener(self._on_connection_state)
            raise
        finally:
            self.kazoo_lock.acquiring = False
        if not got_it:                            # kazoo already deleted its node
            waited = time.monotonic() - started
            self.client.remove_listener(self._on_connection_state)
            self._emit("timeout", waited=waited)
            raise LockTimeout(self.path, waited)
        node = f"{self.path}/{self.kazoo_lock.node}"
        try:
            stat = self.client.exists(node)       # kazoo's Lock keeps no Stat: one more round trip
        except BaseException:
            self.release()
            raise
        if stat is None:
            self.release()
            raise SessionExpired(f"kazoo's node {node} vanished as it acquired (the session ended): "
                                 "start a new session (KazooClient) to queue again")
        self._held = True
        self.token, self.sequence = stat.czxid, sequence_of(node)
        self._emit("acquired", token=self.token, node=node, sequence=self.sequence)
        return self.token

    def _on_connection_state(self, state: str) -> bool:
        # Runs on kazoo's connection thread: only flags and events here.
        if state == KazooState.SUSPENDED:
            self.is_suspended = True
            self._emit("suspended", path=self.path)
        elif state == KazooState.CONNECTED and self.is_suspended:
            self.is_suspended = False
            self._emit("reconnected", path=self.path)
        elif state == KazooState.LOST:
            self.is_suspended = False
            if self._held:
                self._held, token, self.token = False, self.token, None
                self._emit("lost", reason="session expired: the server deleted kazoo's node", token=token)
            return True                           # kazoo removes this listener
        return False

    def release(self) -> None:
        """Delete the node (idempotent); kazoo retries while the connection is down."""
        was_held, token = self._held, self.token
        self.kazoo_lock.release()
        self.client.remove_listener(self._on_connection_state)
        self._held, self.token, self.sequence = False, None, None
        if was_held:
            self._emit("released", token=token)

    def contenders(self) -> list[str]:
        """kazoo's view of the queue: the identifiers, holder first."""
        return self.kazoo_lock.contenders()
