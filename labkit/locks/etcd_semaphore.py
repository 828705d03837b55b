"""EtcdSemaphore: a counting semaphore on etcd -- the first ``limit`` create revisions under a
prefix hold -- in the style of Go's ``concurrency.Mutex`` (etcd_mutex.py).

What can go wrong, first: as for the mutex, a slot lives exactly as long as the session's
lease. When the keep-alive stops, etcd deletes my key after the TTL and a waiter takes the
slot; ``is_held`` turns False at the session's client-side deadline, a little before. Fence
what you write with ``token`` (my key's create revision). ``acquire(timeout)`` raises
``LockTimeout`` and ``SessionExpired`` leaving no key of mine behind; ``PathInUse`` when the
prefix holds a mutex's keys or a semaphore with another limit (every key says its limit).

The protocol. Each contender puts ``<prefix>/<lease id in hex>`` on its own lease, with a
value that says "semaphore, limit N"; its rank is the number of keys with a lower create
revision. Rank < N holds. The waiters must not herd, and a freed slot must reach the first
waiter whichever holder let go (holders leave in any order), so the waiters do not all
watch the same thing:

- the waiter of rank exactly N (the head of the line) watches the N holders' keys for a
  delete: a freed slot wakes it, and only it;
- a waiter of rank > N watches the key just ahead of it (another waiter) for any change:
  that waiter is admitted (it then re-puts its key, marking it "admitted": the one extra
  write of this recipe, made only by a client that had to wait) or leaves; either way I may now be the head, and look again.

Watching "the key N places ahead" would wake one client per freed slot too, but the wrong
one whenever the holders leave out of order: the head would sleep beside a free slot.
"""
from __future__ import annotations

import contextlib
import json
import queue
import threading
import time

import grpc
from etcd3 import etcdrpc
from etcd3.events import DeleteEvent
from etcd3.utils import prefix_range_end

from labkit.locks.errors import LockError, LockTimeout, PathInUse, SessionExpired, check_semaphore_size
from labkit.locks.etcd_session import UNREACHABLE, EtcdSession, rpc
from labkit.record.events import EventSink, ignore_events

MARKER = "semaphore"   # the first field of every key's value: tells a semaphore's keys from a mutex's


def semaphore_value(limit: int, identifier: str, state: str) -> bytes:
    """A key's value. ``state`` is "joined", or "admitted" once a client that waited got in:
    it only tells the waiter behind that the line moved. Who holds is decided by create
    revision alone (a "joined" key among the first N holds)."""
    return json.dumps({MARKER: limit, "state": state, "identifier": identifier}).encode()


def semaphore_limit(value: bytes) -> int | None:
    """The limit a key's value announces, or None if it is no semaphore key (a mutex's is empty)."""
    try:
        decoded = json.loads(value)
    except ValueError:
        return None
    return decoded.get(MARKER) if isinstance(decoded, dict) else None


