"""The merged, ordered events of every lock client and every injected fault.

Events arrive from threads of this process (``history.sink(client)``) and from other
processes (``remote_sink(history.listen(), client)``). What can go wrong: a client
process may die before its last events reach us (a killed holder never says
"released"), so its hold stays open in ``holds()``; and events of different processes
are ordered by their wall-clock time, which is one clock on one machine but can still
put two events that race within microseconds in either order. ``wait_for`` lets a
notebook wait for an event to arrive instead of sleeping a guess.
"""
from __future__ import annotations

import bisect
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any, Callable, Iterable

from labkit.errors import LabError
from labkit.record.events import Event, EventSink, sink_for
from labkit.vocabulary import HOLD_ENDS

FAULT_CLIENT = "lab"  # the "client" name under which injected faults are recorded


class HistoryUnreachable(LabError):
    """A client process could not reach the History that collects its events."""


@dataclass(frozen=True)
class Hold:
    """One interval during which a client believed it held the lock.
    ``end`` is None and ``end_reason`` is "open" if the history ends first (still
    holding, or the client was killed before it could say anything)."""

    client: str
    token: Any
    start: float
    end: float | None
    end_reason: str  # "released", "lost", "superseded" (acquired again) or "open"
    lost_reason: str = ""


class History:
    """Thread-safe, time-ordered list of Events (see ``labkit.record.events``)."""

    def __init__(self, events: Iterable[Event] = ()):
        self._lock = threading.Condition()
        self._keys: list[tuple[float, int]] = []  # (time, arrival number): a stable sort key
        self._events: list[Event] = []
        self._arrivals = 0
        self._listener: Listener | None = None
        self._address: str | None = None
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        for event in events:
            self.append(event)

    # ---- feeding -------------------------------------------------------------------
    def append(self, event: Event) -> None:
        with self._lock:
            key = (event.time, self._arrivals)
            self._arrivals += 1
            index = bisect.bisect(self._keys, key)
            self._keys.insert(index, key)
            self._events.insert(index, event)
            self._lock.notify_all()

    def sink(self, client: str) -> EventSink:
        """The ``on_event`` callable to give a recipe running in this process."""
        return sink_for(client, self.append)

    def record_fault(self, what: str, target: str, **detail: Any) -> Event:
        """Record an injected fault (e.g. what="pause", target="client-2", seconds=3)."""
        event = Event(time.time(), FAULT_CLIENT, "fault", {"what": what, "target": target, **detail})
        self.append(event)
        return event

    def listen(self) -> str:
        """Accept events from other processes; returns the address to give
        ``remote_sink`` ("127.0.0.1:PORT/AUTHKEY-HEX"). Idempotent. Call ``close()``."""
        with self._lock:
            if self._closing.is_set():
                raise HistoryUnreachable("this History is closed and accepts no more remote events",
                                         hint="create a new History() for a new experiment")
            if self._address is None:
                authkey = secrets.token_bytes(16)
                self._listener = Listener(("127.0.0.1", 0), authkey=authkey)
                host, port = self._listener.address
                self._address = f"{host}:{port}/{authkey.hex()}"
                self._start_thread(self._accept_loop, "history-accept")
            return self._address

    def _start_thread(self, target: Callable[..., None], name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing.is_set():
            try:
                connection = self._listener.accept()
            except (OSError, EOFError, AuthenticationError):
                # a peer that failed the authkey handshake, or the listener closing
                continue
            if self._closing.is_set():
                connection.close()
                return
            self._start_thread(self._read_loop, "history-reader", connection)

    def _read_loop(self, connection: Connection) -> None:
        # poll with a short timeout so that close() is noticed even if the peer is silent;
        # events already on the wire when close() is called are still read
        try:
            while True:
                if connection.poll(0.1):
                    self.append(Event.from_dict(connection.recv()))
                elif self._closing.is_set():
                    return
        except (EOFError, OSError):
            pass  # the client process ended or was killed: its events so far are kept
        finally:
            connection.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting remote events and join the reader threads. Idempotent."""
        if self._closing.is_set():
            return
        self._closing.set()
        if self._listener is not None and self._address is not None:
            # accept() does not notice a closed socket; a bare connection of our own wakes it
            # (its failed handshake is ignored by the accept loop, which then sees _closing)
            host, port = self._listener.address
            try:
                socket.create_connection((host, port), timeout=1.0).close()
            except OSError:
                pass
            self._listener.close()
        for thread in self._threads:
            thread.join(timeout)

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def wait_for(self, kind: str, client: str | None = None, count: int = 1, timeout: float = 10.0) -> list[Event]:
        """Block until ``count`` events of ``kind`` (of ``client``) are in the history.
        Raises TimeoutError naming what was missing."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:   # not wait_until: every new event notifies the Condition, so this wakes at once
                found = self.events(client=client, kind=kind)
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"waited {timeout:.1f} s for {count} {kind!r} event(s)"
                        f"{' of ' + client if client else ''}, saw {len(found)}; "
                        "is the client process alive and connected to this history?")
                self._lock.wait(remaining)

    # ---- queries ---------------------------------------------------------------------
    def events(self, client: str | None = None, kind: str | Iterable[str] | None = None) -> list[Event]:
        kinds = {kind} if isinstance(kind, str) else (set(kind) if kind is not None else None)
        with self._lock:
            return [e for e in self._events
                    if (client is None or e.client == client) and (kinds is None or e.kind in kinds)]

    def latest(self, client: str, count: int = 1) -> list[Event]:
        """The last ``count`` events of ``client``, oldest first (fewer if it has fewer):
        read from the end, so asking often costs little however long the history is."""
        found: list[Event] = []
        with self._lock:
            for event in reversed(self._events):
                if event.client == client:
                    found.append(event)
                    if len(found) == count:
                        break
        return found[::-1]

    def clients(self) -> list[str]:
        """Client names in order of their first event (faults excluded)."""
        seen: dict[str, None] = {}
        for event in self.events():
            if event.client != FAULT_CLIENT:
                seen.setdefault(event.client, None)
        return list(seen)

    def holds(self) -> list[Hold]:
        """Hold intervals from each client's acquired → released/lost, ordered by start."""
        return holds_of(self.events())

    def acquisition_order(self) -> list[str]:
        return [event.client for event in self.events(kind="acquired")]

    def wakeups_per_release(self, clock_slack: float = 0.01) -> list[int]:
        """For each hand-off, the number of distinct waiters that woke because of it: see
        ``wakeups_per_release`` (this module), computed on one snapshot of the history."""
        return wakeups_per_release(self.events(), clock_slack)

    def to_rows(self) -> list[dict[str, Any]]:
        """One dict per event, time in seconds since the first event: for a table."""
        events = self.events()
        origin = events[0].time if events else 0.0
        return [{"t (s)": round(event.time - origin, 6), "client": event.client, "kind": event.kind,
                 "detail": ", ".join(f"{key}={value}" for key, value in event.detail.items())}
                for event in events]

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


