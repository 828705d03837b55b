"""Redlock: one lock over N independent Redis primaries, held while a majority agrees.

Written to the published algorithm (redis.io, "Distributed Locks with Redis"). It
survives the crash of a minority of instances, but it is not a consensus lock and it has
no fencing token. What can go wrong:

* A clock jump on the instances. Redis expires keys by its own wall clock: a step forward
  on a majority expires the key early there, and a second client gets its majority while
  the first still counts on its validity time. Two holders.
* A restart without fsync. An instance that crashes and comes back without the key (no
  AOF, or ``appendfsync everysec`` losing its last second) can vote for a second client.
  With 5 instances, A holding r1 r2 r3 and r3 forgetting, B wins r3 r4 r5: two holders.
  The algorithm's own remedies: keep a crashed instance down for longer than the TTL, or
  ``appendfsync always``.
* A pause past the validity time (GC, SIGSTOP, swapping). The holder wakes believing it
  holds while another client may hold. The random value identifies a holder but is not
  monotonic, so the resource cannot reject the late write: check ``is_valid`` before each
  write, and know that the check can be stale by the time the write lands.
* Drift between the client's clock and the instances' is only bounded by the allowance
  (1 % of the TTL plus 2 ms). Elapsed time is measured on the client's monotonic clock.

The recipe, step by step:
1. Draw a random value and note the (monotonic) start time.
2. ``SET name value NX PX ttl`` on every instance in turn, each with a short socket
   timeout (far below the TTL), so that a dead or frozen instance costs milliseconds.
3. Held iff a majority (N // 2 + 1) said OK and the time spent is below the TTL; the
   lock is valid for ``TTL − elapsed − drift`` counted from the END of the acquire, that
   is until ``start + TTL − drift``: the keys began to expire when they were set, after
   the start, so the elapsed time is subtracted once (``valid_until``).
4. Otherwise release on every instance (also those that said no: a yes can be lost on
   the way back) and retry after a random delay, so that clients that collided once do
   not split the votes again in lockstep.
5. Release: on every instance, delete the key only if it still holds my value (Lua).

What can fail: ``LockTimeout`` from ``acquire(timeout=...)``; ``ValueError`` for bad
inputs (fewer than 3 instances, an instance twice, a TTL the drift eats, clients whose
timeouts or retries could stall an acquire past the TTL). An instance that refuses,
times out or errs counts as a "no" vote and never raises.
"""
from __future__ import annotations

import random
import secrets
import time
from typing import Any, Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labkit.record.events import EventSink, ignore_events
from labkit.locks.contract import HeldInside
from labkit.locks.errors import LockTimeout
from labkit.servers.secret import login_for

# Same compare-and-delete as RedisLock: never delete a key someone else now holds.
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"
INSTANCE_TIMEOUT_MS = 50  # for connect and for the reply, per instance; far below a TTL of seconds
OBSERVE_TIMEOUT_MS = 2000  # for reading what the instances hold (lessons, tests): an observer may wait


def instance_clients(endpoints: Sequence[str], timeout_ms: float = INSTANCE_TIMEOUT_MS,
                     auth: dict | None = None) -> list[redis.Redis]:
    """One client per "host:port", each giving up after ``timeout_ms`` with no retry:
    redis-py's default client retries a refused connection for seconds, which would
    spend a whole TTL on one dead instance. auth: ``lab.redlock.auth``; None finds the
    private lab of this user at those addresses and logs in to it."""
    clients = []
    for endpoint in endpoints:
        host, port = endpoint.rsplit(":", 1)
        login = login_for(endpoint, "redis") if auth is None else auth
        clients.append(redis.Redis(host=host, port=int(port), socket_timeout=timeout_ms / 1000,
                                   socket_connect_timeout=timeout_ms / 1000, retry=Retry(NoBackoff(), 0), **login))
    return clients


