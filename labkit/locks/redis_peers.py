"""The Redis locks learners actually use, under labkit's events, so that the same faults can
be aimed at them: redis-py's ``Lock``, python-redis-lock (``redis_lock.Lock``, with its
auto-renewal thread) and pottery's ``Redlock``.

What can go wrong, first: exactly what goes wrong with labkit's ``RedisLock`` and ``Redlock``
(read their docstrings), because the algorithms are the same. None of the three hands out a
fencing token: each identifies its hold by a random value, which a resource cannot order.
A paused holder loses the lock without knowing; a failover can grant it twice; pottery's
Redlock grants it twice after a clock step or a forgetful restart on a majority.
python-redis-lock's renewal is a thread of the holder's process: it keeps a slow holder's
lock alive, but a paused *process* pauses the thread too, and when it wakes the lock may be
someone else's (the renewal then fails, and a "lost" event says so).

Each library runs untouched; these classes only translate: ``acquire(timeout)`` raises
labkit's ``LockTimeout`` and returns None (no token), ``release()`` emits "released", or
"lost" when the lock had already gone. What can fail: ``LockTimeout``; ``ValueError`` for a
TTL a library cannot take; redis-py's errors when a server does not answer.
"""
from __future__ import annotations

import math
import secrets
import time
from typing import Sequence

import pottery
import redis
import redis.lock
import redis_lock

from labkit.locks.contract import HeldInside
from labkit.locks.errors import LockTimeout
from labkit.locks.redlock import OBSERVE_TIMEOUT_MS, instance_clients
from labkit.record.events import EventSink, ignore_events


class RedisPyLock(HeldInside):
    """redis-py's ``Lock`` (``SET NX PX``, polled every ``sleep`` s; Lua compare-and-delete).
    The key is ``name``; its value ``identifier:<random>`` (redis-py's ``token=``)."""

    library = "redis-py Lock"

    def __init__(self, client: redis.Redis, name: str, ttl_ms: int = 5000, identifier: str = "",
                 on_event: EventSink = ignore_events, sleep: float = 0.01):
        self.client = client
        self.name = name
        self.ttl_ms = ttl_ms
        self.identifier = identifier or secrets.token_hex(4)
        self.on_event = on_event
        self.peer = redis.lock.Lock(client, name, timeout=ttl_ms / 1000, sleep=sleep)

    token = None  # no fencing token: the value is random

    @property
    def value(self) -> str | None:
        held = self.peer.local.token
        return held.decode() if isinstance(held, bytes) else held

    def acquire(self, timeout: float | None = None) -> None:
        started = time.monotonic()
        self.on_event("requested", name=self.name)
        if not self.peer.acquire(blocking_timeout=timeout, token=f"{self.identifier}:{secrets.token_hex(16)}"):
            waited = time.monotonic() - started
            self.on_event("timeout", waited=waited)
            raise LockTimeout(self.name, waited)
        self.on_event("acquired", token=None, value=self.value, ttl_ms=self.ttl_ms)

    def release(self) -> bool:
        if self.value is None:
            return False
        try:
            self.peer.release()
        except redis.exceptions.LockNotOwnedError:
            self.on_event("lost", reason="redis-py: the key had expired or was taken over before release")
            return False
        self.on_event("released", token=None)
        return True

    @property
    def is_held(self) -> bool:
        return self.peer.owned()


class _ReportingRenewal(redis_lock.Lock):
    """python-redis-lock as shipped; its renewal thread calls the public ``extend``, and a
    renewal that finds the key gone or someone else's is reported before it raises."""

    on_lost: EventSink = ignore_events

    def extend(self, expire=None):
        try:
            super().extend(expire)
        except redis_lock.NotAcquired:
            self.on_lost("lost", reason="python-redis-lock's renewal found the key expired or taken over")
            raise


