"""Exercise: write the wait-for-deletes step of the etcd mutex, then let a real etcd judge it.

``EtcdMutex`` queues each contender as a key bound to its lease; etcd stamps it with a
create revision, and the smallest create revision holds the lock. The learner writes
the one step in between (Go's ``waitDeletes``):

    def wait_for_turn(etcd, prefix, my_revision) -> None
        # return once no key under prefix has a create revision below my_revision

with two tools on ``etcd``: ``etcd.queue(prefix)`` lists the keys as (key, create_revision)
entries, oldest first, and ``etcd.wait_for_delete(key)`` blocks until that key is deleted
(a real etcd watch; it raises SessionExpired if my lease ends meanwhile). ``etcd.client``
is the python-etcd3 client, for anything else.

``check_etcd_wait(wait_for_turn, lab)`` runs the mutex with that step in two scenarios: a
queue served one release at a time (FIFO, wakeups per release), and a middle waiter whose
lease is revoked while the holder holds (does the waiter behind it look again?).

What can fail: ExerciseError if ``wait_for_turn`` is not callable; python-etcd3's
connection errors if the lab's etcd cannot be reached. The learner's own exceptions are
reported, not raised.
"""
from __future__ import annotations

import queue
import threading
import uuid
from typing import TYPE_CHECKING, Callable, NamedTuple

from etcd3 import etcdrpc
from etcd3.events import DeleteEvent
from etcd3.utils import prefix_range_end

from labkit.locks.errors import LockError, SessionExpired
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession, rpc
from labkit.practice.exercises.contention import WAITING, Contender, join_all
from labkit.practice.exercises.diagnosis import run_scenarios
from labkit.practice.exercises.report import Report, learner_function
from labkit.practice.exercises.run import ExerciseRun, middle_waiter_leaves, queue_and_drain
from labkit.record.events import EventSink
from labkit.timing import became_true

if TYPE_CHECKING:
    from etcd3 import Etcd3Client

    from labkit.servers.lab import Lab


class QueueEntry(NamedTuple):
    key: str
    create_revision: int


class EtcdWaitTools:
    """The ``etcd`` argument of the learner's ``wait_for_turn``. ``armed`` and ``target``
    tell the checker whether it waits on a watch now, and on which key."""

    def __init__(self, client: Etcd3Client, session: EtcdSession, on_event: EventSink, stopping: threading.Event):
        self.client = client
        self._session = session
        self._emit = on_event
        self._stopping = stopping
        self.armed = False
        self.target: str | None = None
        self.last_woken_by: str | None = None

    def queue(self, prefix: str) -> list[QueueEntry]:
        """Every key under ``prefix`` with its create revision, oldest first."""
        request = etcdrpc.RangeRequest(key=prefix.encode(), range_end=prefix_range_end(prefix.encode()),
                                       sort_target=etcdrpc.RangeRequest.CREATE,
                                       sort_order=etcdrpc.RangeRequest.ASCEND, keys_only=True)
        response = rpc(self.client, self.client.kvstub.Range, request)
        return [QueueEntry(kv.key.decode(), kv.create_revision) for kv in response.kvs]

    def wait_for_delete(self, key: str) -> None:
        """Block until ``key`` is deleted (at once if it is gone already). Raises
        SessionExpired when my lease ends meanwhile, LockError when the checker stops."""
        current = rpc(self.client, self.client.kvstub.Range, etcdrpc.RangeRequest(key=key.encode()))
        if not current.kvs:
            return
        events: queue.Queue = queue.Queue()
        self._emit("watch", target=key, what="predecessor")
        # from the revision just read: a delete between the read and the watch is not missed
        watch_id = self.client.add_watch_callback(key, events.put, start_revision=current.header.revision + 1)
        self.target, self.armed = key, True
        try:
            while True:
                if self._stopping.is_set():
                    raise LockError("the checker stopped this client")
                if self._session.done.is_set():
                    raise SessionExpired(f"my lease is gone ({self._session.lost_reason}), and with it my key")
                try:
                    response = events.get(timeout=0.05)
                except queue.Empty:
                    continue
                if isinstance(response, Exception):
                    raise response
                if any(isinstance(event, DeleteEvent) for event in response.events):
                    self.armed, self.last_woken_by = False, key
                    self._emit("woke", reason="deleted", target=key)
                    return
        finally:
            self.armed = False
            self.client.cancel_watch(watch_id)


class LearnerMutex(EtcdMutex):
    """EtcdMutex with the learner's step in place of its own wait-for-deletes."""

    def __init__(self, session: EtcdSession, prefix: str, identifier: str, on_event: EventSink,
                 wait_for_turn: Callable, tools: EtcdWaitTools):
        super().__init__(session, prefix, identifier, on_event)
        self.learner_step = wait_for_turn
        self.tools = tools

    def wait_for_turn(self, max_create_revision: int, deadline: float | None) -> etcdrpc.RangeResponse | None:
        self.learner_step(self.tools, self.prefix, max_create_revision + 1)
        if self.session.done.is_set():
            return None
        return rpc(self.client, self.client.kvstub.Range, etcdrpc.RangeRequest(key=self.key.encode()))


