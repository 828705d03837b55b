"""When did this client send the newest request whose answer proves the ZooKeeper leader heard
of it? The clock a lock holder needs in order to give up *before* the ensemble expires its
session.

What can go wrong, first: a client cut off from every server learns nothing. kazoo says
SUSPENDED only after about two thirds of a timeout of silence, and LOST only after it
reconnects and hears that the session is gone. Meanwhile the leader expires the session,
deletes the ephemeral lock node and lets the next waiter in. So the holder counts for
itself (Chubby calls this "jeopardy"). The rule: the send time of the newest request whose
answer proves the session alive, plus the session timeout, minus a margin. ``heard_at``
here is the first half of it. The server restarts the session's timer when a request *arrives*, which
is after we *sent* it, so we count from the send time, never from when the answer came back
(that can be late by a whole network delay).

Which answers count. Not every answer proves what the deadline needs, that the *leader*
heard of us: for global sessions the leader alone expires sessions; a follower answers
reads and pings itself and passes them on in its own ping exchange with the leader. Cut
from the leader, a follower keeps answering for up to syncLimit x tickTime, and a follower
that was *frozen* (a GC pause, SIGSTOP) longer than that, and dropped by the leader
meanwhile, answers the requests queued in its socket when it resumes, before it notices
(``lessons/holder_safety.py``, topology ``follower-paused``). So ``heard_at`` counts only
answers the server could give after a round trip to the leader made after our request
arrived: a ``sync`` (the follower answers it only once the leader has answered it), a write
(committed by the leader), and the connect handshake (the leader creates or revalidates the
session). ``answered_at`` counts every answer (pings and reads too): the older rule, kept for
the negative control. ``ZooKeeperLock`` also subtracts the ensemble's lag (its
``server_lag``) from the deadline: see ``zookeeper_deadline.py``.

Why a private hook: kazoo 2.11 has no public callback for "a reply arrived" (its state
listener reports only CONNECTED / SUSPENDED / LOST), and it does not keep the negotiated
session timeout. Both are visible only inside its connection handler
(``client._connection``), so ``_follow`` wraps three of its methods, for one client, once.
Nothing else in labkit touches kazoo's insides.
"""
from __future__ import annotations

import threading
import time
import weakref

from kazoo.client import KazooClient


# Requests whose answer comes only after the server heard from the leader (kazoo's request
# types): create, delete, setData, sync, multi, create2, createContainer, createTTL.
LEADER_ROUND_TRIP = frozenset({1, 2, 5, 9, 14, 15, 19, 21})


class ServerContact:
    """``heard_at``: ``time.monotonic()`` when the newest request whose answer proves a round
    trip to the leader (see the module docstring) was sent; ``answered_at``: the same for any
    answer. None until one is answered. ``session_timeout``: seconds, the timeout the server
    granted at the last (re)connect seen; until then, the one the client asked for (the
    server may raise a too-small request to its minimum, which only makes us more careful,
    or lower a too-large one to its maximum: the lab allows 0.4 s to 60 s)."""

    def __init__(self, session_timeout: float):
        self.session_timeout = session_timeout
        self.heard_at: float | None = None
        self.answered_at: float | None = None
        self._sent: dict[int | None, tuple[float, bool]] = {}   # xid -> (send time, proof?), not yet answered
        self.server: tuple[str, int] | None = None   # (host, port) of the last connection made since we follow

    def expires_by(self) -> float:
        """The monotonic time by which the server may have expired the session, if it has
        heard nothing from us since ``heard_at``. Now, if nothing was ever answered."""
        if self.heard_at is None:
            return time.monotonic()
        return self.heard_at + self.session_timeout

    def silent_for(self) -> float:
        """Seconds since the newest request whose answer proves leader contact was sent."""
        return 0.0 if self.heard_at is None else time.monotonic() - self.heard_at

    def _answered(self, sent_at: float, proof: bool) -> None:
        # Replies to pipelined requests may come back in any mix with pings: keep the newest.
        if self.answered_at is None or sent_at > self.answered_at:
            self.answered_at = sent_at
        if proof and (self.heard_at is None or sent_at > self.heard_at):
            self.heard_at = sent_at


_contacts: "weakref.WeakKeyDictionary[KazooClient, ServerContact]" = weakref.WeakKeyDictionary()
_installing = threading.Lock()


def server_contact(client: KazooClient) -> ServerContact:
    """The one ServerContact of ``client`` (started following it on the first call).
    Replies that arrived before the first call are not counted: call it before the
    requests whose answers should count (ZooKeeperLock calls it when it is created)."""
    with _installing:
        contact = _contacts.get(client)
        if contact is None:
            contact = _contacts[client] = ServerContact(client._session_timeout / 1000.0)
            _follow(client._connection, contact)
        return contact


def _follow(connection, contact: ServerContact) -> None:
    # The private hook (see the module docstring). All three methods run on kazoo's one
    # connection thread, so ``contact._sent`` needs no lock.
    submit, read_header, connect = connection._submit, connection._read_header, connection._connect

    def sending(request, timeout, xid=None):
        # before the bytes leave: the server hears it later
        contact._sent[xid] = (time.monotonic(), getattr(request, "type", None) in LEADER_ROUND_TRIP)
        return submit(request, timeout, xid)

    def reading(timeout):
        header, buffer, offset = read_header(timeout)
        sent = contact._sent.pop(header.xid, None)   # a watch event (xid -1) answers nothing
        if sent is not None:
            contact._answered(*sent)
        return header, buffer, offset

    def connecting(host, hostip, port):
        started = time.monotonic()
        read_timeout_ms, connect_timeout_ms = connect(host, hostip, port)
        contact.server = (host, port)
        contact._sent.clear()                     # request numbers (xids) restart on each connection
        contact.session_timeout = read_timeout_ms * 1.5 / 1000.0   # kazoo reads for 2/3 of the granted timeout
        contact._answered(started, True)          # the handshake: the leader made or revalidated the session
        return read_timeout_ms, connect_timeout_ms

    connection._submit, connection._read_header, connection._connect = sending, reading, connecting
