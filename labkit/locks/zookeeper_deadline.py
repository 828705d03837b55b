"""When a ZooKeeper lock holder must stop holding, and the heartbeat that keeps that moment
late: the holder's side of the client-side deadline (``ZooKeeperLock`` owns one).

What can go wrong, first: a holder cut off from the ensemble hears nothing, and kazoo tells
it nothing useful in time (SUSPENDED after two thirds of a timeout of silence, LOST only
after it reconnects). Meanwhile the leader expires the session and lets the next waiter in.
So the holder counts for itself and stops *before* the leader can act:

    give_up_at = heard_at + session_timeout x (1 - deadline_margin) - server_lag - heartbeat

``heard_at`` is the send time of the newest request whose answer came after a round trip to
the leader (a ``sync``, a write, the handshake: ``zookeeper_contact.py``; a follower frozen
longer than syncLimit x tickTime answers reads and pings queued during its freeze when it
resumes, so those do not count). ``server_lag`` is there because even then the leader hears
of a follower's clients only in its own ping exchange with it, and a follower cut from the
leader keeps answering for up to syncLimit x tickTime while the leader expires the session;
it is learned from the ensemble itself (``servers/services/zookeeper_conf.py``). The watch thread that
``start`` begins sends a heartbeat (a ``sync``) while the lock is held, so that ``heard_at``
stays fresh, and calls the lock back when the deadline passes. Whatever the lock does then
(say "lost", delete its node) is the lock's business.
"""
from __future__ import annotations

import threading
import time
import weakref
from typing import Callable

from kazoo.client import KazooClient

from labkit.locks.zookeeper_contact import server_contact
from labkit.servers.services.zookeeper_conf import FORMULA, LearnedLag, ServerUnreachable

# Rules a holder may count its deadline by: "leader round trip" (heard_at, sync heartbeats),
# and "any answer" (answered_at, exists heartbeats), the rule that a paused follower breaks,
# kept as a negative control (lessons/holder_safety.py).
PROOFS = ("leader round trip", "any answer")
# One LearnedLag per connection string (its sorted hosts), shared by every lock on it, kept while
# a lock uses it: 200 clients of one ensemble ask each server once, not 200 times at once (which
# ran a learner's process out of file descriptors, 1024 by default, in lesson 02's herd).
_learned: "weakref.WeakValueDictionary[tuple, LearnedLag]" = weakref.WeakValueDictionary()
# ... and kept by each client that learned it, for as long as the client lives: held by the locks
# alone, it went with the last lock, and a lock made per acquire (kazoo's client.Lock(path) is
# used so) asked conf again each time, a connection and a round trip more (a slowed link's
# acquire took a round trip more than its bound allows in each of its 3 rounds, a fresh-clone run).
_kept_by_client: "weakref.WeakKeyDictionary[KazooClient, LearnedLag]" = weakref.WeakKeyDictionary()
_learning = threading.Lock()


def heartbeat_for(session_timeout: float) -> float:
    """Seconds between a holder's heartbeats: a tenth of the session timeout, at most 0.1 s."""
    return min(session_timeout / 10, 0.1)


