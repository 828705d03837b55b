"""The libraries learners actually use, under the faults that break labkit's own Redis locks
(notebooks 01 and 08): redis-py's ``Lock`` and python-redis-lock (auto-renewed) on one
primary, pottery's ``Redlock`` on five. Same schedules, same evidence, so that a learner can
see that the failures belong to the algorithms, not to labkit's code.

* ``pause_past_ttl``: a holder *process* frozen (SIGSTOP) for longer than its TTL; another
  client takes the lock; the thawed holder writes. python-redis-lock's renewal thread is
  frozen with its process, which is the point: a pause of the whole process (GC, swap, a
  stopped VM) stops every thread that could have kept the lock.
* ``pause_each``: that, for several libraries side by side (one thread each).
* ``failover_each``: 01's failover (replication cut, primary killed, replica promoted, as
  Sentinel would) for each library, each on a fresh primary + replica;
  ``sentinel_failover_all``: the same schedule with real Sentinel promoting the replica.
* ``pottery_double_grants``: 08's three double grants, for pottery's Redlock.
* ``Outcome`` / ``outcome_rows``: the table a notebook prints (library, failure, two holders?).

What can fail, first: each function starts client processes (``ClientError``) and, for the
failover, small labs of its own, stopped before it returns; ``LockTimeout`` when a second
client never gets the lock (the failure did not happen as scheduled).
"""
from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from labkit.faults.redis import cut_replication, wait_for_replication
from labkit.harness.frozen_holder import frozen_holder
from labkit.lessons.redis_vs_consensus import grant_twice_on_failover
from labkit.lessons.redlock_double_grants import (DoubleGrant, clock_step_double_grant, offer_to_a_fenced_store,
                                                  pause_double_grant, restart_double_grant)
from labkit.locks.redis_lock import RedisLock
from labkit.locks.redis_peers import PotteryRedlock, PythonRedisLock, RedisPyLock
from labkit.progress import shows_progress
from labkit.record.checker import Verdict, check_mutual_exclusion
from labkit.record.fencing import StoreWrite
from labkit.record.history import History
from labkit.servers.lab import up

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

# library -> (its recipe in the registry, for a client process; its class, for this process)
REDIS_LOCKS: dict[str, tuple[str, Callable[..., Any]]] = {
    "labkit RedisLock": ("redis", RedisLock),
    "redis-py Lock": ("redis-py", RedisPyLock),
    "python-redis-lock": ("python-redis-lock", PythonRedisLock),
}
NO_TOKEN = "none: a random value"


@dataclass
class Outcome:
    """One library under one failure: did two clients hold the lock at once, and could a
    fenced store have told the late writer from the new holder?"""

    library: str
    failure: str
    two_holders: bool
    evidence: str
    token: str = NO_TOKEN

    def row(self) -> dict[str, Any]:
        return {"library": self.library, "failure": self.failure, "two holders?": "yes" if self.two_holders else "no",
                "fencing token": self.token, "evidence": self.evidence}


