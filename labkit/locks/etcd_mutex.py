"""EtcdMutex: a port of Go's ``concurrency.Mutex`` (etcd client/v3/concurrency/mutex.go
and key.go), on python-etcd3.

What can go wrong, first: the lock lives exactly as long as the session's lease. If the
keep-alive stops (a paused process, a cut network, ``session.stop_keepalive()``), etcd
deletes the key after the TTL and the next waiter acquires while this holder may still
believe it holds. ``is_held`` turns False and a ``lost`` event is emitted at the session's
client-side deadline, a little before the server can free the key (see etcd_session.py);
a paused client notices late. So guard every write: put ``is_owner()`` in the
same transaction, or hand ``token`` (my key's create revision) to a fenced store.
A waiter whose lease is lost raises ``SessionExpired``; ``lock(timeout)`` raises
``LockTimeout``; both leave no key of ours in the queue.

The protocol: each contender puts ``<prefix>/<lease id in hex>`` bound to its lease. etcd
stamps it with a create revision, one global counter, so the queue is creation order and
the smallest create revision holds the lock. A waiter watches only the key just ahead of
it, so a release wakes exactly one waiter instead of all of them.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time

import etcd3
import grpc
from etcd3 import etcdrpc
from etcd3.events import DeleteEvent
from etcd3.utils import prefix_range_end

from labkit.record.events import EventSink, ignore_events
from labkit.timing import became_true
from labkit.locks.errors import Locked, LockTimeout, PathInUse, SessionExpired
from labkit.locks.etcd_semaphore import semaphore_limit
from labkit.locks.etcd_session import UNREACHABLE, EtcdSession, rpc

_SESSION_DONE = object()  # put in a waiter's queue when its session ends


class EtcdMutex:
    """A mutual-exclusion lock on ``prefix``, queued in create-revision order.

    Interoperates with Go's Mutex and ``etcdctl lock NAME`` when ``prefix`` is ``NAME``.
    Several EtcdMutex objects on one session and prefix share one key, as in Go.
    """

    def __init__(self, session: EtcdSession, prefix: str, identifier: str = "",
                 on_event: EventSink = ignore_events):
        self.session = session
        self.client = session.client
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"  # Go: pfx + "/"
        self.identifier = identifier
        self.on_event = on_event
        # what my key holds: empty for a lock, the proposal of an election (etcd_election.py)
        self.value: bytes = b""
        self.header_revision: int | None = None  # etcd's revision when the lock was taken
        self._key: str | None = None
        self._revision = -1  # my key's create revision: the queue position and the token
        self._held = False
        self._waiting: queue.Queue | None = None
        self._state_lock = threading.Lock()
        session.add_done_callback(self._on_session_done)

    # -- acquire ----------------------------------------------------------------------
    def lock(self, timeout: float | None = None) -> int:
        """Block until held; return the fencing token (my key's create revision).
        Raises LockTimeout (my key is deleted), SessionExpired (the lease is gone: start
        a new session), or python-etcd3's connection errors."""
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        response, owner = self._join_queue()
        if owner is None:
            return self._acquired(response.header.revision)
        try:
            mine = self.wait_for_turn(self._revision - 1, deadline)
        except LockTimeout:
            self._leave_queue()  # Go: Unlock when the context ends
            waited = time.monotonic() - started
            self.on_event("timeout", waited=waited)
            raise LockTimeout(self.prefix, waited) from None
        except BaseException:
            self._leave_queue()  # Go: Unlock when the wait fails
            raise
        # Re-check: the keys ahead are gone, but so may be mine if the lease expired meanwhile.
        if mine is None or not mine.kvs or self.session.done.is_set():
            reason = self.session.lost_reason or f"my key {self._key} is gone: its lease expired or was revoked"
            self._emit_lost(reason, token=None)
            self._leave_queue()
            raise SessionExpired(f"lock {self.prefix!r}: {reason}; start a new EtcdSession and lock again")
        return self._acquired(mine.header.revision)

    acquire = lock

    def try_lock(self) -> int:
        """Take the lock if nobody holds it and return the token; else leave the queue
        and raise Locked. Raises SessionExpired if the session is already done."""
        response, owner = self._join_queue()
        if owner is None:
            return self._acquired(response.header.revision)
        self._delete_my_key()
        raise Locked(f"lock {self.prefix!r} is held by {owner.key.decode()} (create revision "
                     f"{owner.create_revision}); call lock() to wait for it, or try again later")

    def _join_queue(self):
        """Say what I want, queue my key and read the owner (one transaction). Returns the
        response and the owner's key-value, or None for the owner when it is me."""
        self.on_event("requested", prefix=self.prefix)
        self._raise_if_session_done()
        response = self._try_acquire()
        owner = response.responses[1].response_range.kvs
        if owner and semaphore_limit(owner[0].value) is not None:
            self._leave_queue()
            raise PathInUse(f"{self.prefix!r} is a counting semaphore's prefix ({owner[0].key.decode()} holds one "
                            "of its slots): a mutex there would not exclude the semaphore's holders",
                            hint="give the mutex a prefix of its own")
        if not owner or owner[0].create_revision == self._revision:
            return response, None
        return response, owner[0]

    def _try_acquire(self) -> etcdrpc.TxnResponse:
        # One transaction, one round trip: queue myself (unless my key exists already,
        # because this session holds or waits) and read the current owner.
        # python-etcd3's transaction() cannot sort or limit a get, so the request is built
        # from its protobuf messages, exactly as Go's txn: If(create(myKey) == 0)
        # Then(put(myKey, lease), getOwner) Else(get(myKey), getOwner).
        self._key = f"{self.prefix}{self.session.lease_id:x}"
        key = self._key.encode()
        get_owner = etcdrpc.RequestOp(request_range=self._by_create_revision(etcdrpc.RangeRequest.ASCEND))
        request = etcdrpc.TxnRequest(
            compare=[etcdrpc.Compare(key=key, target=etcdrpc.Compare.CREATE,
                                     result=etcdrpc.Compare.EQUAL, create_revision=0)],
            success=[etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key, value=self.value,
                                                                      lease=self.session.lease_id)), get_owner],
            failure=[etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=key)), get_owner])
        try:
            response = rpc(self.client, self.client.kvstub.Txn, request)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            self._key = None
            raise SessionExpired(f"lock {self.prefix!r}: the server does not know lease "
                                 f"{self.session.lease_id:x} any more (expired or revoked); "
                                 "start a new EtcdSession") from None
        if response.succeeded:
            self._revision = response.header.revision
            self.on_event("created", key=self._key, revision=self._revision)
        else:
            self._revision = response.responses[0].response_range.kvs[0].create_revision
        return response

    def _by_create_revision(self, order: int, limit: int = 1, max_create_revision: int = 0) -> etcdrpc.RangeRequest:
        # Go's WithFirstCreate() (ASCEND) and WithLastCreate() (DESCEND): the whole prefix
        # sorted by create revision, one key.
        prefix = self.prefix.encode()
        return etcdrpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix), limit=limit,
                                    sort_target=etcdrpc.RangeRequest.CREATE, sort_order=order,
                                    max_create_revision=max_create_revision)

    # -- wait (Go's key.go) ------------------------------------------------------------
    def wait_for_turn(self, max_create_revision: int, deadline: float | None) -> etcdrpc.RangeResponse | None:
        """The wait step of ``lock()`` (Go's ``waitDeletes``), and the hook a subclass may
        replace: block until no key under the prefix has a create revision at or below
        ``max_create_revision`` (mine minus one), then return my own key as read after that
        (a ``RangeResponse``; no ``kvs`` if my key is gone), or None if the session ended
        first. Raise ``LockTimeout`` once ``deadline`` (``time.monotonic()``) has passed;
        ``lock()`` then leaves the queue. The practice exercise plugs the learner's step in
        here (labkit/practice/exercises/etcd_exercise.py)."""
        # Watch only the youngest key ahead (Go's WithLastCreate + WithMaxCreateRev): when it
        # goes, look again, because a waiter ahead of me may have left while the holder
        # still holds. My own key is read with the last look, in the same transaction.
        while not self.session.done.is_set():
            ahead, mine = self._look_ahead(max_create_revision)
            if not ahead.kvs:
                return mine
            self._wait_delete(ahead.kvs[0].key.decode(), ahead.header.revision, deadline)
        return None

    def _look_ahead(self, max_create_revision: int) -> tuple[etcdrpc.RangeResponse, etcdrpc.RangeResponse]:
        # The youngest key ahead of mine, and my own key, in one read-only transaction: Go
        # reads them one after the other (waitDeletes, then Get(myKey)); read together they
        # come from one revision, and a hand-off costs one round trip less.
        request = etcdrpc.TxnRequest(success=[
            etcdrpc.RequestOp(request_range=self._by_create_revision(etcdrpc.RangeRequest.DESCEND,
                                                                     max_create_revision=max_create_revision)),
            etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=self._key.encode()))])
        response = rpc(self.client, self.client.kvstub.Txn, request)
        ahead, mine = (op.response_range for op in response.responses)
        ahead.header.CopyFrom(response.header)  # the ranges inside a txn carry no header of their own
        mine.header.CopyFrom(response.header)
        return ahead, mine

    def _wait_delete(self, key: str, revision: int, deadline: float | None) -> None:
        events: queue.Queue = queue.Queue()
        self.on_event("watch", target=key, what="predecessor")
        self._waiting = events
        # Arming the watch is a call to the server like any other: if it fails (a server
        # restarting right now), there is no watch yet, and the re-check below arms one.
        watch_id = self._watch(key, events, revision)
        try:
            # Go leaves "stop early when my session ends" as a TODO; a lesson needs it,
            # or a waiter whose lease is gone would wait on its predecessor forever.
            if self.session.done.is_set():
                return
            recheck_every = self.session.ttl if watch_id is not None else 0.2
            while True:
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
                try:
                    response = events.get(timeout=recheck_every if remaining is None
                                          else min(remaining, recheck_every))
                except queue.Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise LockTimeout(self.prefix, 0.0) from None
                    gone, watch_id = self._rewatch_unless_gone(key, events, watch_id)
                    if gone:
                        return
                    recheck_every = self.session.ttl if watch_id is not None else 0.2
                    continue
                if response is _SESSION_DONE:
                    return
                if response is None or isinstance(response, Exception):
                    # The watch stream ended (a server restart, a lost connection). python-etcd3
                    # then calls back with the gRPC error, or with None when the server closed
                    # the stream without one: no events either way. The key may still be
                    # there, so look again soon and re-arm the watch.
                    recheck_every = 0.2
                    continue
                recheck_every = self.session.ttl
                if any(isinstance(event, DeleteEvent) for event in response.events):
                    self.on_event("woke", reason="deleted", target=key)
                    return
        finally:
            self._waiting = None
            self._cancel(watch_id)

    def _watch(self, key: str, events: queue.Queue, start_revision: int) -> int | None:
        """A watch on ``key`` from ``start_revision`` that puts what it sees in ``events``;
        None if the server could not be reached."""
        try:
            return self.client.add_watch_callback(key, events.put, start_revision=start_revision)
        except UNREACHABLE:
            return None

    def _cancel(self, watch_id: int | None) -> None:
        if watch_id is not None:
            with contextlib.suppress(Exception):  # a watch whose stream broke may be unknown already
                self.client.cancel_watch(watch_id)

    def _rewatch_unless_gone(self, key: str, events: queue.Queue, watch_id: int | None) -> tuple[bool, int | None]:
        # python-etcd3 may drop a watch when its stream breaks (a server restart), with an
        # error or without a word. So, after an error and once per TTL, look at the key:
        # (True, None) if it is gone; else re-arm the watch from the revision I looked at,
        # and return (False, the new watch id, or None if the server is away right now:
        # then the caller looks again soon, and the session says if the lease is lost).
        self._cancel(watch_id)
        try:
            current = self._range(etcdrpc.RangeRequest(key=key.encode()))
        except UNREACHABLE:
            return False, None
        if not current.kvs:
            self.on_event("woke", reason="deleted (seen by a re-check, the watch was silent)", target=key)
            return True, None
        return False, self._watch(key, events, current.header.revision + 1)

    # -- hold and release --------------------------------------------------------------
    def _acquired(self, header_revision: int) -> int:
        with self._state_lock:
            self.header_revision = header_revision
            self._held = True
        self.on_event("acquired", token=self._revision, key=self._key)
        return self._revision

    def _on_session_done(self) -> None:
        waiting = self._waiting
        if waiting is not None:
            waiting.put(_SESSION_DONE)
        with self._state_lock:
            was_held, self._held = self._held, False
        if was_held:
            self._emit_lost(self.session.lost_reason, token=self._revision)

    def _emit_lost(self, reason: str | None, token: int | None) -> None:
        # A session given the same sink has announced its lost lease already: say it once.
        if self.session.done.is_set() and self.on_event == self.session.on_event:
            return
        self.on_event("lost", reason=reason, key=self._key, token=token)

    def unlock(self) -> None:
        """Delete my key, letting the next waiter in. Idempotent; emits ``released`` if the
        lock was held. Raises python-etcd3's connection errors if etcd cannot be reached
        before the session's deadline (the key then goes when the lease expires)."""
        with self._state_lock:
            was_held, self._held = self._held, False
        token = self._revision
        if self._key is not None:
            self._delete_until_gone()
        if was_held:
            self.on_event("released", token=token)

    release = unlock

    def _leave_queue(self) -> None:
        # On the way out of a failed lock(): if etcd cannot be reached, the lease removes
        # the key later, and the caller should hear about the first failure, not this one.
        with contextlib.suppress(*UNREACHABLE):
            self._delete_my_key()
        self._key, self._revision = None, -1

    def _delete_my_key(self, timeout: float | None = None) -> None:
        rpc(self.client, self.client.kvstub.DeleteRange, etcdrpc.DeleteRangeRequest(key=self._key.encode()), timeout)
        self._key, self._revision = None, -1

    def _delete_until_gone(self) -> None:
        # A delete proposed while the etcd leader dies can be lost with it, and the member
        # then answers only when its request timeout runs out (5 s + 2 election timeouts:
        # 6 s in the lab), all that time keeping the next waiter out. Measured in a torture
        # run: a 6 s stall with nobody holding. So each try waits a third of the TTL (1 s at
        # most: about two elections here) and the delete is sent again (deleting my own key
        # twice is harmless), until the session's deadline: past it the lease expires and
        # takes the key without me.
        attempt = min(1.0, max(0.2, self.session.ttl / 3))
        failures: list[BaseException] = []

        def deleted() -> bool:
            try:
                self._delete_my_key(timeout=attempt)
                return True
            except UNREACHABLE as error:
                failures.append(error)
                return self.session.is_expired

        became_true(deleted, timeout=self.session.ttl + attempt, poll=0.05)
        if self._key is not None:
            raise failures[-1]

    def is_owner(self) -> etcd3.transactions.Create:
        """A comparison for a transaction: true only while my key exists with the create
        revision it had when I queued. Guard writes with it (fencing):
        ``client.transaction(compare=[mutex.is_owner()], success=[put], failure=[])``."""
        return self.client.transactions.create(self._key or "\x00") == self._revision

    @property
    def key(self) -> str | None:
        return self._key

    @property
    def token(self) -> int | None:
        return self._revision if self.is_held else None

    @property
    def is_held(self) -> bool:
        """False from the session's client-side deadline on, even before the keep-alive
        thread has noticed: the server may free my key any moment after it."""
        return self._held and not self.session.is_expired

    def contenders(self) -> list[str]:
        """The keys queued under the prefix, holder first (create-revision order)."""
        request = self._by_create_revision(etcdrpc.RangeRequest.ASCEND, limit=0)
        return [kv.key.decode() for kv in self._range(request).kvs]

    # -- plumbing ----------------------------------------------------------------------
    def _raise_if_session_done(self) -> None:
        if self.session.done.is_set():
            raise SessionExpired(f"lock {self.prefix!r}: the session is done ({self.session.lost_reason}); "
                                 "start a new EtcdSession")

    def _range(self, request: etcdrpc.RangeRequest) -> etcdrpc.RangeResponse:
        # Built by hand: python-etcd3's get() sends max_create_revision as min_mod_revision.
        return rpc(self.client, self.client.kvstub.Range, request)

    def __enter__(self) -> "EtcdMutex":
        self.lock()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.unlock()

    def __repr__(self) -> str:
        state = f"held, token {self._revision}" if self.is_held else "not held"
        return f"EtcdMutex({self.prefix!r}, key={self._key!r}, {state})"