class HolderDeadline:
    """The client-side deadline of one lock on one ``KazooClient``, and its heartbeat.

    - ``deadline_margin``: a fraction of the session timeout kept for a server clock that runs
      fast and a late timer thread (0.2 covers a server clock up to 25 % fast, 1 / (1 - 0.2);
      ``lessons/clock_drift.py`` measures one 50 % fast win the race against it).
    - ``server_lag``: seconds by which the leader's knowledge of this session can trail the
      answers of the client's own server. A follower passes its clients' pings on to the
      leader only when the leader pings it (every half tick), and cut from the leader it keeps
      answering for syncLimit x tickTime: so syncLimit x tickTime + tickTime / 2. By default
      (None) it is learned from the ensemble, once per connection string and kept while a client
      of it lives (the locks of every client with the same hosts share what was learned): every server of it is asked with the ``conf`` four-letter word, and the largest lag
      taken (0 for a standalone server, which expires sessions itself; ZooKeeper's sample
      config gives 5 x 2 s + 1 s = 11 s, this lab's 5 x 0.2 s + 0.1 s = 1.1 s). A server that
      will not say (conf not in ``4lw.commands.whitelist``, unreachable) makes the first
      ``acquire`` raise ``ServerLagUnknown``, which says to pass ``server_lag=`` yourself.
      0 trusts every answer, the rule that is unsafe when the holder's follower is cut from
      the leader (``lessons/holder_safety.py`` keeps it as the negative control).
    - ``heartbeat`` (``min(timeout / 10, 0.1 s)``): while holding, the watch sends a ``sync``
      of the lock's own node that often, so the leader's last news of us is at most one
      heartbeat older than what the follower last passed on.
    - ``proof`` (an attribute, not an argument): which answers move the deadline, one of
      ``PROOFS``. "any answer" is the rule a paused follower breaks, for the negative control.

    Raises ``ValueError`` for a margin outside [0, 1) or a negative lag.
    """

    proof = "leader round trip"

    def __init__(self, client: KazooClient, deadline_margin: float = 0.2, server_lag: float | None = None):
        if not 0 <= deadline_margin < 1:
            raise ValueError(f"deadline_margin={deadline_margin!r} is a fraction of the session timeout, in [0, 1)")
        if server_lag is not None and server_lag < 0:
            raise ValueError(f"server_lag={server_lag!r}: seconds, 0 or more ({FORMULA})")
        self.client = client
        self.deadline_margin = deadline_margin
        self._server_lag = server_lag
        self._learned_lag: LearnedLag | None = None   # held here: _learned keeps it only while used
        self.contact = server_contact(client)    # before the lock's first request: its answer must count
        self._hold_over = threading.Event()       # set when a hold ends: stops its watch
        self._hold_over.set()

    @property
    def server_lag(self) -> float:
        """Seconds subtracted from the deadline for the leader's lag (see the class docstring)."""
        if self._server_lag is not None:
            return self._server_lag
        if self._learned_lag is None:
            hosts = tuple(sorted(tuple(host) for host in self.client.hosts))
            with _learning:                       # one connection string, one LearnedLag
                learned = _kept_by_client.get(self.client) or _learned.get(hosts)
                if learned is None:
                    learned = _learned[hosts] = LearnedLag(hosts)
                _kept_by_client[self.client] = learned
            self._learned_lag = learned
        return self._learned_lag.lag(self.contact.server)

    def heard_at(self) -> float | None:
        """The send time the deadline counts from (by ``proof``: ``zookeeper_contact.py``)."""
        if self.proof not in PROOFS:
            raise ValueError(f"proof={self.proof!r} is not one of {PROOFS}")
        contact = self.contact
        return contact.heard_at if self.proof == PROOFS[0] else contact.answered_at

    @property
    def heartbeat(self) -> float:
        """Seconds between the holder's heartbeats (``heartbeat_for`` its session timeout)."""
        return heartbeat_for(self.contact.session_timeout)

    def give_up_at(self) -> float:
        """The client-side deadline (``time.monotonic()``): the holder stops holding then,
        before the leader can have expired the session. Now, if nothing was ever answered."""
        heard_at = self.heard_at()
        try:
            lag = self.server_lag
        except ServerUnreachable:                 # the lag of the server we are on is not known yet
            return time.monotonic()
        if heard_at is None:
            return time.monotonic()
        return (heard_at + self.contact.session_timeout * (1 - self.deadline_margin)
                - lag - self.heartbeat)

    def check_session_is_long_enough(self, path: str) -> None:
        """Raise ``ValueError`` (saying how long it must be) if the deadline of a session this
        short would come before the next heartbeat: nothing would be left to hold ``path``."""
        timeout = self.contact.session_timeout
        slack = timeout * (1 - self.deadline_margin) - self.server_lag - 2 * self.heartbeat
        if slack <= 0:
            shortest = (self.server_lag + 0.3) / (1 - self.deadline_margin)
            raise ValueError(
                f"a {timeout:.2f} s ZooKeeper session is too short to hold {path!r} safely: the leader may "
                f"learn of this client's contact {self.server_lag:.2f} s late (server_lag), the deadline keeps a "
                f"{self.deadline_margin:.0%} margin and a {self.heartbeat:.2f} s heartbeat, which leaves no time "
                f"to hold. Ask for a session timeout of at least {shortest:.1f} s (the timeout argument of KazooClient), "
                f"or pass the server_lag of your ensemble ({FORMULA}).")

    def start(self, node: str, on_deadline: Callable[[threading.Event], None]) -> None:
        """While the lock holds ``node`` (a full path): heartbeat, and when the deadline passes
        call ``on_deadline`` with this hold's event (set it to end the hold). Ends at ``stop``.

        A lock granted after a long wait was last proven alive long ago (its wait's reads and
        kazoo's pings do not count): then it first syncs, one round trip, so that a fresh hold
        does not read as given up at once. The answer, if any, comes within a third of a
        session timeout; without it the watch gives up at the deadline it has."""
        self._hold_over = hold_over = threading.Event()
        if self.proof == PROOFS[0] and self.give_up_at() < time.monotonic() + 2 * self.heartbeat:
            self.client.sync_async(node).wait(self.contact.session_timeout / 3)
        thread = threading.Thread(target=self._watch, args=(hold_over, node, on_deadline),
                                  name=f"zookeeper-deadline-{node.rsplit('/', 1)[1]}", daemon=True)
        thread.start()

    def stop(self) -> None:
        """The hold is over (released, lost, or never made): the watch stops."""
        self._hold_over.set()

    def _watch(self, hold_over: threading.Event, node: str,
               on_deadline: Callable[[threading.Event], None]) -> None:
        beat = None                               # the heartbeat in flight: one at a time
        # The acquire's own last request was just answered (heard_at is fresh): the first
        # heartbeat can wait one interval. Sent at once, it was a fourth request per lock op.
        next_beat = time.monotonic() + self.heartbeat
        while not hold_over.is_set():             # work at a pace (a heartbeat), not a poll: it stays a loop
            now, give_up_at = time.monotonic(), self.give_up_at()
            if now >= give_up_at:
                on_deadline(hold_over)
                return
            if now >= next_beat:
                if beat is None or beat.ready():
                    # A sync: the server answers it only after a round trip to the leader, so
                    # its answer moves heard_at (zookeeper_contact.py). Queued by kazoo while
                    # the connection is down, answered when it is back. "any answer": a read.
                    beat = (self.client.sync_async(node) if self.proof == PROOFS[0]
                            else self.client.exists_async(node))
                next_beat = now + self.heartbeat
            hold_over.wait(max(min(next_beat, give_up_at) - time.monotonic(), 0.001))

    def why_given_up(self) -> dict:
        """The detail of the "lost" event a lock emits when it gives up at the deadline."""
        contact, heard_at = self.contact, self.heard_at()
        silent_for = 0.0 if heard_at is None else time.monotonic() - heard_at
        try:
            behind = f"with the leader up to {self.server_lag:.2f} s behind"
        except ServerUnreachable:
            behind = "with the lag of the server I am connected to not known (it did not answer conf)"
        proven = "the server answered after a round trip to the leader" if self.proof == PROOFS[0] else "the server answered"
        return {"silent_for": round(silent_for, 3),
                "reason": f"client-side deadline: the newest request {proven} was sent "
                          f"{silent_for:.2f} s ago; {behind} "
                          f"and a {contact.session_timeout:.2f} s session, it may expire the session at any "
                          "moment, so I stop holding"}


class GivesUpAtDeadline:
    """What a ZooKeeper holder does when its ``HolderDeadline`` passes, shared by ``ZooKeeperLock``
    and ``ZooKeeperSemaphore``: the hold ends, "lost" is emitted with the deadline's reason, and
    the holder's node is deleted if the session lives on (sent now, or as soon as the connection is
    back): a node left behind would keep a waiter out for a holder that has given up. The class
    using it has ``_guard``, ``_held``, ``token``, ``_gave_up``, ``node``, ``_session_lost``,
    ``client``, ``client_deadline`` and ``_emit``, and names its node's path in ``held_node()``."""

    def _give_up(self, hold_over: threading.Event) -> None:
        """Called by the deadline's watch thread when the deadline of this hold passes."""
        with self._guard:
            if hold_over.is_set() or not self._held:
                return                            # released or lost meanwhile
            self._held, token, self.token = False, self.token, None
            self._gave_up = True
            hold_over.set()
        self._emit("lost", token=token, **self.client_deadline.why_given_up())
        if self.node is not None and not self._session_lost:
            self.client.delete_async(self.held_node())
