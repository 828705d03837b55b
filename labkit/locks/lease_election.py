"""LeaseElection: Kubernetes-style leader election on one etcd key (client-go's
``tools/leaderelection``, with a record like a ``coordination.k8s.io`` Lease).

What can go wrong, first: this election trusts **clocks**. There is no session and no
server-side expiry: the key lives forever, and the record in it says who leads and when
it last renewed, stamped by the leader's wall clock. A follower takes over when, by its
*own* clock, ``renewTime + leaseDurationSeconds`` has passed. If a follower's clock runs
ahead of the leader's by more than the time left on the lease, it takes over a healthy
leader, and both believe they lead until the old leader's next renewal fails (up to one
``retry_period``): the known gap (``lessons/elections.py`` makes it happen). client-go
narrows it by judging the lease with the follower's own clock only, from when *it* last
saw the record change (``judge="observed"`` here): that rule ignores an offset between the
clocks and is left exposed only to their rates. Either way, fence: the leader's epoch
(``token``, the revision of the write that made it leader) must travel with its writes.

The three durations (client-go's names, in seconds):

- ``lease_duration``: how long followers wait after the last renewal before taking over.
- ``renew_deadline``: how long a leader keeps trying to renew before it steps down. It
  must be shorter than ``lease_duration``, so an old leader that cannot reach etcd stops
  believing before the followers may take over (if the clocks agree).
- ``retry_period``: how often every candidate tries, on a fixed schedule, and each try's
  time limit (its read and its write share it).

A try is one read and one compare-and-swap on the key's mod revision: if someone wrote the
record since I read it, my write fails and I read again. So the record never has two
holders; only beliefs can overlap. A killed leader is replaced within
``worst_case_failover()`` = lease_duration + 2 x retry_period: its last renewal is no later
than its death, the record expires ``lease_duration`` after it, and a follower looks every
``retry_period`` with a try that takes at most one more.
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Callable

import etcd3
from etcd3 import etcdrpc

from labkit.locks.contract import HeldInside
from labkit.locks.errors import InvalidElectionName, InvalidLeaseDurations, LockTimeout
from labkit.locks.etcd_session import UNREACHABLE, rpc
from labkit.record.events import EventSink, ignore_events

JUDGES = ("renew-time", "observed")


@dataclass(frozen=True)
class LeaseDurations:
    """leaseDuration > renewDeadline > retryPeriod > 0, in seconds (client-go's defaults are
    15, 10 and 2). Raises InvalidLeaseDurations otherwise."""

    lease_duration: float
    renew_deadline: float
    retry_period: float

    def __post_init__(self) -> None:
        values = (self.lease_duration, self.renew_deadline, self.retry_period)
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
            raise InvalidLeaseDurations(f"every duration must be a positive number of seconds, not {values}",
                                        hint="for instance LeaseDurations(15, 10, 2), client-go's defaults")
        if not self.renew_deadline < self.lease_duration:
            raise InvalidLeaseDurations(
                f"renew_deadline ({self.renew_deadline} s) must be shorter than lease_duration "
                f"({self.lease_duration} s): a leader that cannot renew must stop before the followers take over",
                hint="keep a margin for clocks that disagree, e.g. renew_deadline = 2/3 of lease_duration")
        if not self.retry_period < self.renew_deadline:
            raise InvalidLeaseDurations(
                f"retry_period ({self.retry_period} s) must be shorter than renew_deadline "
                f"({self.renew_deadline} s), or a leader gets no second try before it steps down",
                hint="client-go asks renew_deadline > 1.2 x retry_period")

    def worst_case_failover(self) -> float:
        """Seconds from a leader's death until a follower leads, at most (clocks agreeing)."""
        return self.lease_duration + 2 * self.retry_period

    def clock_margin(self) -> float:
        """Seconds a follower's clock may run ahead of the leader's before a leader cut off
        from etcd can still believe it leads when a follower takes over: the leader gives
        up at most renew_deadline + one try after its last renewal, the follower takes
        over lease_duration after it by its own clock."""
        return self.lease_duration - self.renew_deadline - self.retry_period