class EtcdRun(ExerciseRun):
    """One scenario: contenders c1, c2, ... on ``path``, each with its own session."""

    entry = "key"
    session_lost = "lease was revoked"
    entries_die = "keys are bound to the lease: they die"

    def __init__(self, lab: Lab, wait_for_turn: Callable, path: str, title: str, patience: float, ttl: int):
        super().__init__(lab, path, title, patience)
        self.ttl = ttl
        self.wait_for_turn = wait_for_turn
        self.tools: dict[str, EtcdWaitTools] = {}
        self.sessions: dict[str, EtcdSession] = {}
        self.etcd_clients: list[Etcd3Client] = []
        self.stopping = threading.Event()
        self.observer = lab.etcd.client()
        self.observer_tools = EtcdWaitTools(self.observer, None, lambda *a, **k: None, self.stopping)

    def queued(self, contender: Contender) -> bool:
        return self.tools[contender.name].armed

    def new_contender(self, name: str) -> Contender:
        client = self.lab.etcd.client()
        self.etcd_clients.append(client)
        session = EtcdSession(client, ttl=self.ttl)
        self.sessions[name] = session
        tools = EtcdWaitTools(client, session, self.history.sink(name), self.stopping)
        self.tools[name] = tools
        mutex = LearnerMutex(session, self.path, name, self.history.sink(name), self.wait_for_turn, tools)

        def acquire() -> tuple[int, str]:
            token = mutex.lock()
            entries = self.observer_tools.queue(mutex.prefix)
            if not entries or entries[0].key != mutex.key:
                self.acquired_while_not_lowest[name] = self.owner_of(entries[0].key) if entries else "nobody"
            return token, mutex.key

        contender = Contender(name, acquire, lambda key: mutex.unlock(), self.resource)
        self.contenders.append(contender)
        return contender

    def owner_of(self, key: str | None) -> str:
        for event in self.history.events(kind="created"):
            if event.detail.get("key") == key:
                return event.client
        return f"an unknown client (key {key})" if key else "nobody"

    def end_session(self, name: str) -> None:
        self.revoke(name)

    def revoke(self, name: str) -> None:
        """Revoke ``name``'s lease: etcd deletes its key at once, as when a lease expires."""
        self.history.record_fault("revoke_lease", name)
        self.sessions[name].revoke()
        self.expired.add(name)

    def settle(self, waiters: list[Contender]) -> None:
        """Each waiter has seen the delete of the key it watched and waits on a key that exists."""
        for waiter in waiters:
            tools = self.tools[waiter.name]
            became_true(lambda: waiter.state != WAITING or (tools.armed and self._exists(tools.target)), self.patience)

    def _exists(self, key: str | None) -> bool:
        return key is not None and bool(rpc(self.observer, self.observer.kvstub.Range,
                                            etcdrpc.RangeRequest(key=key.encode(), count_only=True)).count)

    # -- what the diagnosis asks (labkit.practice.exercises.diagnosis) ---------------------------
    def last_woken_by(self, name: str) -> str | None:
        return self.tools[name].last_woken_by

    def entries_of(self, name: str) -> list[str]:
        return [event.detail["key"] for event in self.history.events(client=name, kind="created")]

    def nodes_made(self) -> dict[str, tuple[str, bool]]:
        return {event.detail["key"]: (event.client, True) for event in self.history.events(kind="created")}

    def lowest_now(self) -> tuple[str, str] | None:
        entries = self.observer_tools.queue(self.path + "/")
        return (entries[0].key, self.owner_of(entries[0].key)) if entries else None

    def watched(self) -> str:
        return "the holder's key (the oldest) instead of the key just before their own: its deletion wakes them all"

    def close(self) -> None:
        self.stopping.set()
        for contender in self.contenders:
            contender.crash()
        join_all(self.contenders)
        for session in self.sessions.values():
            session.close()
        for client in self.etcd_clients + [self.observer]:
            client.close()


def check_etcd_wait(wait_for_turn: Callable, lab: Lab, clients: int = 5, patience: float = 5.0,
                    ttl: int = 5) -> Report:
    """Run EtcdMutex with the learner's ``wait_for_turn`` on ``lab``'s etcd and judge
    mutual exclusion, FIFO order, wakeups per release, progress and session handling.
    Raises ExerciseError if ``wait_for_turn`` is not callable, ValueError for < 3 clients."""
    learner_function(wait_for_turn, hint="pass wait_for_turn(etcd, prefix, my_revision), which returns when it is my turn")
    if clients < 3:
        raise ValueError(f"the checker needs at least 3 clients to revoke a middle waiter's lease, got {clients}")
    report = Report("etcd wait-for-deletes exercise")
    base = f"/exercises/etcd-{uuid.uuid4().hex[:8]}"
    scripts = [(f"{clients} clients queue, each release lets the next one in",
                lambda run: queue_and_drain(run, clients)),
               ("a middle waiter's lease is revoked while the holder holds", middle_waiter_leaves)]
    run_scenarios(report, scripts, lambda number, title: EtcdRun(lab, wait_for_turn, f"{base}/scenario-{number}",
                                                                  title, patience, ttl))
    report.stop_clock()
    return report