def _basename(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1]


def _hold(started: Event, end: float | None, reason: str, lost_reason: str = "") -> Hold:
    return Hold(started.client, started.detail.get("token"), started.time, end, reason, lost_reason)


def holds_of(events: Iterable[Event]) -> list[Hold]:
    """The holds in ``events`` (in time order): each client's acquired → released/lost,
    ordered by start. A second "acquired" without an end closes the first as "superseded"
    (a recipe bug); a hold the events never end is "open"."""
    holds: list[Hold] = []
    open_holds: dict[str, Event] = {}
    for event in events:
        if event.kind not in ("acquired", *HOLD_ENDS):
            continue
        started = open_holds.pop(event.client, None)
        if event.kind == "acquired":
            if started is not None:  # a second acquire without an end: a recipe bug
                holds.append(_hold(started, event.time, "superseded"))
            open_holds[event.client] = event
        elif started is not None:
            holds.append(_hold(started, event.time, event.kind, str(event.detail.get("reason", ""))))
    holds.extend(_hold(started, None, "open") for started in open_holds.values())
    return sorted(holds, key=lambda hold: hold.start)


def wakeups_per_release(events: Iterable[Event], clock_slack: float = 0.01) -> list[int]:
    """The one definition of "wakeups per release" in labkit: for each hand-off of the
    lock, the number of distinct waiters that woke because of it.

    What it counts: a hand-off is a hold that ended (released, or lost) and let the next
    hold in; a release after which nobody acquired hands nothing off and is not listed (a
    0 for it would only dilute the mean). So N contenders served in turn give N - 1
    numbers: 1, 1, ... for a recipe that watches its predecessor, N - 1, N - 2, ... for a
    herd. ``events`` in time order (``History.events()``, or a model's own events).
    See ``woken_per_release`` for who is counted and how each wake is attributed."""
    return [len(names) for names in woken_per_release(events, clock_slack)]