class PythonRedisLock(HeldInside):
    """python-redis-lock's ``Lock`` with ``auto_renewal=True``: ``SET NX EX`` (whole seconds),
    waiters block on a signal list (``BLPOP``) that a release pushes to, and a daemon thread
    extends the key every 2/3 of the TTL. The key is ``lock:<name>``."""

    library = "python-redis-lock"

    def __init__(self, client: redis.Redis, name: str, ttl_ms: int = 5000, identifier: str = "",
                 on_event: EventSink = ignore_events, auto_renewal: bool = True):
        if ttl_ms < 1000 or ttl_ms % 1000:
            raise ValueError(f"python-redis-lock takes its expiry in whole seconds (got ttl_ms={ttl_ms}): "
                             "use 1000, 2000, ...")
        self.client = client
        self.name = name
        self.ttl_ms = ttl_ms
        self.identifier = identifier or secrets.token_hex(4)
        self.on_event = on_event
        self.peer = _ReportingRenewal(client, name, expire=ttl_ms // 1000, auto_renewal=auto_renewal,
                                      id=f"{self.identifier}:{secrets.token_hex(16)}")
        self.peer.on_lost = on_event
        self.value: str | None = None
        self.key = f"lock:{name}"

    token = None

    def acquire(self, timeout: float | None = None) -> None:
        """A waiter blocks in ``BLPOP`` on the signal list, which a release pushes to. A key
        that *expires* pushes nothing: the library retries its ``SET`` only when the BLPOP
        times out, after its own TTL without a timeout, or after the whole timeout with one.
        So that a timeout does not make a waiter blind for all of it, this waits in calls of
        at most the TTL each (what the library does without a timeout) until ``timeout``."""
        started = time.monotonic()
        self.on_event("requested", name=self.name)
        while True:
            waited = time.monotonic() - started
            left = None if timeout is None else timeout - waited
            if left is not None and left <= 0:
                self.on_event("timeout", waited=waited)
                raise LockTimeout(self.name, waited)
            # the library takes whole seconds, at least 1, and no timeout longer than the TTL
            seconds = self.ttl_ms // 1000 if left is None else max(1, min(math.ceil(left), self.ttl_ms // 1000))
            if self.peer.acquire(blocking=True, timeout=seconds):
                break
        self.value = self.peer.id
        self.on_event("acquired", token=None, value=self.value, ttl_ms=self.ttl_ms)

    def release(self) -> bool:
        if self.value is None:
            return False
        self.value = None
        try:
            self.peer.release()
        except redis_lock.NotAcquired:
            self.on_event("lost", reason="python-redis-lock: the key had expired or was taken over before release")
            return False
        self.on_event("released", token=None)
        return True

    @property
    def is_held(self) -> bool:
        return self.value is not None and self.peer.get_owner_id() == self.value


class PotteryRedlock(HeldInside):
    """pottery's ``Redlock``: ``SET NX PX`` on every instance at once (a thread per instance),
    held once a majority said yes within the validity time; the key is ``redlock:<name>``.

    pottery tells its caller only "acquired"; ``valid_until`` applies its own arithmetic (TTL
    minus 1 % minus 2 ms) from the start of ``acquire``, on this process's monotonic clock,
    which can only end it earlier than pottery's; ``acquired_on`` asks the instances now."""

    library = "pottery Redlock"

    def __init__(self, clients: Sequence[redis.Redis], name: str, ttl_ms: int = 5000, identifier: str = "",
                 on_event: EventSink = ignore_events):
        self.clients = list(clients)
        self.endpoints = [f"{c.connection_pool.connection_kwargs['host']}:{c.connection_pool.connection_kwargs['port']}"
                          for c in self.clients]
        self.name = name
        self.key = f"redlock:{name}"
        self.ttl_ms = ttl_ms
        self.identifier = identifier or secrets.token_hex(4)
        self.on_event = on_event
        self.peer = pottery.Redlock(key=name, masters=self.clients, auto_release_time=ttl_ms / 1000)
        self.drift_ms = ttl_ms * 0.01 + 2
        self.valid_until = 0.0
        self.held = False

    @classmethod
    def connect(cls, endpoints: Sequence[str], name: str, auth: dict | None = None, **options) -> "PotteryRedlock":
        """On the same clients as labkit's Redlock (``instance_clients``: 50 ms per instance, no retry)."""
        return cls(instance_clients(endpoints, auth=auth), name, **options)

    token = None

    @property
    def value(self) -> str | None:
        # pottery keeps the random value of the current hold in a private slot, nowhere else
        return self.peer._uuid if self.held else None

    @property
    def is_valid(self) -> bool:
        return self.held and time.monotonic() < self.valid_until

    @property
    def acquired_on(self) -> list[str]:
        """The instances that have my value right now (pottery does not say who voted), read
        with an observer's patience (``OBSERVE_TIMEOUT_MS``), not the 50 ms of a vote."""
        mine = []
        for endpoint, client in zip(self.endpoints, self.clients):
            given = client.connection_pool.connection_kwargs
            login = {key: given[key] for key in ("username", "password") if given.get(key)}
            observer, = instance_clients([endpoint], OBSERVE_TIMEOUT_MS, auth=login)
            try:
                if self.held and observer.get(self.key) == self.peer._uuid.encode():
                    mine.append(endpoint)
            except (redis.RedisError, OSError):
                pass
            finally:
                observer.close()
        return mine

    def acquire(self, timeout: float | None = None) -> None:
        started = time.monotonic()
        self.on_event("requested", name=self.name)
        if not self.peer.acquire(blocking=True, timeout=-1 if timeout is None else timeout):
            waited = time.monotonic() - started
            self.on_event("timeout", waited=waited)
            raise LockTimeout(self.name, waited)
        self.held = True
        self.valid_until = started + (self.ttl_ms - self.drift_ms) / 1000
        self.on_event("acquired", token=None, value=self.value, ttl_ms=self.ttl_ms,
                      validity_ms=round((self.valid_until - time.monotonic()) * 1000, 3))

    def release(self) -> bool:
        if not self.held:
            return False
        self.held, self.valid_until = False, 0.0
        try:
            self.peer.release()
        except pottery.ReleaseUnlockedLock:
            self.on_event("lost", reason="pottery: a majority no longer had my value at release")
            return False
        self.on_event("released", token=None)
        return True

    @property
    def is_held(self) -> bool:
        return self.held and self.peer.locked() > 0

    def close(self) -> None:
        for client in self.clients:
            client.close()