class EtcdSemaphore:
    """Up to ``limit`` holders of ``prefix`` at once; each session holds at most one slot."""

    def __init__(self, session: EtcdSession, prefix: str, limit: int, identifier: str = "",
                 on_event: EventSink = ignore_events):
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.limit = check_semaphore_size(limit, self.prefix)
        self.session = session
        self.client = session.client
        self.identifier = identifier
        self.on_event = on_event
        self.key = f"{self.prefix}{session.lease_id:x}"
        self._revision = -1        # my key's create revision: my place and my token
        self._held = False
        self._events: queue.Queue | None = None
        self._state_lock = threading.Lock()
        session.add_done_callback(self._on_session_done)

    # -- acquire ----------------------------------------------------------------------
    def acquire(self, timeout: float | None = None) -> int:
        """Block until I hold a slot; return the token. Raises LockTimeout, SessionExpired, PathInUse."""
        if self._revision != -1:
            raise LockError(f"this semaphore object already holds or waits for {self.prefix!r}; release() it first")
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        self.on_event("requested", prefix=self.prefix, limit=self.limit)
        first = self._join()
        try:
            if not self._ranked_below_limit(first):
                self._wait_for_slot(deadline, started)
        except BaseException:
            self._leave()
            raise
        with self._state_lock:
            self._held = True
        self.on_event("acquired", token=self._revision, key=self.key)
        return self._revision

    def _join(self) -> etcdrpc.RangeResponse:
        # One transaction: put my key unless it exists, and read the first `limit` keys.
        key = self.key.encode()
        first = etcdrpc.RequestOp(request_range=self._by_create(etcdrpc.RangeRequest.ASCEND, self.limit))
        request = etcdrpc.TxnRequest(
            compare=[etcdrpc.Compare(key=key, target=etcdrpc.Compare.CREATE,
                                     result=etcdrpc.Compare.EQUAL, create_revision=0)],
            success=[etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(
                key=key, value=semaphore_value(self.limit, self.identifier, "joined"),
                lease=self.session.lease_id)), first],
            failure=[first])
        try:
            response = rpc(self.client, self.client.kvstub.Txn, request)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            raise SessionExpired(f"semaphore {self.prefix!r}: lease {self.session.lease_id:x} is gone "
                                 "(expired or revoked); start a new EtcdSession") from None
        if not response.succeeded:
            raise LockError(f"semaphore {self.prefix!r}: this session already has a key there ({self.key}); "
                            "one slot per session")
        self._revision = response.header.revision
        self.on_event("created", key=self.key, revision=self._revision)
        ranged = response.responses[1].response_range
        self._check_neighbours(ranged.kvs)
        return ranged

    def _check_neighbours(self, kvs) -> None:
        for kv in kvs:
            limit = semaphore_limit(kv.value)
            if limit is None:
                self._leave()
                raise PathInUse(f"{self.prefix!r} is a mutex's prefix ({kv.key.decode()} is no semaphore key)",
                                hint="give the semaphore a prefix of its own")
            if limit != self.limit:
                self._leave()
                raise PathInUse(f"semaphore {self.prefix!r} is used with limit {limit} ({kv.key.decode()}), "
                                f"not {self.limit}: holders that disagree on N would admit too many",
                                hint=f"use limit={limit}, or another prefix")

    def _ranked_below_limit(self, first: etcdrpc.RangeResponse) -> bool:
        return any(kv.create_revision == self._revision for kv in first.kvs)

    def _by_create(self, order: int, limit: int, max_create_revision: int = 0) -> etcdrpc.RangeRequest:
        prefix = self.prefix.encode()
        return etcdrpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix), limit=limit,
                                    sort_target=etcdrpc.RangeRequest.CREATE, sort_order=order,
                                    max_create_revision=max_create_revision)

    # -- wait ----------------------------------------------------------------------------
    def _look_ahead(self) -> tuple[list[str], str | None, bool, int]:
        """What I wait for, read in one transaction: the first ``limit + 1`` keys (the
        holders, then the head of the line), the key just ahead of mine, whether my key is
        still there, and the revision read. (A range's ``count`` cannot give my rank: etcd
        counts the whole prefix, before ``max_create_revision`` filters it.)"""
        request = etcdrpc.TxnRequest(success=[
            etcdrpc.RequestOp(request_range=self._by_create(etcdrpc.RangeRequest.ASCEND, self.limit + 1)),
            etcdrpc.RequestOp(request_range=self._by_create(etcdrpc.RangeRequest.DESCEND, 1, self._revision - 1)),
            etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=self.key.encode(), count_only=True))])
        response = rpc(self.client, self.client.kvstub.Txn, request)
        first, just_ahead, mine = (op.response_range for op in response.responses)
        keys = [kv.key.decode() for kv in first.kvs]
        before = just_ahead.kvs[0].key.decode() if just_ahead.kvs else None
        return keys, before, mine.count == 1, response.header.revision

    def _wait_for_slot(self, deadline: float | None, started: float) -> None:
        while True:
            if self.session.done.is_set():
                raise SessionExpired(f"semaphore {self.prefix!r}: {self.session.lost_reason}; start a new EtcdSession")
            first, before, mine, revision = self._look_ahead()
            if not mine:
                raise SessionExpired(f"semaphore {self.prefix!r}: my key {self.key} is gone (its lease expired "
                                     "or was revoked); start a new EtcdSession")
            if self.key in first[:self.limit]:
                if self._mark_admitted():
                    return
                continue
            # The head watches every holder (a delete frees a slot); the others watch the
            # waiter just ahead (admitted or gone: the line moved).
            if first[self.limit:] == [self.key]:
                self._wait(first[:self.limit], "slot", revision + 1, deadline, started)
            else:
                self._wait([before], "line", revision + 1, deadline, started)

    def _mark_admitted(self) -> bool:
        # Tells the waiter behind me that the line moved (it watches my key). Guarded by my
        # create revision, so a key my lease lost is never put back.
        key = self.key.encode()
        request = etcdrpc.TxnRequest(
            compare=[etcdrpc.Compare(key=key, target=etcdrpc.Compare.CREATE,
                                     result=etcdrpc.Compare.EQUAL, create_revision=self._revision)],
            success=[etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(
                key=key, value=semaphore_value(self.limit, self.identifier, "admitted"), lease=self.session.lease_id))])
        return rpc(self.client, self.client.kvstub.Txn, request).succeeded

    def _wait(self, targets: list[str], what: str, start_revision: int, deadline: float | None,
              started: float) -> None:
        events: queue.Queue = queue.Queue()
        self._events = events
        self.on_event("watch", target=",".join(targets), what=what)
        watches = []
        try:
            for target in targets:
                with contextlib.suppress(*UNREACHABLE):
                    watches.append(self.client.add_watch_callback(target, events.put, start_revision=start_revision))
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    waited = time.monotonic() - started
                    self.on_event("timeout", waited=waited)
                    raise LockTimeout(self.prefix, waited)
                # A watch can die silently with its stream (a server restart): look again
                # at least once per TTL.
                wait = self.session.ttl if remaining is None else min(remaining, self.session.ttl)
                try:
                    response = events.get(timeout=wait)
                except queue.Empty:
                    return
                if response is None or isinstance(response, Exception) or self.session.done.is_set():
                    return                    # the stream broke or the session ended: look again
                changed = [event for event in response.events
                           if what == "line" or isinstance(event, DeleteEvent)]
                if changed:
                    self.on_event("woke", what=what, reason=type(changed[0]).__name__,
                                  target=changed[0].key.decode())
                    return
        finally:
            self._events = None
            for watch_id in watches:
                with contextlib.suppress(Exception):
                    self.client.cancel_watch(watch_id)

    # -- hold and release ----------------------------------------------------------------
    def _on_session_done(self) -> None:
        events = self._events
        if events is not None:
            events.put(None)
        with self._state_lock:
            was_held, self._held = self._held, False
        if was_held and self.on_event != self.session.on_event:
            self.on_event("lost", reason=self.session.lost_reason, key=self.key, token=self._revision)

    def _leave(self) -> None:
        with contextlib.suppress(*UNREACHABLE):
            rpc(self.client, self.client.kvstub.DeleteRange, etcdrpc.DeleteRangeRequest(key=self.key.encode()))
        self._revision = -1

    def release(self) -> None:
        """Delete my key (idempotent): the head of the line wakes. Raises python-etcd3's
        connection errors if etcd cannot be reached (the key then goes with the lease)."""
        with self._state_lock:
            was_held, self._held = self._held, False
        token = self._revision
        if token == -1:
            return
        rpc(self.client, self.client.kvstub.DeleteRange, etcdrpc.DeleteRangeRequest(key=self.key.encode()))
        self._revision = -1
        if was_held:
            self.on_event("released", token=token)

    @property
    def token(self) -> int | None:
        return self._revision if self.is_held else None

    @property
    def is_held(self) -> bool:
        return self._held and not self.session.is_expired

    def holders(self) -> list[str]:
        """The keys that hold now: the first ``limit`` by create revision."""
        response = rpc(self.client, self.client.kvstub.Range, self._by_create(etcdrpc.RangeRequest.ASCEND, self.limit))
        return [kv.key.decode() for kv in response.kvs]

    def __enter__(self) -> "EtcdSemaphore":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
