"""A kazoo client that tells the checker what a learner's lock does with it.

The learner's code gets a ``RecordingClient`` and uses it as a ``KazooClient``: every call
goes to the real client and the real server. On the way it records the events the
checker counts with (``labkit.record.events``): "created" for a sequential node, "watch"
when a watch is set (``what="parent"`` for a children watch, ``"predecessor"`` for a watch
on a numbered node, ``"key"`` on a node without a number), "woke" when a watch fires. So
the learner writes plain kazoo code and need not report anything. Queue nodes are read as every recipe here reads them
(``labkit.locks.zookeeper.sequence_of``): a name ending in ``lock-`` plus ZooKeeper's 10 digits.

What can fail: whatever the kazoo call raises is raised unchanged.
"""
from __future__ import annotations

import threading
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.protocol.states import Callback, EventType, KazooState, WatchedEvent
from kazoo.recipe.lock import Lock as KazooLock

from labkit.locks.zookeeper import sequence_of
from labkit.record.events import EventSink, ignore_events


def _node_watch(path: str) -> str:
    # A numbered node is one queue entry: its deletion is one hand-off ("predecessor"). A
    # node without a number is one shared key that every holder re-creates ("key"): the
    # history then counts its watch like a herd's.
    return "predecessor" if sequence_of(path) is not None else "key"


class RecordingClient:
    """Forwards everything to ``raw`` (a started KazooClient) and records the lock's steps.

    ``armed`` is True while a watch this client set has not fired yet (the server holds
    it); ``ever_armed`` once it has set any. ``nodes`` maps each sequential node it made
    to whether it was ephemeral.
    """

    def __init__(self, raw: Any, on_event: EventSink = ignore_events):
        self.raw = raw
        self._emit = on_event
        self._guard = threading.Lock()
        self._arming = 0
        self._fired: set[int] = set()
        self._outstanding: dict[int, Any] = {}   # watches set and not fired yet: number -> callback
        self.armed = False
        self.ever_armed = False
        self.nodes: dict[str, bool] = {}
        self.reads_without_watch = 0              # since my last create: a poller makes many
        self.last_woken_by: str | None = None

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.raw, attribute)

    def Lock(self, path, identifier=None, extra_lock_patterns=()):  # noqa: N802 (kazoo's name)
        """kazoo's own Lock recipe, on this client (the real client's ``Lock`` would bypass it)."""
        return KazooLock(self, path, identifier, extra_lock_patterns)

    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False, makepath=False,
               include_data=False):
        result = self.raw.create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence,
                                 makepath=makepath, include_data=include_data)
        created = result[0] if include_data else result
        if sequence:
            self.reads_without_watch = 0
            self.nodes[created] = bool(ephemeral)
            self._emit("created", node=created, sequence=sequence_of(created), ephemeral=bool(ephemeral))
        return result

    def get_children(self, path, watch=None, include_data=False):
        if watch is None:
            self.reads_without_watch += 1
            return self.raw.get_children(path, include_data=include_data)
        return self._watched(self.raw.get_children, path, watch, "parent", include_data=include_data)

    def exists(self, path, watch=None):
        if watch is None:
            return self.raw.exists(path)
        return self._watched(self.raw.exists, path, watch, _node_watch(path))

    def get(self, path, watch=None):
        if watch is None:
            return self.raw.get(path)
        return self._watched(self.raw.get, path, watch, _node_watch(path))

    def _watched(self, call, path: str, watch, what: str, **options):
        with self._guard:
            self._arming += 1
            number = self._arming
        self._emit("watch", target=path, what=what)

        def on_watch(event):
            with self._guard:
                self._fired.add(number)
                self._outstanding.pop(number, None)
                self.armed = False
            if event.type != EventType.NONE:      # NONE: the connection or session changed, not the node
                self.last_woken_by = event.path
                self._emit("woke", reason=str(event.type).lower(), target=event.path)
            watch(event)

        with self._guard:
            self._outstanding[number] = on_watch
        result = call(path, watch=on_watch, **options)
        with self._guard:
            # the watch may have fired already, on kazoo's callback thread
            if number not in self._fired:
                self.armed = self.ever_armed = True
        return result

    @property
    def queued(self) -> bool:
        """Waits in the queue now: on a watch, or (a poller) listing the children again and again."""
        return self.armed or (bool(self.nodes) and self.reads_without_watch >= 3)

    def wake_waiters(self) -> None:
        """Fire every watch still outstanding with a NONE event, as kazoo does when a session
        ends. ``stop()`` shuts kazoo's callback thread down before it can, and a learner's
        code blocked on such a watch would otherwise wait for ever."""
        with self._guard:
            outstanding, self._outstanding = list(self._outstanding.values()), {}
        for on_watch in outstanding:
            on_watch(WatchedEvent(EventType.NONE, KazooState.LOST, None))

    def deliver_pending_notifications(self, timeout: float) -> bool:
        """Return once every watch notification the server sent this client before now has
        been handled. The server answers this client's requests in order and sends a
        notification before the answer to any later request; kazoo runs callbacks in
        order on one thread, so a marker queued after the answer runs after them all.
        False if the client cannot reach the server or the marker did not run in time."""
        try:
            self.raw.exists("/")
        except KazooException:
            return False
        handled = threading.Event()
        self.raw.handler.dispatch_callback(Callback("watch", handled.set, ()))
        return handled.wait(timeout)