def _endpoint(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


def _worst_wait_ms(client: redis.Redis) -> float:
    """The longest one command can take on this client before it gives up."""
    kwargs = client.connection_pool.connection_kwargs
    timeouts = (kwargs.get("socket_timeout"), kwargs.get("socket_connect_timeout"))
    if None in timeouts:
        return float("inf")
    return 1000 * sum(timeouts) * (client.get_retry().get_retries() + 1)  # connect, then wait for the reply


class Redlock(HeldInside):
    """``acquire()`` → None (no fencing token), ``release()``, ``is_held``, ``validity_ms``,
    ``valid_until``, ``is_valid``. Build it with ``Redlock.connect(lab.redlock.endpoints, name)``."""

    def __init__(self, clients: Sequence[redis.Redis], name: str, ttl_ms: int = 5000, identifier: str = "",
                 on_event: EventSink = ignore_events, retry_delay_ms: float = 50):
        if len(clients) < 3:
            raise ValueError(f"Redlock needs at least 3 independent Redis instances (got {len(clients)}): "
                             "with fewer, one crash blocks every lock; for a single instance use RedisLock")
        endpoints = [_endpoint(client) for client in clients]
        if len(set(endpoints)) != len(endpoints):
            raise ValueError(f"the same instance appears twice in {endpoints}: its vote would count twice, "
                             "and the instances must be independent")
        self.drift_ms = ttl_ms * 0.01 + 2  # clock drift allowance, plus Redis's 1 ms expiry precision
        if ttl_ms <= self.drift_ms:
            raise ValueError(f"ttl_ms={ttl_ms} leaves no validity once the drift allowance "
                             f"({self.drift_ms:.1f} ms) is taken: use a TTL of at least 100 ms")
        for endpoint, client in zip(endpoints, clients):
            if _worst_wait_ms(client) > ttl_ms / 10:
                raise ValueError(
                    f"the client for {endpoint} may wait {_worst_wait_ms(client):.0f} ms for one answer "
                    f"(connect plus reply timeouts, times its tries), more than a tenth of the {ttl_ms} ms TTL: "
                    "a frozen instance would eat the validity time. Build the clients with "
                    "instance_clients(endpoints), or Redlock.connect(endpoints, name)")
        self.clients = list(clients)
        self.endpoints = endpoints
        self.name = name
        self.ttl_ms = ttl_ms
        self.quorum = len(clients) // 2 + 1
        self.identifier = identifier or secrets.token_hex(4)
        self.on_event = on_event
        self.retry_delay_ms = retry_delay_ms
        self.value: str | None = None        # the random value of my current hold
        self.acquired_on: list[str] = []     # the instances that voted for my current hold
        self.validity_ms: float = 0.0
        self.valid_until: float = 0.0        # time.monotonic() after which I must not act as holder
        self._release = [client.register_script(_RELEASE) for client in clients]

    @classmethod
    def connect(cls, endpoints: Sequence[str], name: str, instance_timeout_ms: float = INSTANCE_TIMEOUT_MS,
                auth: dict | None = None, **options: Any) -> "Redlock":
        """A Redlock on new clients, one per "host:port" (see ``instance_clients``)."""
        return cls(instance_clients(endpoints, instance_timeout_ms, auth), name, **options)

    @property
    def token(self) -> None:
        """Always None: Redlock has no fencing token (see the module docstring)."""
        return None

    @property
    def is_valid(self) -> bool:
        """True while I hold the lock and its validity time has not run out (by my clock)."""
        return self.value is not None and time.monotonic() < self.valid_until

    @property
    def is_held(self) -> bool:
        """Asks every instance: True if a majority still has my value (emits "lost" if not).
        Unlike ``is_valid`` this sees a forgetful restart, but a moment later it can be stale."""
        if self.value is None:
            return False
        still_mine = 0
        for client in self.clients:
            try:
                still_mine += client.get(self.name) == self.value.encode()
            except (redis.RedisError, OSError):
                pass
        if still_mine >= self.quorum:
            return True
        self.value, self.valid_until = None, 0.0
        self.on_event("lost", reason=f"only {still_mine} of {len(self.clients)} instances still have my value")
        return False

    def acquire(self, timeout: float | None = None) -> None:
        """Try rounds until one wins a majority in time; returns None (there is no token).
        Raises LockTimeout after ``timeout`` seconds (None tries forever)."""
        if self.value is not None:
            raise RuntimeError(f"{self.identifier} already holds {self.name!r}; release it before acquiring again")
        started = time.monotonic()
        self.on_event("requested", name=self.name)
        while not self._one_round():              # the algorithm's retry, in plain sight for the learner
            waited = time.monotonic() - started
            if timeout is not None and waited >= timeout:
                self.on_event("timeout", waited=waited)
                raise LockTimeout(self.name, waited)
            # a random pause: two clients that split the votes must not retry in lockstep
            delay = random.uniform(0.5, 1.0) * self.retry_delay_ms / 1000
            time.sleep(delay if timeout is None else min(delay, max(0.0, timeout - waited)))
        self.on_event("acquired", token=None, value=self.value, ttl_ms=self.ttl_ms,
                      validity_ms=round(self.validity_ms, 3), instances=list(self.acquired_on))
        return None

    def _one_round(self) -> bool:
        value = f"{self.identifier}:{secrets.token_hex(16)}"
        started = time.monotonic()
        granted = [endpoint for endpoint, client in zip(self.endpoints, self.clients)
                   if self._set(client, value)]
        ended = time.monotonic()
        elapsed_ms = (ended - started) * 1000
        validity_ms = self.ttl_ms - elapsed_ms - self.drift_ms
        if len(granted) >= self.quorum and validity_ms > 0:
            self.value, self.acquired_on, self.validity_ms = value, granted, validity_ms
            # counted from the end of the acquire: ended + (TTL - elapsed - drift) = started + TTL - drift.
            # The first key was set after `started`, so no key on a majority expires before that (clocks
            # within the drift allowance); counting from `started` would subtract the elapsed time twice.
            self.valid_until = ended + validity_ms / 1000
            return True
        self._unlock_everywhere(value)
        return False

    def _set(self, client: redis.Redis, value: str) -> bool:
        try:
            return bool(client.set(self.name, value, nx=True, px=self.ttl_ms))
        except (redis.RedisError, OSError):  # down, frozen or refusing: a "no"
            return False

    def _unlock_everywhere(self, value: str) -> int:
        """Compare-and-delete on every instance; returns how many still had my value."""
        deleted = 0
        for script in self._release:
            try:
                deleted += int(script(keys=[self.name], args=[value]))
            except (redis.RedisError, OSError):
                pass
        return deleted

    def release(self) -> bool:
        """Delete my key on every instance. True if a majority still had my value (I let go
        of a lock I held); False if I held nothing or fewer than a majority still had it —
        then "lost" is emitted: my hold had already ended (expired, or an instance forgot)."""
        value, self.value = self.value, None
        self.valid_until = 0.0
        if value is None:
            return False
        still_mine = self._unlock_everywhere(value)
        if still_mine >= self.quorum:
            self.on_event("released", token=None)
            return True
        self.on_event("lost", reason=f"only {still_mine} of {len(self.clients)} instances still had my value "
                                     "at release: the lock had expired or an instance had forgotten it")
        return False

    def close(self) -> None:
        for client in self.clients:
            client.close()


    def __repr__(self) -> str:
        return (f"Redlock(name={self.name!r}, identifier={self.identifier!r}, instances={len(self.clients)}, "
                f"held={self.value is not None})")
