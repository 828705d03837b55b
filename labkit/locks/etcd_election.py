"""EtcdElection: a port of Go's ``concurrency.Election`` (etcd client/v3/concurrency/election.go).

What can go wrong, first: a leader is only a leader while its lease lives. A paused or
cut-off leader's lease expires on the server, etcd deletes its key, and the next candidate
is elected while the old one may still believe it leads. ``is_leader`` turns False at the
session's client-side deadline (etcd_session.py), but a paused process notices only when
it wakes. So the leader's **epoch** (its key's create revision) must travel with everything
it does: a store that remembers the highest epoch it has seen refuses the old leader's
late writes (``labkit.record.fencing``), and a write to etcd itself can be guarded in the
same transaction with ``is_leader_compare()``. ``campaign(timeout)`` raises ``LockTimeout``,
``SessionExpired`` when the lease is lost while waiting; ``proclaim`` raises ``NotLeader``
once the key is gone; ``leader()`` raises ``NoElectedLeader`` on an empty election.

An election is a lock with a value. Each candidate puts ``<name>/<lease id in hex>`` with
its proposal, bound to its lease; the key with the lowest create revision is the leader;
a candidate waits for every key created before its own to go, watching only the youngest
one ahead (no herd). That is exactly ``EtcdMutex``, so the election borrows one. What the
election adds: the proposal as the key's value, ``proclaim`` (change it without a new
election, only if my key still has my epoch), ``leader()`` and ``observe()`` for anyone to
read, leader or not. The layout is Go's, so ``etcdctl elect NAME PROPOSAL`` campaigns in
the same election and ``etcdctl elect -l NAME`` observes ours.
"""
from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass
from typing import Iterator

import etcd3
from etcd3 import etcdrpc
from etcd3.events import DeleteEvent, PutEvent
from etcd3.utils import prefix_range_end

from labkit.locks.contract import HeldInside
from labkit.locks.errors import InvalidElectionName, NoElectedLeader, NotLeader
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession, rpc
from labkit.record.events import EventSink, ignore_events


@dataclass(frozen=True)
class Leader:
    """The leader as etcd stores it: its key, its proposal, its epoch (the key's create
    revision: the fencing token of its whole term) and the revision of its last proclaim."""

    key: str
    proposal: str
    epoch: int
    revision: int

    @classmethod
    def from_kv(cls, kv) -> "Leader":
        return cls(kv.key.decode(), kv.value.decode(errors="replace"), kv.create_revision, kv.mod_revision)


def check_election_name(name: object) -> str:
    """``name`` if it can name an etcd election, else raise InvalidElectionName. Go's layout
    appends "/" to the name, so an empty name would put every candidate at the root of the
    key space, and a name ending in "/" would make keys with an empty segment; etcdctl and
    the gRPC gateway carry no NUL."""
    if not isinstance(name, str) or not name.strip() or name.endswith("/") or "\x00" in name:
        raise InvalidElectionName(
            f"{name!r} is not a valid etcd election name: the candidates' keys are NAME/<lease id>, so NAME "
            "must be a non-empty string without a trailing '/' or a NUL character",
            hint="use a plain key such as 'elections/scheduler' (as in `etcdctl elect elections/scheduler ...`)")
    return name


