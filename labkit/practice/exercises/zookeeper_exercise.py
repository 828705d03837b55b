"""Exercise: write the ZooKeeper lock recipe, then let a real ZooKeeper judge it.

The learner writes two functions on a kazoo client (see ``labkit.practice.exercises.examples``):

    def acquire(client, lock_path) -> str      # block until I hold the lock; return my node's path
    def release(client, my_node) -> None       # let go

``check_zookeeper_lock((acquire, release), lab)`` runs them, each client in its own thread
with its own session, through three scripted scenarios on the lab's ZooKeeper:

1. a queue of ``clients`` contenders, served one release at a time: are they served in
   the order their nodes were created, and how many waiters does each release wake?
2. a middle waiter's session expires (the server expires it, for real) while the
   holder holds: does the waiter behind it re-check, or take the lock too?
3. the holder's session expires while it holds (it died): does the lock pass on?

Every holder writes to a resource when it gets the lock and again just before it lets
go; mutual exclusion is judged from the resource's own record of those writes. The
result is a ``Report`` whose ``explain()`` says in plain words what went wrong and why.

What can fail: ``ExerciseError`` if the learner's code lacks the two functions, kazoo's
errors if the lab's ZooKeeper cannot be reached. The learner's own exceptions are not
raised: they are reported.
"""
from __future__ import annotations

import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable

from labkit.faults import expire_session
from labkit.locks.zookeeper import sequence_of
from labkit.practice.exercises.contention import WAITING, Contender, join_all
from labkit.practice.exercises.diagnosis import run_scenarios
from labkit.practice.exercises.recording_client import RecordingClient
from labkit.practice.exercises.report import ExerciseError, Report
from labkit.practice.exercises.run import ExerciseRun, middle_waiter_leaves, queue_and_drain
from labkit.progress import shows_progress
from labkit.timing import became_true

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


def learner_functions(learner_impl: Any) -> tuple[Callable, Callable]:
    """(acquire, release) from a pair of functions, or an object or class with those methods."""
    if isinstance(learner_impl, tuple) and len(learner_impl) == 2:
        acquire, release = learner_impl
    else:
        target = learner_impl() if isinstance(learner_impl, type) else learner_impl
        acquire, release = getattr(target, "acquire", None), getattr(target, "release", None)
    if not (callable(acquire) and callable(release)):
        raise ExerciseError(f"{learner_impl!r} does not give an acquire and a release function",
                            hint="pass (acquire, release), where acquire(client, lock_path) returns my node's "
                                 "path and release(client, my_node) lets go")
    return acquire, release