def outcome_rows(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [outcome.row() for outcome in outcomes]


# ---- a holder frozen past its TTL ---------------------------------------------------------------
@dataclass
class PausedHolder:
    """client-1 (a process of ``library``) held, was frozen, and wrote again after ``bob``
    (same library, in this process) had taken the lock and written. ``writes``: the unfenced
    store's log; ``fenced``: the same writes offered to a fenced store."""

    library: str
    history: History
    writes: list[StoreWrite]
    fenced: list[StoreWrite]
    bob_waited: float                       # seconds from the freeze to bob's acquire
    pause: float
    events: dict[str, list[str]] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return check_mutual_exclusion(self.writes, self.history)

    @property
    def outcome(self) -> Outcome:
        order = [write.client for write in self.writes]
        return Outcome(self.library, f"holder paused {self.pause:g} s, past its TTL",
                       order == ["client-1", "bob", "client-1"] and not self.verdict.ok,
                       f"store log: {' → '.join(order)}")

    @property
    def fenced_refuses_everything(self) -> bool:
        """A fenced store given these writes refuses every one: with no token there is
        nothing to compare, so it cannot refuse the late writer alone."""
        return bool(self.fenced) and not any(write.accepted for write in self.fenced)


def pause_past_ttl(lab: Lab, library: str, ttl: float = 1.0, pause: float = 2.5) -> PausedHolder:
    """01's pause for one library of ``REDIS_LOCKS``: client-1 (its own process) acquires with
    a TTL of ``ttl`` s and writes; it is frozen for ``pause`` s; bob acquires once the key is
    gone and writes; the write client-1 was about to make runs when it thaws. Raises
    ValueError if ``pause`` is not longer than ``ttl``."""
    if pause <= ttl:
        raise ValueError(f"pause ({pause} s) must be longer than the TTL ({ttl} s), or nobody else can acquire")
    recipe, lock_type = REDIS_LOCKS[library]
    name, history = f"lock:pause-{recipe}-{uuid.uuid4().hex[:8]}", History()
    bob_client = lab.redis.client()
    # a renewed lock keeps bob's hold alive; a python-redis-lock waiter retries once per its own TTL
    bob_ttl = ttl if lock_type is PythonRedisLock else 10 * pause
    bob = lock_type(bob_client, name, ttl_ms=int(bob_ttl * 1000), identifier="bob", on_event=history.sink("bob"))
    try:
        with frozen_holder(lab, recipe, name, pause, successor=bob, history=history, ttl=ttl) as run:
            with contextlib.suppress(Exception):   # its key is bob's now: the library says so
                run.frozen.release()
        bob.release()
    finally:
        bob_client.close()
    writes = run.writes
    fenced = offer_to_a_fenced_store(lab, writes, history)
    return PausedHolder(library, history, writes, fenced, run.successor_waited, pause,
                        {who: [event.kind for event in history.events(client=who)] for who in ("client-1", "bob")})


@shows_progress("each Redis lock library's holder paused")
def pause_each(lab: Lab, libraries: tuple[str, ...] = tuple(REDIS_LOCKS), ttl: float = 1.0,
               pause: float = 2.5) -> dict[str, PausedHolder]:
    """``pause_past_ttl`` for each library at the same time (each its own lock, client and
    store), so that the side-by-side costs one pause, not one per library."""
    with ThreadPoolExecutor(max_workers=len(libraries)) as pool:
        runs = {library: pool.submit(pause_past_ttl, lab, library, ttl, pause) for library in libraries}
        return {library: run.result() for library, run in runs.items()}


# ---- failover ----------------------------------------------------------------------------------
@dataclass
class Failover:
    library: str
    history: History
    open_holds: list[str]
    a_believes: bool
    b_holds: bool

    @property
    def outcome(self) -> Outcome:
        return Outcome(self.library, "failover to a lagging replica",
                       self.open_holds == ["client-A", "client-B"] and self.a_believes and self.b_holds,
                       f"open holds: {', '.join(self.open_holds) or 'none'}")


@shows_progress("each Redis lock library through a failover")
def failover_each(libraries: tuple[str, ...] = tuple(REDIS_LOCKS)) -> dict[str, Failover]:
    """01's failover schedule (``grant_twice_on_failover``) for each library, each on a
    primary + replica started here (two redis-server processes, stopped before returning)."""
    runs = {}
    for library in libraries:
        _, lock_type = REDIS_LOCKS[library]
        with up(zookeeper=0, etcd=0, redis=True, replica=True, keep_previous=True, quiet=True) as lab:
            history = History()
            wait_for_replication(lab.redis)
            split = grant_twice_on_failover(lab.redis, f"lock:failover-{uuid.uuid4().hex[:6]}", history,
                                            lock_type=lock_type)
            open_holds = [hold.client for hold in history.holds() if hold.end is None]
            runs[library] = Failover(library, history, open_holds, split.client_a.value is not None,
                                     split.client_b.is_held)
            split.client_b.release()
            # client-A's server is dead: its release cannot land (and python-redis-lock's must run,
            # to stop the renewal thread); without retries it fails at once instead of in seconds
            split.client_a.client.set_retry(Retry(NoBackoff(), 0))
            with contextlib.suppress(redis.RedisError):
                split.client_a.release()
    return runs


def sentinel_failover_all(lab: Lab, libraries: tuple[str, ...] = tuple(REDIS_LOCKS),
                          timeout: float = 30.0) -> dict[str, Failover]:
    """The same failover with real Sentinel deciding (a lab with ``redis=True, replica=True,
    sentinels=3``), one failover for every library: replication cut; each library's client-A
    locks a key of its own on the primary; the primary is killed and the replica thawed;
    once a majority of the sentinels name the promoted replica, each library's client-B locks
    the same key there. Raises FailoverTimeout (with the sentinels' logs) if Sentinel does
    not promote it within ``timeout`` s. The lab is left with its old primary dead."""
    history = History()
    wait_for_replication(lab.redis)
    history.record_fault("cut replication", f"{lab.redis.primary.name} -> {lab.redis.replica.name}")
    replica = cut_replication(lab.redis)
    firsts = {}
    for library in libraries:
        key = f"lock:sentinel-{REDIS_LOCKS[library][0]}-{uuid.uuid4().hex[:6]}"
        firsts[library] = REDIS_LOCKS[library][1](lab.redis.client(), key, ttl_ms=30_000, identifier=f"{library} A",
                                                  on_event=history.sink(f"{library} A"))
        firsts[library].acquire(timeout=1)  # OK from the primary alone
    history.record_fault("kill primary; Sentinel promotes the replica", lab.redis.primary.name)
    lab.redis.primary.kill()
    replica.resume()
    lab.sentinel.wait_for_failover(lab.redis, timeout)
    runs = {}
    for library, first in firsts.items():
        second = REDIS_LOCKS[library][1](lab.redis.client(), first.name, ttl_ms=30_000, identifier=f"{library} B",
                                         on_event=history.sink(f"{library} B"))
        second.acquire(timeout=5)
        open_holds = [hold.client.rsplit(" ", 1)[1] for hold in history.holds()
                      if hold.end is None and hold.client.startswith(f"{library} ")]
        runs[library] = Failover(library, history, [f"client-{who}" for who in open_holds],
                                 first.value is not None, second.is_held)
        second.release()
        first.client.set_retry(Retry(NoBackoff(), 0))  # its server is dead: fail at once
        with contextlib.suppress(redis.RedisError):
            first.release()
    return runs


# ---- Redlock: labkit's and pottery's ---------------------------------------------------------------
def double_grant_outcome(library: str, run: DoubleGrant) -> Outcome:
    """The row for one of 08's double grants: two holders when the store's log shows the
    holds overlapping and, but for the pause, the first still inside its validity."""
    believed = run.first_validity_left > 0 if run.fault != "pause past validity" else True
    return Outcome(library, run.fault, believed and not run.verdict.ok,
                   f"{' '.join(run.holders)}; first's validity left {run.first_validity_left:+.2f} s")


@shows_progress("pottery's Redlock holders paused")
def pottery_double_grants(lab: Lab, ttl_ms: int = 10_000, ttl: float = 1.0, pause: float = 2.5) -> list[DoubleGrant]:
    """08's three double grants, with the same schedules, for pottery's Redlock (alice and bob
    are pottery clients; the frozen client-1 is a process running pottery): the clock step on
    r1 r2 r3, the restart of r3 while r4 r5 were away, the holder paused past its validity.
    Needs a lab with ``redlock=5, clocks=True``."""
    connect = PotteryRedlock.connect
    return [clock_step_double_grant(lab, ttl_ms=ttl_ms, stepped=("r1", "r2", "r3"), connect=connect),
            restart_double_grant(lab, ttl_ms=ttl_ms, forgetful="r3", unreachable=("r4", "r5"), connect=connect),
            pause_double_grant(lab, ttl=ttl, pause=pause, recipe="pottery", connect=connect)]
