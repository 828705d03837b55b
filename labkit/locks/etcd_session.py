"""EtcdSession: a lease kept alive for as long as the client lives (a port of Go's
``concurrency.Session``, etcd client/v3/concurrency/session.go).

What can go wrong, first: a lease is only a promise for ``ttl`` seconds. If the keep-alive
stops reaching the server (the process is paused, the network is cut, ``stop_keepalive()``
is called, the server is frozen) the lease expires *on the server* and etcd deletes every
key bound to it: any lock held through this session is gone. ``done`` is set when this
client finds out; from then on, stop writing to whatever the lock protects and start a
new session to try again. A paused process finds out only when it resumes, possibly long
after the server gave its lock to someone else: that is why locks need fencing tokens.

How the client finds out without the server: it keeps its own, conservative deadline.
The server restarts the lease's TTL when a keep-alive *arrives*, which is after this
client *sent* it. So the lease surely lives until (send time of the last keep-alive the
server acknowledged) + (the TTL in its answer), and the client counts from the send time,
minus a drift margin for clocks that run at slightly different rates and a timer that
wakes late. Counting from when the answer came back would be late by the answer's whole
trip; asking the server "is my lease alive?" cannot work when the server is unreachable,
which is exactly when it matters. When that deadline passes with no newer acknowledged
keep-alive, ``done`` is set ("client-side deadline") before the server can have expired
the lease.

A mutex only borrows the lease; the session owns it. Closing the session revokes it.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

import etcd3
import grpc
from etcd3 import etcdrpc, exceptions

from labkit.record.events import EventSink, ignore_events

# What a call can fail with while the server is unreachable.
UNREACHABLE = (grpc.RpcError, etcd3.Etcd3Exception)

_ERRORS_BY_CODE = {
    grpc.StatusCode.UNAVAILABLE: exceptions.ConnectionFailedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: exceptions.ConnectionTimeoutError,
    grpc.StatusCode.INTERNAL: exceptions.InternalServerError,
    grpc.StatusCode.FAILED_PRECONDITION: exceptions.PreconditionFailedError,
}


def rpc(client: etcd3.Etcd3Client, method, request, timeout: float | None = None):
    """Call one of the client's gRPC stub methods; raise python-etcd3's exceptions.

    Why not python-etcd3's own methods: after a single UNAVAILABLE they mark the endpoint
    failed for 300 s, and the client then refuses every call ("Trying to use a failed
    node"), so a recipe could not outlive a server restart. Other gRPC errors (NOT_FOUND:
    lease not found) are raised as ``grpc.RpcError``."""
    try:
        return method(request, client.timeout if timeout is None else timeout,
                      credentials=client.call_credentials, metadata=client.metadata)
    except grpc.RpcError as error:
        known = _ERRORS_BY_CODE.get(error.code())
        if known is None:
            raise
        raise known() from error


class EtcdSession:
    """A lease with a background keep-alive thread.

    ``lease_id`` and ``ttl`` (the TTL the server granted: etcd may round a small request
    up to its minimum) describe the lease. ``done`` is a ``threading.Event`` set once the
    lease is lost (revoked, not found, or its client-side deadline passed) or the session
    is closed; ``lost_reason`` says which. ``remaining_ttl()`` and ``is_expired`` read the
    client-side deadline; ``server_ttl()`` asks the server.

    ``drift_margin``: the client gives up this fraction of the TTL early (at least 50 ms).

    Raises whatever python-etcd3 raises if the lease cannot be granted (for instance
    ``etcd3.exceptions.ConnectionFailedError`` when no server answers at the endpoint).
    """

    def __init__(self, client: etcd3.Etcd3Client, ttl: int = 5, on_event: EventSink = ignore_events,
                 drift_margin: float = 0.1):
        if ttl <= 0:
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
        if not 0 <= drift_margin < 1:
            raise ValueError(f"drift_margin={drift_margin!r} is a fraction of the TTL, in [0, 1)")
        self.client = client
        self.on_event = on_event
        sent = time.monotonic()   # the grant starts the TTL on the server after this
        lease = client.lease(ttl)
        self.lease_id: int = lease.id
        self.ttl: int = lease.ttl
        self.margin = max(drift_margin * self.ttl, 0.05)
        self._deadline = self._deadline_after(sent, self.ttl)
        self.done = threading.Event()
        self.lost_reason: str | None = None
        self._refreshing = True
        self._lease_gone = False  # the server said so: nothing left to revoke
        self._closing = threading.Event()
        self._state_lock = threading.Lock()
        self._done_callbacks: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._keep_alive, name=f"etcd-keepalive-{self.lease_id:x}",
                                        daemon=True)
        self._thread.start()

    # -- the keep-alive -------------------------------------------------------------
    def _keep_alive(self) -> None:
        # Like Go's client: refresh every TTL/3. Unlike it, the deadline counts from when an
        # acknowledged keep-alive was sent (see the module docstring), and when it passes
        # this client gives up on its own, whatever the server might still answer later.
        # (Work at a pace, not a poll: it stays a loop.)
        interval = max(self.ttl / 3.0, 0.1)
        next_refresh = time.monotonic() + interval
        while True:
            now = time.monotonic()
            if now >= self._deadline:
                self._mark_lost(self._deadline_reason())
                return
            wait = max(min(self._deadline, next_refresh) - now, 0.0) if self._refreshing else self._deadline - now
            if self._closing.wait(wait):
                return
            if not self._refreshing or time.monotonic() < next_refresh:
                continue                        # stop_keepalive(): only watch the deadline come
            next_refresh = time.monotonic() + interval
            sent = time.monotonic()
            try:
                # bounded by the deadline: a frozen server must not hold this thread past it
                remaining = self._refresh(timeout=max(self._deadline - sent, 0.05))
            except Exception:  # any failure is "no refresh": this thread must not die
                next_refresh = time.monotonic() + min(interval, 0.2)  # try again soon
                continue
            if remaining <= 0:
                self._lease_gone = True
                self._mark_lost("keep-alive answered that the lease is not found: it expired or was revoked")
                return
            self._deadline = max(self._deadline, self._deadline_after(sent, remaining))

    def _deadline_after(self, sent: float, ttl: float) -> float:
        return sent + ttl - self.margin

    def _deadline_reason(self) -> str:
        return (f"client-side deadline: no keep-alive sent in the last {self.ttl} s (the TTL) was acknowledged, "
                f"less a {self.margin:.2f} s margin; the server may expire the lease at any moment")

    def _refresh(self, timeout: float) -> int:
        # The lease stub is called directly (not client.refresh_lease) to give the call
        # its own timeout: a frozen server must not hang the keep-alive past the deadline.
        request = etcdrpc.LeaseKeepAliveRequest(ID=self.lease_id)
        responses = self.client.leasestub.LeaseKeepAlive(iter([request]), timeout,
                                                        credentials=self.client.call_credentials,
                                                        metadata=self.client.metadata)
        return max((response.TTL for response in responses), default=0)

    def _mark_lost(self, reason: str, announce: bool = True) -> None:
        with self._state_lock:
            if self.done.is_set():
                return
            self.lost_reason = reason
            self.done.set()
            callbacks = list(self._done_callbacks)
        if announce:
            self.on_event("lost", reason=reason, lease=f"{self.lease_id:x}")
        for callback in callbacks:
            callback()

    # -- what a caller can ask and do -----------------------------------------------
    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once, when ``done`` is set (at once if it already is). It runs
        on the keep-alive thread or the caller of ``revoke``/``close``: keep it short."""
        with self._state_lock:
            if not self.done.is_set():
                self._done_callbacks.append(callback)
                return
        callback()

    def remaining_ttl(self) -> float:
        """Seconds until the client-side deadline: the lease surely lives that long on the
        server (it may live a little longer). -1 once the session is done. Asks no server."""
        if self.done.is_set():
            return -1
        return max(self._deadline - time.monotonic(), 0.0)

    @property
    def is_expired(self) -> bool:
        """True once the client-side deadline has passed or the session is done: from then
        on the server may have expired the lease, so nothing held through it counts. True a
        little *before* the server expires it, never after."""
        return self.done.is_set() or time.monotonic() >= self._deadline

    def server_ttl(self, timeout: float | None = None) -> int:
        """Seconds the server still gives the lease, asked now; -1 once it is gone. Raises
        python-etcd3's connection errors if the server cannot be reached (when a holder
        needs the answer most: use ``remaining_ttl()`` to decide, this to observe)."""
        request = etcdrpc.LeaseTimeToLiveRequest(ID=self.lease_id)
        return rpc(self.client, self.client.leasestub.LeaseTimeToLive, request, timeout).TTL

    def stop_keepalive(self) -> None:
        """A fault for lessons: stop refreshing the lease, as a cut-off client would. The
        lease expires on the server about ``ttl`` seconds after the last acknowledged
        keep-alive, its keys are deleted, and ``done`` is set a little before that, at the
        client-side deadline."""
        self._refreshing = False

    def revoke(self) -> None:
        """Revoke the lease now: the server deletes its keys at once (a lock held through
        this session is released to the next waiter). Emits ``lost``. Raises python-etcd3's
        connection errors if the server cannot be reached; the lease then expires by TTL."""
        self._stop_thread()
        try:
            self._revoke()
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
        self._lease_gone = True
        self._mark_lost("the lease was revoked by this client")

    def close(self) -> None:
        """End the session: stop the keep-alive and revoke the lease (Go's ``Close``).
        Safe to call twice. If the server cannot be reached, the lease expires by TTL."""
        self._stop_thread()
        if not self._lease_gone:
            try:
                self._revoke()
                self._lease_gone = True
            except UNREACHABLE:
                pass  # not found (already gone) or unreachable: either way it ends by TTL
        self._mark_lost("the session was closed", announce=False)

    def _revoke(self) -> None:
        # Go bounds the revoke by the TTL: after that the lease has expired anyway.
        rpc(self.client, self.client.leasestub.LeaseRevoke, etcdrpc.LeaseRevokeRequest(ID=self.lease_id),
            timeout=self.ttl)

    def _stop_thread(self) -> None:
        self._closing.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=self.ttl + 5)

    def __enter__(self) -> "EtcdSession":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"done: {self.lost_reason}" if self.done.is_set() else "alive"
        return f"EtcdSession(lease={self.lease_id:x}, ttl={self.ttl}, {state})"