class ZooKeeperRun(ExerciseRun):
    """One scenario: contenders c1, c2, ... on ``path``, each with a RecordingClient."""

    entry = "node"
    session_lost = "session expired"
    entries_die = "nodes are ephemeral: they die"

    def __init__(self, lab: Lab, learner: tuple[Callable, Callable], path: str, title: str,
                 patience: float, session_timeout: float):
        super().__init__(lab, path, title, patience)
        self.session_timeout = session_timeout
        self.acquire_code, self.release_code = learner
        self.clients: dict[str, RecordingClient] = {}
        self.observer = lab.zookeeper.client(timeout=session_timeout)

    def queued(self, contender: Contender) -> bool:
        return self.clients[contender.name].queued

    def new_contender(self, name: str) -> Contender:
        client = RecordingClient(self.lab.zookeeper.client(timeout=self.session_timeout), self.history.sink(name))
        self.clients[name] = client
        emit = self.history.sink(name)

        def acquire() -> tuple[int | None, str]:
            emit("requested", path=self.path)
            node = self.acquire_code(client, self.path)
            if not isinstance(node, str) or not node:
                raise ExerciseError(f"acquire() returned {node!r}; it must return the path of my lock node",
                                    hint="return the path client.create(...) gave you")
            node = node if node.startswith("/") else f"{self.path}/{node}"
            self._observe(name, node)
            token = sequence_of(node)
            emit("acquired", token=token, node=node)
            return token, node

        def release(node: str) -> None:
            emit("released", token=sequence_of(node))
            self.release_code(client, node)

        contender = Contender(name, acquire, release, self.resource)
        self.contenders.append(contender)
        return contender

    def _children(self) -> list[str]:
        """The children of the lock's path, in queue order, as the leader has them now. The
        observer's own server may be a follower that has not applied the contenders' last
        writes yet (a read on a follower is not linearizable): on a busy machine it answered
        NoNodeError for the lock's path just after c1 had created a node under it (an idle
        fresh-clone run, lesson 02's reference solution). ``sync`` first makes it catch up."""
        self.observer.sync(self.path)
        return sorted(self.observer.get_children(self.path), key=lambda child: sequence_of(child) or 0)

    def _observe(self, name: str, node: str) -> None:
        """The server's view at the moment acquire() returned: is my node the lowest?"""
        children = self._children()
        mine = node.rsplit("/", 1)[1]
        if not children or children[0] != mine:
            lowest = children[0] if children else None
            self.acquired_while_not_lowest[name] = self.owner_of(lowest) if lowest else "nobody"

    def owner_of(self, node: str | None) -> str:
        """Which contender made ``node`` (a name or a path)."""
        if node is None:
            return "nobody"
        name = node.rsplit("/", 1)[-1]
        for contender, client in self.clients.items():
            if any(made.rsplit("/", 1)[-1] == name for made in client.nodes):
                return contender
        return f"an unknown client (node {name})"

    def expire(self, name: str) -> None:
        """The server expires ``name``'s session: its ephemeral nodes are deleted."""
        self.history.record_fault("expire_session", name)
        session_id, password = self.clients[name].raw.client_id
        expire_session(self.lab.zookeeper.hosts, session_id, password)
        self.expired.add(name)
        # the server deletes the session's ephemeral nodes as it closes it: wait until it has,
        # so that every watch that deletion fires is on its way before the checker goes on
        ephemeral = [node for node, is_ephemeral in self.clients[name].nodes.items() if is_ephemeral]
        became_true(lambda: all(self.observer.exists(node) is None for node in ephemeral), self.patience)

    def end_session(self, name: str) -> None:
        self.expire(name)

    def has_left(self, name: str) -> bool:
        # it gives up, or (like kazoo's Lock) queues again with a new node on its new session
        client = self.clients[name]
        return self.contender(name).state != WAITING or (len(client.nodes) > 1 and client.armed)

    def holder_dies(self, name: str) -> None:
        contender = self.contender(name)
        contender.crash()
        self.expire(name)
        self.history.sink(name)("lost", reason="its session expired while it held the lock", token=contender.token)
        self.clients[name].raw.stop()

    def settle(self, waiters: list[Contender]) -> None:
        """Let each waiter handle every notification sent so far and set its next watch."""
        for waiter in waiters:
            client = self.clients[waiter.name]
            client.deliver_pending_notifications(self.patience)
            became_true(lambda: waiter.state != WAITING or client.armed or not client.ever_armed, self.patience)

    # -- what the diagnosis asks (labkit.practice.exercises.diagnosis) ---------------------------
    def last_woken_by(self, name: str) -> str | None:
        return self.clients[name].last_woken_by

    def entries_of(self, name: str) -> list[str]:
        return list(self.clients[name].nodes)

    def nodes_made(self) -> dict[str, tuple[str, bool]]:
        """{node path: (who made it, whether it was ephemeral)}"""
        return {node: (name, ephemeral) for name, client in self.clients.items()
                for node, ephemeral in client.nodes.items()}

    def lowest_now(self) -> tuple[str, str] | None:
        """(node, owner) of the lowest node on the server now, or None if there is none."""
        children = self._children()
        return (f"{self.path}/{children[0]}", self.owner_of(children[0])) if children else None

    def watched(self) -> str:
        """What the waiters watched, in words."""
        kinds = {event.detail.get("what") for event in self.history.events(kind="watch")}
        if "parent" in kinds:
            return f"the parent {self.path} (get_children with a watch): every change under it wakes every waiter"
        return ("a node other waiters watched too (the holder's?) instead of only the node just before "
                "their own: its deletion wakes all of them")

    def close(self) -> None:
        """Stop every session (a learner's wait then wakes and ends) and remove the nodes."""
        for contender in self.contenders:
            contender.crash()
        for client in self.clients.values():
            client.raw.stop()
            client.raw.close()
            client.wake_waiters()
        join_all(self.contenders)
        try:
            self.observer.delete(self.path, recursive=True)
        finally:
            self.observer.stop()
            self.observer.close()


@shows_progress("checking a ZooKeeper lock with real clients")
def check_zookeeper_lock(learner_impl: Any, lab: Lab, clients: int = 6, patience: float = 5.0,
                         session_timeout: float = 4.0) -> Report:
    """Run the learner's ZooKeeper lock on ``lab``'s ZooKeeper in three scenarios and judge
    mutual exclusion, FIFO order, wakeups per release, progress and session handling.
    ``patience`` bounds every wait (a client that waits longer with nobody holding is
    stuck). Raises ExerciseError for a learner_impl without acquire/release, ValueError
    for fewer than 3 clients."""
    if clients < 3:
        raise ValueError(f"the checker needs at least 3 clients to kill a middle waiter, got {clients}")
    learner = learner_functions(learner_impl)
    report = Report("ZooKeeper lock exercise")
    base = f"/exercises/zookeeper-{uuid.uuid4().hex[:8]}"
    scripts: list[tuple[str, Callable[[ZooKeeperRun], None]]] = [
        (f"{clients} clients queue, each release lets the next one in", lambda run: queue_and_drain(run, clients)),
        ("a middle waiter's session expires while the holder holds", middle_waiter_leaves),
        ("the holder's session expires while it holds", _holder_dies),
    ]
    run_scenarios(report, scripts, lambda number, title: ZooKeeperRun(
        lab, learner, f"{base}/scenario-{number}", title, patience, session_timeout), quiet=_kazoo_quiet)
    report.stop_clock()
    return report


@contextlib.contextmanager
def _kazoo_quiet():
    # The faults are on purpose: kazoo's warnings about the sessions we expire are noise here.
    logger = logging.getLogger("kazoo")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _holder_dies(run: ZooKeeperRun) -> None:
    run.queue_up(3)
    run.holder_dies("c1")
    run.drain()

