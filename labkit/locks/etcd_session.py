"""EtcdSession: a lease kept alive for as long as the client lives (a port of Go's
``concurrency.Session``, etcd client/v3/concurrency/session.go).

What can go wrong, first: a lease is only a promise for ``ttl`` seconds. If the keep-alive
stops reaching the server (the process is paused, the network is cut, ``stop_keepalive()``
is called, the server is frozen) the lease expires *on the server* and etcd deletes every
key bound to it: any lock held through this session is gone. ``done`` is set when this
client finds out; from then on, stop writing to whatever the lock protects and start a
new session to try again. A paused process finds out only when it resumes, possibly long
after the server gave its lock to someone else: that is why locks need fencing tokens.

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
    lease is lost (expired, revoked, not found, or unrefreshed for a whole TTL) or the
    session is closed; ``lost_reason`` says which.

    Raises whatever python-etcd3 raises if the lease cannot be granted (for instance
    ``etcd3.exceptions.ConnectionFailedError`` when no server answers at the endpoint).
    """

    def __init__(self, client: etcd3.Etcd3Client, ttl: int = 5, on_event: EventSink = ignore_events):
        if ttl <= 0:
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
        self.client = client
        self.on_event = on_event
        lease = client.lease(ttl)
        self.lease_id: int = lease.id
        self.ttl: int = lease.ttl
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
        # Like Go's client: refresh every TTL/3, and keep a local deadline. If no refresh
        # succeeds before the deadline, the server has expired the lease by now.
        interval = max(self.ttl / 3.0, 0.1)
        deadline = time.monotonic() + self.ttl
        while True:
            wait = interval if self._refreshing else max(deadline - time.monotonic(), 0.05)
            if self._closing.wait(wait):
                return
            if not self._refreshing:
                # stop_keepalive() was called: no refresh, only watch the lease run out.
                if time.monotonic() < deadline:
                    continue
                remaining = self._server_ttl(timeout=interval)
                if remaining is not None and remaining > 0:
                    deadline = time.monotonic() + remaining
                    continue
                self._lease_gone = remaining is not None
                self._mark_lost("the lease expired on the server: no keep-alive reached it for its TTL "
                                f"({self.ttl} s)")
                return
            try:
                remaining = self._refresh(timeout=max(min(interval, deadline - time.monotonic()), 0.05))
            except Exception as error:  # any failure is "no refresh": this thread must not die
                if time.monotonic() >= deadline:
                    self._mark_lost(f"no keep-alive succeeded for a whole TTL ({self.ttl} s); the server has "
                                    f"expired the lease by now (last error: {error.__class__.__name__})")
                    return
                continue
            if remaining <= 0:
                self._lease_gone = True
                self._mark_lost("keep-alive answered that the lease is not found: it expired or was revoked")
                return
            deadline = time.monotonic() + remaining

    def _refresh(self, timeout: float) -> int:
        # The lease stub is called directly (not client.refresh_lease) to give the call
        # its own timeout: a frozen server must not hang the keep-alive past the deadline.
        request = etcdrpc.LeaseKeepAliveRequest(ID=self.lease_id)
        responses = self.client.leasestub.LeaseKeepAlive(iter([request]), timeout,
                                                        credentials=self.client.call_credentials,
                                                        metadata=self.client.metadata)
        return max((response.TTL for response in responses), default=0)

    def _server_ttl(self, timeout: float | None) -> int | None:
        try:
            return self.remaining_ttl(timeout)
        except Exception:  # unknown for now: the keep-alive thread asks again later
            return None

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

    def remaining_ttl(self, timeout: float | None = None) -> int:
        """Seconds the server still gives the lease; -1 once it is gone. Raises
        python-etcd3's connection errors if the server cannot be reached."""
        request = etcdrpc.LeaseTimeToLiveRequest(ID=self.lease_id)
        return rpc(self.client, self.client.leasestub.LeaseTimeToLive, request, timeout).TTL

    def stop_keepalive(self) -> None:
        """A fault for lessons: stop refreshing the lease, as a paused or cut-off client
        would. The lease expires on the server after ``ttl`` seconds, its keys are deleted,
        and ``done`` is set when this client sees the lease gone."""
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