@dataclass(frozen=True)
class LeaseRecord:
    """What the key holds: client-go's LeaderElectionRecord. Times are wall-clock seconds
    of the clock of whoever wrote them, stored as RFC 3339 text."""

    holder_identity: str
    acquire_time: float
    renew_time: float
    lease_duration_seconds: float
    leader_transitions: int = 0

    def to_json(self) -> bytes:
        return json.dumps({"holderIdentity": self.holder_identity, "acquireTime": _rfc3339(self.acquire_time),
                           "renewTime": _rfc3339(self.renew_time),
                           "leaseDurationSeconds": self.lease_duration_seconds,
                           "leaderTransitions": self.leader_transitions}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "LeaseRecord":
        data = json.loads(raw)
        return cls(data["holderIdentity"], _seconds(data["acquireTime"]), _seconds(data["renewTime"]),
                   float(data["leaseDurationSeconds"]), int(data.get("leaderTransitions", 0)))


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="microseconds")


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


class LeaseElection(HeldInside):
    """One candidate for the lease at ``key``; ``clock`` is its wall clock (``time.time``;
    a lesson hands one that runs ahead). ``acquire(timeout)`` starts trying and blocks until
    leading; it returns the epoch. ``release()`` stops and, if leading, empties the holder
    so a follower takes over at its next try. ``crash()`` stops without a word, as a
    killed process would. ``judge``: "renew-time" (the record's renewTime by my clock) or
    "observed" (client-go's: my clock since the record last changed)."""

    def __init__(self, client: etcd3.Etcd3Client, key: str, identity: str, durations: LeaseDurations,
                 clock: Callable[[], float] = time.time, on_event: EventSink = ignore_events,
                 judge: str = "renew-time"):
        if not isinstance(key, str) or not key.strip() or "\x00" in key:
            raise InvalidElectionName(f"{key!r} is not a valid etcd key for a lease record",
                                      hint="use a plain key such as 'leases/scheduler'")
        if not isinstance(durations, LeaseDurations):
            raise InvalidLeaseDurations(f"durations must be a LeaseDurations, not {durations!r}",
                                        hint="LeaseDurations(lease_duration, renew_deadline, retry_period)")
        if judge not in JUDGES:
            raise ValueError(f"judge={judge!r} is not one of {JUDGES}")
        self.client, self.key, self.identity = client, key, identity or "candidate"
        self.identifier = self.identity
        self.durations, self.clock, self.on_event, self.judge = durations, clock, on_event, judge
        self._leading = False
        self._last_renewed = 0.0        # time.monotonic() when my last successful try was sent
        self._epoch: int | None = None
        self._observed: tuple[bytes, float] | None = None   # (raw record, monotonic time first seen)
        self._try_ends = 0.0            # time.monotonic() by which the current try must end
        self._became_leader = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the contract ----------------------------------------------------------------
    def acquire(self, timeout: float | None = None) -> int:
        started = time.monotonic()
        self.on_event("requested", key=self.key)
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"lease-election-{self.identity}", daemon=True)
            self._thread.start()
        if not self._became_leader.wait(timeout):
            self._halt()
            waited = time.monotonic() - started
            self.on_event("timeout", waited=waited)
            raise LockTimeout(self.key, waited)
        return self._epoch

    def release(self) -> None:
        """Stop trying; if leading, write the record with no holder (client-go's
        ReleaseOnCancel), so a follower takes over at its next try. Idempotent."""
        self._halt()
        if not self._leading:
            return
        self._leading = False
        self._became_leader.clear()
        try:
            record, revision = self._read()
            if record is not None and record.holder_identity == self.identity:
                now = self.clock()
                self._swap(replace(record, holder_identity="", acquire_time=now, renew_time=now,
                                   lease_duration_seconds=1), revision)
        except UNREACHABLE:
            pass                                  # the lease then runs out by itself
        self.on_event("released", token=self._epoch)

    def crash(self) -> None:
        """Stop at once, touching nothing: the record stays as a killed leader leaves it."""
        self._halt()

    @property
    def is_leader(self) -> bool:
        """True while leading and my last successful try is younger than renew_deadline."""
        return self._leading and time.monotonic() - self._last_renewed < self.durations.renew_deadline

    is_held = is_leader

    @property
    def token(self) -> int | None:
        """My epoch while I lead: the etcd revision of the write that made me leader."""
        return self._epoch if self.is_leader else None

    epoch = token

    def record(self) -> LeaseRecord | None:
        """The record as etcd holds it now (None if nobody ever led)."""
        return self._read()[0]

    # -- the loop --------------------------------------------------------------------
    def _halt(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.durations.retry_period * 3 + 5)

    def _run(self) -> None:
        # A try starts every retry_period on a fixed schedule (not retry_period after the
        # last one ended), and each try ends within retry_period: that is what the
        # worst case counts on.
        next_try = time.monotonic()
        while not self._stop.is_set():
            self._try_once()
            next_try = max(next_try + self.durations.retry_period, time.monotonic())
            self._stop.wait(next_try - time.monotonic())

    def _try_once(self) -> None:
        sent = time.monotonic()
        self._try_ends = sent + self.durations.retry_period
        try:
            record, revision = self._read()
            wrote, holder = self._decide(record, revision)
        except UNREACHABLE:
            wrote, holder = None, None
        if wrote is not None and holder == self.identity:
            self._last_renewed = sent
            if not self._leading:
                self._leading, self._epoch = True, wrote
                self.on_event("acquired", token=wrote, key=self.key)
                self._became_leader.set()
        elif self._leading and holder is not None and holder != self.identity:
            self._step_down(f"the record names {holder or 'nobody'} now: another candidate took over")
        elif self._leading and time.monotonic() - self._last_renewed >= self.durations.renew_deadline:
            self._step_down(f"no renewal succeeded for renew_deadline ({self.durations.renew_deadline} s)")

    def _decide(self, record: LeaseRecord | None, revision: int) -> tuple[int | None, str | None]:
        """One try. Returns (revision of my successful write or None, who holds after it)."""
        now = self.clock()
        durations = self.durations
        if record is None:
            written = self._swap(LeaseRecord(self.identity, now, now, durations.lease_duration), 0)
            return written, self.identity if written else self._holder_now()
        if record.holder_identity == self.identity:
            renewed = replace(record, renew_time=now, lease_duration_seconds=durations.lease_duration)
            written = self._swap(renewed, revision)
            return written, self.identity if written else self._holder_now()
        if record.holder_identity and not self._expired(record, now):
            return None, record.holder_identity   # someone else leads and the lease holds
        taken = LeaseRecord(self.identity, now, now, durations.lease_duration, record.leader_transitions + 1)
        written = self._swap(taken, revision)
        return written, self.identity if written else self._holder_now()

    def _holder_now(self) -> str | None:
        # my compare-and-swap failed: someone wrote the record since I read it; who?
        record = self._read()[0]
        return None if record is None else record.holder_identity

    def _expired(self, record: LeaseRecord, now: float) -> bool:
        if self.judge == "renew-time":
            return record.renew_time + record.lease_duration_seconds < now
        return time.monotonic() - self._observed[1] > record.lease_duration_seconds

    def _step_down(self, reason: str) -> None:
        self._leading = False
        self._became_leader.clear()
        self.on_event("lost", reason=reason, token=self._epoch)

    # -- etcd --------------------------------------------------------------------------
    def _read(self) -> tuple[LeaseRecord | None, int]:
        response = rpc(self.client, self.client.kvstub.Range, etcdrpc.RangeRequest(key=self.key.encode()),
                       timeout=self._time_left())
        if not response.kvs:
            return None, 0
        kv = response.kvs[0]
        if self._observed is None or self._observed[0] != kv.value:
            self._observed = (kv.value, time.monotonic())   # client-go's observedTime
        return LeaseRecord.from_json(kv.value), kv.mod_revision

    def _time_left(self) -> float:
        if threading.current_thread() is not self._thread:
            return self.durations.retry_period   # record(), release(): calls of their own
        return max(self._try_ends - time.monotonic(), 0.001)   # a try's calls share its retry_period

    def _swap(self, record: LeaseRecord, revision: int) -> int | None:
        """Write ``record`` only if the key's mod revision is still ``revision`` (0: the key
        does not exist). Returns the revision of my write, or None if someone wrote first."""
        key = self.key.encode()
        request = etcdrpc.TxnRequest(
            compare=[etcdrpc.Compare(key=key, target=etcdrpc.Compare.MOD, result=etcdrpc.Compare.EQUAL,
                                     mod_revision=revision)],
            success=[etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key, value=record.to_json()))])
        response = rpc(self.client, self.client.kvstub.Txn, request, timeout=self._time_left())
        return response.header.revision if response.succeeded else None

    def __repr__(self) -> str:
        state = f"leader, epoch {self._epoch}" if self.is_leader else "not leader"
        return f"LeaseElection({self.key!r}, {self.identity!r}, {state})"
