"""Etcd3ReferenceLock: python-etcd3's own ``Lock`` (``client.lock(name, ttl)``) under
labkit's instrumentation, so that graphs can compare it with EtcdMutex. A lesson, not a
tool to build on. What goes wrong with it, first:

- The herd: every waiter watches the same key, ``/locks/<name>``. One release wakes all
  N - 1 waiters; they all race a transaction, one wins, the others watch again.
- No queue: whoever's transaction lands first wins, not whoever came first.
- Each attempt grants a fresh lease of ``ttl`` seconds and nothing refreshes it: a holder
  that holds longer than ``ttl`` loses the lock silently unless it calls ``refresh()``.
  Failed attempts leave their unused lease behind to expire.

The token is the revision at which this holder created the key (its create revision).
"""
from __future__ import annotations

import threading
import time

import etcd3
from etcd3 import events, exceptions

from labkit.record.events import EventSink, ignore_events
from labkit.locks.contract import HeldInside
from labkit.locks.errors import LockTimeout


class _InstrumentedEtcd3Lock(etcd3.Lock):
    """etcd3.Lock with its wait re-written line by line (python3-etcd3 0.13) to report
    the watch and each wakeup; the behaviour is unchanged."""

    def __init__(self, name: str, ttl: int, etcd_client: etcd3.Etcd3Client, on_event: EventSink):
        super().__init__(name, ttl=ttl, etcd_client=etcd_client)
        self.on_event = on_event

    def _try_acquire(self) -> bool:
        acquired = super()._try_acquire()
        if acquired:
            self.on_event("created", key=self.key, revision=self.revision)
        return acquired

    def _wait_delete_event(self, timeout):
        try:
            event_iter, cancel = self.etcd_client.watch(self.key, start_revision=self.revision + 1)
        except exceptions.WatchTimedOut:
            return
        # from_revision: the watch sees every change after the key this try found (a
        # harness waits for it to pass the newest holder's token: labkit.harness.handoff)
        self.on_event("watch", target=self.key, what="key", from_revision=self.revision + 1)

        if timeout is not None:
            timer = threading.Timer(timeout, cancel)
            timer.start()
        else:
            timer = None

        for event in event_iter:
            if isinstance(event, events.DeleteEvent):
                self.on_event("woke", reason="deleted", target=self.key)
                if timer is not None:
                    timer.cancel()

                cancel()
                break


class Etcd3ReferenceLock(HeldInside):
    """python-etcd3's Lock with the recipe contract of labkit.locks (see RECIPES.md)."""

    def __init__(self, client: etcd3.Etcd3Client, name: str, ttl: int = 60, identifier: str = "",
                 on_event: EventSink = ignore_events):
        self.client = client
        self.name = name
        self.ttl = ttl
        self.identifier = identifier
        self.on_event = on_event
        self.etcd3_lock = _InstrumentedEtcd3Lock(name, ttl, client, on_event)
        self._token: int | None = None

    @property
    def key(self) -> str:
        return self.etcd3_lock.key

    def acquire(self, timeout: float | None = None) -> int:
        """Block until held; return the token (the key's create revision). Raises
        LockTimeout, or python-etcd3's connection errors."""
        started = time.monotonic()
        self.on_event("requested", key=self.key)
        if not self.etcd3_lock.acquire(timeout=timeout):
            waited = time.monotonic() - started
            self.on_event("timeout", waited=waited)
            raise LockTimeout(self.name, waited)
        self._token = self.etcd3_lock.revision
        self.on_event("acquired", token=self._token, key=self.key)
        return self._token

    def release(self) -> None:
        """Delete the key if it is still ours. Idempotent. If the key was no longer ours
        (its lease expired: nothing refreshed it), emits ``lost`` instead of ``released``."""
        if self._token is None:
            return
        token, self._token = self._token, None
        if self.etcd3_lock.release():
            self.on_event("released", token=token)
        else:
            self._announce_lost(token)

    def refresh(self) -> None:
        """Extend the lease by ``ttl`` seconds: the manual step this lock needs."""
        self.etcd3_lock.refresh()

    @property
    def token(self) -> int | None:
        return self._token

    @property
    def is_held(self) -> bool:
        """Asks the server (one get): python-etcd3's Lock keeps no local state to tell it
        that its lease ran out. Emits ``lost`` the first time it finds the key gone."""
        if self._token is None:
            return False
        if self.etcd3_lock.is_acquired():
            return True
        token, self._token = self._token, None
        self._announce_lost(token)
        return False

    def _announce_lost(self, token: int) -> None:
        self.on_event("lost", reason=f"the key was gone or no longer ours: its lease ({self.ttl} s, never "
                                     "refreshed) expired", key=self.key, token=token)

    def __repr__(self) -> str:
        state = f"acquired, token {self._token}" if self._token is not None else "not acquired"
        return f"Etcd3ReferenceLock({self.name!r}, ttl={self.ttl}, {state})"
