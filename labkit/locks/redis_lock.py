"""A Redis lock: ``SET key value NX PX ttl`` to take it, Lua compare-and-act to let go.

It is NOT a quorum lock. Know what that costs before you rely on it:

* One primary decides. If it crashes without persistence the lock simply vanishes. If
  it restarts from an old snapshot, a lock that was *released* after the snapshot comes
  back, with the rest of its TTL, and keeps everyone out though nobody holds it
  (notebook 01 shows it). An *expired* key does not come back: Redis skips keys whose
  absolute expiry time has passed when it loads a snapshot.
* Replication is asynchronous: if the primary dies before the replica has the key and
  the replica is promoted, a second client can be granted the same lock (two holders).
* Redis knows nothing about client liveness. A dead holder's lock stays until its TTL
  runs out, and a live holder that pauses longer than the TTL loses the lock without
  being told: it must check ``is_held`` or ``extend`` before acting, and even that
  check can be stale by the time it writes.
* There is no fencing token, so ``acquire`` returns None (see docs/RECIPES.md). The
  random value identifies the holder for release and extend, but it is not monotonic:
  a resource cannot compare two random values to tell the newer holder from the older,
  which is what fencing needs. A ZooKeeper node's czxid and an etcd key's create
  revision can.
* There is no queue and no watch: waiters poll, so there is no FIFO order and no
  wakeup to count (this recipe never emits "woke").

What can fail: ``LockTimeout`` from ``acquire(timeout=...)``; redis.ConnectionError or
redis.TimeoutError from any call when the server is unreachable or paused (for
``release`` that means the key stays until its TTL).
"""
from __future__ import annotations

import secrets
import time

import redis

from labkit.record.events import EventSink, ignore_events
from labkit.locks.contract import HeldInside
from labkit.locks.errors import LockTimeout

# Compare-and-act in one script: between a GET and a DEL from the client, the key could
# expire and be taken by someone else, and we would delete their lock.
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"
_EXTEND = ("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) "
           "else return 0 end")


class RedisLock(HeldInside):
    """``acquire()`` → None (no fencing token), ``release()``, ``extend(ttl_ms)``, ``is_held``.

    The key is ``name`` itself, so ``redis-cli GET name`` shows who holds it.
    """

    def __init__(self, client: redis.Redis, name: str, ttl_ms: int = 5000, identifier: str = "",
                 on_event: EventSink = ignore_events):
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive (got {ttl_ms}): "
                             "without a TTL a dead holder's lock would stay forever")
        self.client = client
        self.name = name
        self.ttl_ms = ttl_ms
        self.identifier = identifier or secrets.token_hex(4)
        self.on_event = on_event
        self.value: str | None = None  # the random value of my current hold
        self._release = client.register_script(_RELEASE)
        self._extend = client.register_script(_EXTEND)

    @property
    def token(self) -> None:
        """Always None: a Redis lock has no fencing token (see the module docstring)."""
        return None

    def acquire(self, timeout: float | None = None, retry_interval: float = 0.01) -> None:
        """Poll ``SET NX PX`` until it succeeds; returns None (there is no token).
        Raises LockTimeout after ``timeout`` seconds (None waits forever)."""
        if self.value is not None:
            raise RuntimeError(f"{self.identifier} already holds {self.name!r}; release it before acquiring again")
        started = time.monotonic()
        self.on_event("requested", name=self.name)
        # identifier first so that a learner reading the key sees who holds it
        value = f"{self.identifier}:{secrets.token_hex(16)}"
        while not self.client.set(self.name, value, nx=True, px=self.ttl_ms):
            waited = time.monotonic() - started
            if timeout is not None and waited >= timeout:
                self.on_event("timeout", waited=waited)
                raise LockTimeout(self.name, waited)
            # Redis cannot tell us when the key goes away: polling is all there is
            time.sleep(retry_interval if timeout is None else min(retry_interval, max(0.0, timeout - waited)))
        self.value = value
        self.on_event("acquired", token=None, value=value, ttl_ms=self.ttl_ms)
        return None

    def release(self) -> bool:
        """Delete the key if it still holds my value. True if I let go of a lock I held;
        False if I held nothing, or the key had expired or belonged to someone else
        (then "lost" is emitted: my hold had already ended without my knowing)."""
        value, self.value = self.value, None
        if value is None:
            return False
        if self._release(keys=[self.name], args=[value]):
            self.on_event("released", token=None)
            return True
        self.on_event("lost", reason="the key had expired (TTL) or was taken over before release")
        return False

    def extend(self, ttl_ms: int | None = None) -> bool:
        """Reset the TTL to ``ttl_ms`` (default: the lock's ttl_ms) if I still hold it.
        False (and "lost") if the key expired meanwhile: stop acting as the holder."""
        if self.value is None:
            return False
        if self._extend(keys=[self.name], args=[self.value, ttl_ms or self.ttl_ms]):
            return True
        self.value = None
        self.on_event("lost", reason="the key had expired (TTL) or was taken over before extend")
        return False

    @property
    def is_held(self) -> bool:
        """Asks the server whether the key still holds my value (emits "lost" if not).
        The answer can be stale a moment later: the TTL keeps running."""
        if self.value is None:
            return False
        current = self.client.get(self.name)
        if isinstance(current, bytes):
            current = current.decode()
        if current == self.value:
            return True
        self.value = None
        self.on_event("lost", reason="the key expired (TTL) or was deleted")
        return False

    def remaining_ms(self) -> int | None:
        """Milliseconds until the key expires, if I hold it (None otherwise)."""
        return self.client.pttl(self.name) if self.is_held else None

    def __repr__(self) -> str:
        return f"RedisLock(name={self.name!r}, identifier={self.identifier!r}, held={self.value is not None})"
