"""A holder frozen past its lease: the one schedule behind notebook 04's pause (ZooKeeper,
etcd), 08's Redlock pause and 01's library pauses (redis-py, python-redis-lock, pottery).

client-1, a lock client process of ``recipe``, acquires and writes "written by the first
holder" to a FencedStore; it is frozen (SIGSTOP) for ``pause`` seconds, longer than its
session timeout / lease TTL; a successor takes the lock meanwhile and writes "written by the
new holder"; the write client-1 was about to make ("late write by the old holder") is sent
while it is frozen, so it runs the moment the process resumes. The successor is client-2, a
second process of the same recipe, or a lock in this process (anything with
``acquire(timeout=)``, ``identifier`` and ``token``: a Redis lock, a Redlock).

``frozen_holder`` is a context manager: its body runs once the late write is answered, with
the client processes still up (to release, read the servers or wait for "lost"); on the way
out the processes stop and ``FrozenHolder.writes`` is the store's log.

What can fail: ``labkit.clients.ClientError`` / ``ClientTimeout`` when a client process does
not start or answer; the successor's ``LockTimeout`` / ``ClientTimeout`` when it never gets
the lock (the pause was not past the lease).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from labkit.clients import LockClient, LockClients, spawn_clients
from labkit.record.fencing import FencedStore, StoreWrite
from labkit.record.history import History

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

FIRST_WRITE = "written by the first holder"
NEW_HOLDER_WRITE = "written by the new holder"
LATE_WRITE = "late write by the old holder"


@dataclass
class FrozenHolder:
    """What happened: the tokens (None where the recipe has none), when client-1 was frozen
    and when its late write was answered (``time.time()``), how long the successor waited for
    the lock from the freeze (seconds), whether the store took the late write, and the store's
    log (filled once the ``frozen_holder`` block is left)."""

    name: str
    history: History
    store: FencedStore
    pause: float
    clients: LockClients | None = None
    old_token: Any = None
    new_token: Any = None
    frozen_at: float = 0.0
    successor_waited: float = 0.0
    late_answered_at: float = 0.0
    late_write_accepted: bool = False
    writes: list[StoreWrite] = field(default_factory=list)

    @property
    def frozen(self) -> LockClient:
        """client-1, the holder that was frozen."""
        if self.clients is None:
            raise RuntimeError("the client processes are up only inside the frozen_holder block")
        return self.clients[0]

    @property
    def new_holder(self) -> LockClient:
        """client-2, the successor, when it is a client process (no ``successor`` given)."""
        if self.clients is None or len(self.clients) < 2:
            raise RuntimeError("client-2 runs only inside a frozen_holder block without a successor")
        return self.clients[1]


@contextlib.contextmanager
def frozen_holder(lab: Lab, recipe: str, name: str, pause: float, successor: Any = None, fenced: bool = False,
                  history: History | None = None, **options: Any) -> Iterator[FrozenHolder]:
    """The schedule of the module docstring on lock ``name``, with a store ``store:<name>`` on
    the lab's Redis (``fenced`` or not). ``successor``: a lock in this process (see the module
    docstring); None: client-2, a second process of ``recipe``. ``options`` go to
    ``spawn_clients`` (``ttl=``, ``session_timeout=``)."""
    history = history if history is not None else History()
    store = FencedStore(lab.redis.client(), f"store:{name}", fenced=fenced)
    store.reset()
    run = FrozenHolder(name, history, store, pause)
    try:
        with spawn_clients(lab, recipe, n=1 if successor is not None else 2, name=name, history=history,
                           store=store, **options) as clients:
            run.clients = clients
            frozen = clients[0]
            run.old_token = frozen.acquire(timeout=10)
            frozen.write(FIRST_WRITE)
            frozen.pause(pause)
            run.frozen_at, frozen_at = time.time(), time.monotonic()
            if successor is None:
                run.new_token = clients[1].acquire(timeout=pause + 10)
                run.successor_waited = time.monotonic() - frozen_at
                clients[1].write(NEW_HOLDER_WRITE)
            else:
                run.new_token = successor.acquire(timeout=pause + 10)
                run.successor_waited = time.monotonic() - frozen_at
                store.write(successor.identifier, successor.token, NEW_HOLDER_WRITE)
            # sent while client-1 is frozen: it runs the moment the process resumes
            run.late_write_accepted = frozen.wait_reply(frozen.send("write", value=LATE_WRITE), timeout=pause + 10)
            run.late_answered_at = time.time()
            yield run
        run.writes = store.writes()
        store.reset()
    finally:
        run.clients = None
        store.client.close()
