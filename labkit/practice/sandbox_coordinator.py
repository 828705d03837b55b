"""The server's side of the sandbox (sandbox.py): the part of ZooKeeper the lock recipe
touches, held in memory. One parent node, its ephemeral sequential children, sessions, and
one-shot watches. A fired watch is not delivered at once: its ``Notification`` waits in
``pending``, in the order the coordinator fired it, until the sandbox delivers it, so every
run is the same.

What it does not model: connection loss, a lost create reply, time (sessions end only when
told to), and anything but one parent.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

PARENT = "/locks/resource"


@dataclass(frozen=True)
class Notification:
    """A fired watch, waiting in the queue to be delivered to ``client``."""

    client: str
    watched: str            # a node name, or "parent"
    node: str               # the child that changed
    change: str             # "created" or "deleted"
    release: "Release | None"


@dataclass
class Release:
    """The holder's node went away (released or session expired)."""

    client: str
    node: str
    how: str


class Coordinator:
    """The part of ZooKeeper the recipe touches: one parent, its ephemeral sequential
    children, sessions, and one-shot watches whose notifications wait in a queue."""

    def __init__(self, parent: str = PARENT):
        self.parent = parent
        self.owner_of: dict[str, str] = {}           # child name -> owning session
        self.cversion = 0                            # the parent's child version: creates and deletes
        self.creations = 0                           # children ever created: it names the next child
        self.node_watchers: dict[str, list[str]] = {}
        self.parent_watchers: list[str] = []
        self.pending: deque[Notification] = deque()

    def children(self) -> list[str]:
        # Sort by the sequence suffix, never by the whole name: prefixes may differ.
        return sorted(self.owner_of, key=lambda name: int(name[-10:]))

    def create_sequential(self, session: str, prefix: str = "lock-") -> str:
        # Like ZooKeeper 3.8 (checked on the real server: tests/practice/test_zookeeper_sequence.py),
        # the suffix counts the children ever created under the parent, and deletes do not
        # count: create 2, delete 1, and the next is ...0000000002, no gap. (The parent's
        # cversion, which a client reads in its Stat, counts deletes too: it is not the suffix.)
        name = f"{prefix}{self.creations:010d}"
        self.creations += 1
        self.owner_of[name] = session
        self._changed(name, "created", None)
        return name

    def watch_node(self, name: str, session: str) -> None:
        watchers = self.node_watchers.setdefault(name, [])
        if session not in watchers:                   # one watch per client and path, as in ZooKeeper
            watchers.append(session)

    def watch_parent(self, session: str) -> None:
        if session not in self.parent_watchers:
            self.parent_watchers.append(session)

    def delete(self, name: str, release: Release | None = None) -> None:
        del self.owner_of[name]
        for session in self.node_watchers.pop(name, []):   # one-shot: fired watches are gone
            self.pending.append(Notification(session, name, name, "deleted", release))
        self._changed(name, "deleted", release)

    def close_session(self, session: str, release: Release | None = None) -> None:
        """Ephemeral nodes die with their session, and so do its watches."""
        for watchers in self.node_watchers.values():
            if session in watchers:
                watchers.remove(session)
        if session in self.parent_watchers:
            self.parent_watchers.remove(session)
        for name in [n for n, owner in self.owner_of.items() if owner == session]:
            self.delete(name, release)

    def _changed(self, name: str, change: str, release: Release | None) -> None:
        self.cversion += 1
        watchers, self.parent_watchers = self.parent_watchers, []
        for session in watchers:
            self.pending.append(Notification(session, "parent", name, change, release))