class EtcdElection(HeldInside):
    """One candidate in the election ``name``, on a session (a lease) it borrows.

    ``campaign(proposal, timeout)`` blocks until elected and returns the epoch; ``acquire``
    is ``campaign(identifier)``, so the election follows the lock contract (docs/RECIPES.md)
    and client processes, the fenced store and the checker treat it like a lock.
    """

    def __init__(self, session: EtcdSession, name: str, identifier: str = "",
                 on_event: EventSink = ignore_events):
        self.name = check_election_name(name)
        self.session = session
        self.client = session.client
        self.identifier = identifier
        self.prefix = name + "/"
        self._mutex = EtcdMutex(session, name, identifier=identifier, on_event=on_event)

    # -- candidates ------------------------------------------------------------------
    def campaign(self, proposal: str, timeout: float | None = None) -> int:
        """Stand with ``proposal`` and block until elected; return my epoch. A session that
        campaigns again while its key is still there keeps its place and its first
        proposal (call ``proclaim`` to change it). Raises LockTimeout (my key is
        deleted), SessionExpired, or python-etcd3's connection errors."""
        self._mutex.value = proposal.encode()
        return self._mutex.lock(timeout)

    def acquire(self, timeout: float | None = None) -> int:
        """``campaign`` with my identifier (or my lease id) as the proposal."""
        return self.campaign(self.identifier or f"{self.session.lease_id:x}", timeout)

    def proclaim(self, proposal: str) -> None:
        """Announce a new proposal without a new election: one transaction that writes only
        if my key still has my epoch. Raises NotLeader otherwise."""
        epoch, key = self._mutex.token, self._mutex.key
        if epoch is None or key is None:
            raise NotLeader(f"election {self.name!r}: only the leader can proclaim; campaign() first")
        request = etcdrpc.TxnRequest(
            compare=[etcdrpc.Compare(key=key.encode(), target=etcdrpc.Compare.CREATE,
                                     result=etcdrpc.Compare.EQUAL, create_revision=epoch)],
            success=[etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key.encode(), value=proposal.encode(),
                                                                      lease=self.session.lease_id))])
        if not rpc(self.client, self.client.kvstub.Txn, request).succeeded:
            raise NotLeader(f"election {self.name!r}: my key {key} no longer has epoch {epoch} "
                            "(my lease expired or I resigned); campaign again")
        self._mutex.value = proposal.encode()

    def resign(self) -> None:
        """Step down: delete my key, so the next candidate is elected at once. Idempotent."""
        self._mutex.unlock()

    release = resign

    @property
    def is_leader(self) -> bool:
        """True while elected, until the session's client-side deadline (not after)."""
        return self._mutex.is_held

    is_held = is_leader

    @property
    def epoch(self) -> int | None:
        """My key's create revision while I lead: the fencing token of my term."""
        return self._mutex.token

    token = epoch

    @property
    def key(self) -> str | None:
        return self._mutex.key

    def is_leader_compare(self) -> etcd3.transactions.Create:
        """A transaction comparison true only while my key still has my epoch (Go's
        ``Rev()`` guard): ``client.transaction(compare=[election.is_leader_compare()], ...)``."""
        return self._mutex.is_owner()

    # -- anyone --------------------------------------------------------------------
    def leader(self) -> Leader:
        """The current leader (the lowest create revision under the name). Raises
        NoElectedLeader when nobody campaigns."""
        kvs = self._first_created().kvs
        if not kvs:
            raise NoElectedLeader(f"election {self.name!r} has no candidate, so no leader")
        return Leader.from_kv(kvs[0])

    def candidates(self) -> list[str]:
        """Every candidate's key, leader first."""
        return self._mutex.contenders()

    def observe(self, stop: threading.Event | None = None, poll: float = 0.2) -> Iterator[Leader]:
        """Yield the leader each time it changes or proclaims (Go's ``Observe``), until
        ``stop`` is set (checked every ``poll`` seconds). It may skip a leader that came and
        went in between, never the newest. Raises python-etcd3's connection errors."""
        stop = stop or threading.Event()
        last: Leader | None = None
        while not stop.is_set():
            first = self._first_created()
            if first.kvs:
                leader, start = Leader.from_kv(first.kvs[0]), first.header.revision + 1
            else:
                # nobody yet: the first put under the name is the next leader
                leader = self._next_put(self.prefix.encode(), first.header.revision + 1, stop, poll,
                                        prefix=True)
                if leader is None:
                    continue
                start = leader.revision + 1
            if leader != last:
                last = leader
                yield leader
            # then follow that key: each put is a proclaim, its delete ends the term
            while not stop.is_set():
                changed = self._next_put(leader.key.encode(), start, stop, poll)
                if changed is None:
                    break
                last, start = changed, changed.revision + 1
                yield changed

    def _next_put(self, key: bytes, start: int, stop: threading.Event, poll: float,
                  prefix: bool = False) -> Leader | None:
        """The next put on ``key`` (or under it) from revision ``start``; None once it is
        deleted, the watch breaks, or ``stop`` is set."""
        events: queue.Queue = queue.Queue()
        range_end = prefix_range_end(key) if prefix else None
        watch_id = self.client.add_watch_callback(key, events.put, range_end=range_end, start_revision=start)
        try:
            while not stop.is_set():
                try:
                    response = events.get(timeout=poll)
                except queue.Empty:
                    continue
                if response is None or isinstance(response, Exception):
                    return None                       # the stream broke: read the leader again
                for event in response.events:
                    if isinstance(event, PutEvent):
                        return Leader(event.key.decode(), event.value.decode(errors="replace"),
                                      event.create_revision, event.mod_revision)
                    if isinstance(event, DeleteEvent) and not prefix:
                        return None
            return None
        finally:
            with contextlib.suppress(Exception):
                self.client.cancel_watch(watch_id)

    def _first_created(self) -> etcdrpc.RangeResponse:
        # Go's WithFirstCreate(): the whole prefix sorted by create revision, one key
        prefix = self.prefix.encode()
        request = etcdrpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix), limit=1,
                                       sort_target=etcdrpc.RangeRequest.CREATE,
                                       sort_order=etcdrpc.RangeRequest.ASCEND)
        return rpc(self.client, self.client.kvstub.Range, request)

    def __repr__(self) -> str:
        state = f"leader, epoch {self.epoch}" if self.is_leader else "not leader"
        return f"EtcdElection({self.name!r}, {state})"