def woken_per_release(events: Iterable[Event], clock_slack: float = 0.01) -> list[list[str]]:
    """For each hand-off, the distinct waiters that woke because of it, in the order of
    their first wake for it (``wakeups_per_release`` counts them).

    Hand-offs: the holds ordered by start; hold i hands off to hold i + 1 (its
    release, or its loss, let the next one in). The last hold hands off nothing.

    Each "woke" is attributed to the change that fired the waiter's watch, by
    causality rather than by a time window, because the stamps of different threads
    and processes can lag their real moment by milliseconds (a busy GIL, a pause):
    * a watch on the predecessor (``what="predecessor"`` in the waiter's last
      "watch" event) was fired by the hand-off of the hold whose node/key is the
      woke's target; a target that never held (a waiter ahead died) is no hand-off;
    * a shared watch (a parent, or one key: the herd) was fired by the first
      release after the waiter armed it: the first hand-off i whose release can lie
      after the "watch" stamp (a release happens after hold i's "acquired" stamp and
      before both its end stamp and the next "acquired" stamp). A parent watch also
      fires when a newcomer joins the queue; such a wake counts for the hand-off in
      progress (it is the herd too). For a watch on one key (etcd), ``clock_slack``
      moves the arming earlier: that watch starts from a revision read before its
      "watch" stamp (ZooKeeper stamps "watch" before it arms: no slack);
    * a waiter that never announced a watch woke for the hold in progress then.
    A waiter's successive wakes go to successive hand-offs (one watch fires once
    per change), and its wakes for its own hold are ignored. So the predecessor
    recipes count 1 per hand-off, and a herd counts every waiter it woke, including
    those whose "woke" is stamped after the next holder's "acquired".

    What it trusts: that a hold's "acquired" is stamped before its own release. A harness
    that releases from another thread the moment ``lock.is_held`` turns True can break
    that (the recipe sets ``is_held`` just before it stamps "acquired"): the release then
    comes first, the hold never ends, and a herd of two waiters counts [2, 0] instead of
    [2, 1]. ``labkit.harness.handoff`` releases each hold only once its "acquired" is here.
    """
    events = list(events)   # one snapshot: holds and wakes must come from the same events
    holds = [hold for hold in holds_of(events) if hold.end_reason != "superseded"]
    if len(holds) < 2:
        return []
    handoffs = holds[:-1]
    starts = [hold.start for hold in handoffs]
    released_by = [min(hold.end if hold.end is not None else float("inf"), holds[index + 1].start)
                   for index, hold in enumerate(handoffs)]
    node_of = {(event.client, event.time): _basename(str(event.detail.get("node") or event.detail.get("key")))
               for event in events if event.kind == "acquired" and (event.detail.get("node") or event.detail.get("key"))}
    hold_of_node = {node_of[(hold.client, hold.start)]: index for index, hold in enumerate(handoffs)
                    if (hold.client, hold.start) in node_of}
    woken: list[dict[str, None]] = [{} for _ in handoffs]   # ordered sets
    armed: dict[str, Event] = {}
    next_handoff: dict[str, int] = {}
    for event in events:
        if event.kind not in ("watch", "woke"):
            continue
        if event.kind == "watch":
            armed[event.client] = event
            continue
        arm = armed.get(event.client)
        earliest = next_handoff.get(event.client, 0)
        began = bisect.bisect_left(starts, event.time)  # hand-offs 0 .. began-1 had begun by the wake
        if arm is None:
            index = began - 1
        elif arm.detail.get("what") == "predecessor":
            target = event.detail.get("target") or arm.detail.get("target")
            index = hold_of_node.get(_basename(str(target)), -1) if target else -1
        else:
            # ZooKeeper stamps "watch" before it arms; an etcd watch starts from a revision
            # read before its stamp, so a release up to clock_slack earlier can fire it
            since = arm.time - (0.0 if arm.detail.get("what") == "parent" else clock_slack)
            index = next((i for i in range(earliest, began) if released_by[i] > since), -1)
        if index < earliest or index >= began:
            continue
        next_handoff[event.client] = index + 1
        if handoffs[index].client != event.client:
            woken[index].setdefault(event.client, None)
    return [list(clients) for clients in woken]


class RemoteSink:
    """An ``on_event`` callable for a child process: sends each event to a History
    listening at ``address``. Thread-safe. Raises HistoryUnreachable when the History
    is gone (closed, or its process ended)."""

    def __init__(self, address: str, client: str):
        try:
            host_port, key = address.split("/")
            host, port = host_port.rsplit(":", 1)
            authkey = bytes.fromhex(key)
        except ValueError:
            raise HistoryUnreachable(f"not a history address: {address!r}",
                                     hint="pass the string returned by History.listen()") from None
        self.client = client
        self._send_lock = threading.Lock()
        self._connection = _connect((host, int(port)), authkey)
        self._on_event = sink_for(client, self._send)

    def _send(self, event: Event) -> None:
        with self._send_lock:
            try:
                self._connection.send(event.to_dict())
            except (OSError, ValueError) as error:
                raise HistoryUnreachable(f"could not send {event.kind!r} of {self.client} to the history: {error}",
                                         hint="the notebook's History was closed or its kernel restarted") from error

    def __call__(self, kind: str, **detail: Any) -> None:
        self._on_event(kind, **detail)

    def close(self) -> None:
        with self._send_lock:
            self._connection.close()


def _connect(address: tuple[str, int], authkey: bytes) -> Connection:
    try:
        return Client(address, authkey=authkey)
    except AuthenticationError as error:
        raise HistoryUnreachable(f"the history at {address[0]}:{address[1]} refused our key ({error})",
                                 hint="pass the exact string History.listen() returned") from error
    except (OSError, EOFError) as error:
        raise HistoryUnreachable(f"no history listening at {address[0]}:{address[1]} ({error})",
                                 hint="call History.listen() in the notebook and pass its address") from error


def remote_sink(address: str, client: str) -> RemoteSink:
    """The ``on_event`` callable a client process gives its recipe (close it at exit)."""
    return RemoteSink(address, client)
