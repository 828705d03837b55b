"""A cut-off semaphore holder, or election leader, must stop before the next one is let in:
the lock's client-side deadline on ZooKeeperSemaphore's leases and ZooKeeperElection's
leader, raced on a real 3-node ensemble (claims C20, C27, C28; notebook 09).

``deadline_race(lab, primitive, topology)`` runs one race on a lab started with
``labkit.up(zookeeper=3, network=True)``, in the topologies of ``holder_safety.py``:

- ``primitive="semaphore"``: a semaphore of 2 slots. The holder (client ``holder-1``, through its
  own links to one server only) takes a lease, a second holder (``holder-2``) the other one,
  on the other two servers, and the waiter (``waiter-1``, also on the other two) waits at the
  head of the line for a slot.
- ``primitive="election"``: the holder leads; the waiter campaigns behind it.

Then the network breaks: ``client-link`` cuts the holder's own link to its server;
``follower-cut`` cuts the holder's server, a follower, from the leader and the third member,
with the holder's link up (a follower keeps answering for syncLimit x tickTime after the cut,
while the leader, which alone expires sessions, hears nothing). The holder's belief
(``is_held`` / ``is_leader``) is read every 2 ms; the waiter is admitted (its ``acquire`` or
``campaign`` returns) only once the leader has expired the holder's session. Safe means the
holder stopped believing strictly before that (``RaceRun.safe``, margins in ms).

``deadline=False`` is the negative control, the same race without a client-side deadline: a
semaphore with ``client_deadline=False`` (what Curator's InterProcessSemaphoreV2 does), and as
the leader kazoo's own ``Election``, whose leader function runs on until it returns. Cut off,
both believe until kazoo hears LOST, which it can hear only once the link is back.

What can fail: ``TimeoutError`` if the waiter is never admitted or the ensemble does not
settle after the heal; ``RunProvesNothing`` (a RuntimeError) if the holder had already stopped believing before
the fault, or the waiter was admitted before it (a machine stalled past a deadline: that run proves nothing); ``ValueError`` for
an unknown primitive (semaphore or election) or topology, or a lab without 3 ZooKeeper members and ``network=True``.
"""
from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Callable

from kazoo.exceptions import KazooException
from kazoo.recipe.election import Election

from labkit.harness.cut_off import again_if_void, ensemble_to_cut, seats
from labkit.lessons.curator_topologies import WAITER_TIMEOUT   # the waiter's (and the second holder's) session
from labkit.lessons.holder_safety import HOLDER, POLL, TOPOLOGIES, WAITER, RaceRun
from labkit.locks.errors import LockError
from labkit.locks.zookeeper_election import ZooKeeperElection
from labkit.locks.zookeeper_semaphore import ZooKeeperSemaphore
from labkit.progress import repeat, waiting_for
from labkit.timing import became_true, wait_until

RACED_RECIPE = {"semaphore": "zookeeper-semaphore", "election": "zookeeper-election"}   # the name a RaceRun shows
RULES = {("semaphore", True): "client-side deadline", ("semaphore", False): "client_deadline=False",
         ("election", True): "client-side deadline", ("election", False): "kazoo's Election, no deadline"}
PEER = "holder-2"           # the semaphore's second holder, on the majority side
LIMIT = 2                   # the semaphore's slots


class RunProvesNothing(RuntimeError):
    """The holder had stopped believing before the fault (its heartbeat late past its deadline
    on a stalled machine): safe, but nothing was raced. ``deadline_races`` runs it again."""


def deadline_race(lab, primitive: str = "semaphore", topology: str = "client-link", timeout: float = 2.0,
                  deadline: bool = True) -> RaceRun:
    """One race (see the module docstring). ``timeout``: the holder's session timeout, in s."""
    if primitive not in RACED_RECIPE:
        raise ValueError(f"primitive={primitive!r} is not one of {tuple(RACED_RECIPE)}")
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology={topology!r} is not one of {tuple(TOPOLOGIES)}")
    zookeeper = ensemble_to_cut(lab, "deadline_race")
    holder_node, others = seats(zookeeper, topology)
    contest = (_SemaphoreContest if primitive == "semaphore" else _ElectionContest)(zookeeper, timeout, deadline)
    acquired: list[float] = []
    failed: list[BaseException] = []
    gave_up: list[float] = []               # when the holder first stopped believing
    try:
        contest.open(holder_node, others)

        def admit_the_waiter() -> None:
            try:
                contest.waiter_enters(30 + 6 * timeout)
                acquired.append(time.monotonic())
            except BaseException as error:  # handed to the main thread
                failed.append(error)

        threading.Thread(target=admit_the_waiter, name=f"{primitive}-waiter", daemon=True).start()
        contest.wait_queued(lambda: bool(acquired or failed))
        if failed:
            raise failed[0]
        if acquired:
            raise RunProvesNothing(f"{primitive}, {topology}: the waiter was admitted before the fault (a hold had "
                                   "ended on a stalled machine): this run proves nothing")
        # A random wait over one ping interval of kazoo (a third of the session timeout), so
        # that the cut falls at any point of the client's cycle of requests, not always one.
        time.sleep(random.uniform(0, timeout / 3))
        if not contest.holder_believes():
            raise RunProvesNothing(f"{primitive}, {topology}: the holder stopped believing before the fault (its "
                               "heartbeat was late past its deadline on a stalled machine): this run proves nothing")
        fault_at = time.monotonic()
        if topology == "client-link":
            lab.isolate(HOLDER)
        else:
            lab.partition([holder_node.name, HOLDER], [node.name for node in others] + contest.majority)

        def holder_gave_up() -> bool:
            if not gave_up and not contest.holder_believes():
                gave_up.append(time.monotonic())
            return bool(gave_up)

        def waiter_done() -> bool:
            holder_gave_up()                # read at every poll, while the waiter tries
            return bool(acquired or failed)

        patience = 30 + 6 * timeout
        with waiting_for("the holder's session to expire", timeout):
            wait_until(waiter_done, f"{primitive}, {topology}: the waiter to be admitted", patience, POLL,
                       error=TimeoutError(f"{primitive}, {topology}: the waiter was not admitted within "
                                          f"{patience:.0f} s of the fault"))
        if failed:
            raise failed[0]
        # Unsafe if the holder still believes: read on, to say how late it stopped (if ever).
        became_true(holder_gave_up, max(0.0, acquired[0] + 2 * timeout - time.monotonic()), POLL)
    finally:
        lab.heal()
        contest.close()
    wait_until(zookeeper.is_ready, "the ZooKeeper ensemble settles after the heal", timeout=60, poll=0.05)
    return RaceRun(RACED_RECIPE[primitive], topology, RULES[primitive, deadline], float(timeout),
                   1000 * (gave_up[0] - fault_at) if gave_up else None, 1000 * (acquired[0] - fault_at))


def deadline_races(lab, primitive: str, topology: str, runs: int, timeout: float = 2.0, deadline: bool = True,
                   progress=None) -> list[RaceRun]:
    """``runs`` races in a row, each shown as a step (labkit.progress); ``progress(i, run)``
    after each (e.g. print)."""
    def one_run() -> RaceRun:
        # a run whose holder gave up before the fault (a stalled machine: safe, but no race) is
        # run again; a run that counts is every one returned
        return again_if_void(lambda: deadline_race(lab, primitive, topology, timeout, deadline), (RunProvesNothing,))

    return repeat(f"{primitive} race", runs, one_run,
                  topology + ("" if deadline else " · no client deadline"), progress)


class _Contest:
    """The clients of one race: made by ``open``, all closed by ``close`` (after the heal)."""

    def __init__(self, zookeeper, timeout: float, deadline: bool):
        self.zookeeper, self.timeout, self.deadline = zookeeper, timeout, deadline
        self.path = f"/deadline-race-{uuid.uuid4().hex[:8]}"
        self.clients: list = []
        self.holder = self.peer = self.waiter = None    # made by open(), which may fail half-way

    def client(self, via: str, nodes: list, timeout: float):
        self.clients.append(self.zookeeper.client(timeout=timeout, via=via, nodes=nodes))
        return self.clients[-1]

    def close(self) -> None:
        for client in self.clients:
            client.stop()
            client.close()


class _SemaphoreContest(_Contest):
    majority = [WAITER, PEER]               # the clients on the waiter's side of a partition

    def open(self, holder_node, others) -> None:
        # The holder may reconnect only to its own server: in the partition it has no other.
        holder_client = self.client(HOLDER, [holder_node], self.timeout)
        self.holder = ZooKeeperSemaphore(holder_client, self.path, LIMIT, "holder", client_deadline=self.deadline)
        self.peer = ZooKeeperSemaphore(self.client(PEER, others, WAITER_TIMEOUT), self.path, LIMIT, PEER)
        self.at_head = threading.Event()

        def on_event(kind: str, **detail) -> None:
            if kind == "watch" and detail.get("what") == "slot":
                self.at_head.set()
        self.waiter = ZooKeeperSemaphore(self.client(WAITER, others, WAITER_TIMEOUT), self.path, LIMIT, "waiter",
                                         on_event=on_event)
        self.holder.acquire(timeout=15)
        self.peer.acquire(timeout=15)

    def waiter_enters(self, patience: float) -> None:
        self.waiter.acquire(timeout=patience)

    def wait_queued(self, ended: Callable[[], bool]) -> None:
        wait_until(lambda: self.at_head.is_set() or ended(), "the waiter to wait at the head of the line for a slot",
                   timeout=30)

    def holder_believes(self) -> bool:
        return self.holder.is_held

    def close(self) -> None:
        for semaphore in (self.waiter, self.peer, self.holder):
            try:
                if semaphore is not None:
                    semaphore.release()
            except (KazooException, LockError):
                pass                        # its session's end frees the slot anyway
        super().close()


class _ElectionContest(_Contest):
    majority = [WAITER]

    def open(self, holder_node, others) -> None:
        holder_client = self.client(HOLDER, [holder_node], self.timeout)
        self.waiter = ZooKeeperElection(self.client(WAITER, others, WAITER_TIMEOUT), self.path, "waiter")
        self.leading, self.step_down, self.stepped_down = threading.Event(), threading.Event(), threading.Event()
        if self.deadline:
            self.holder = ZooKeeperElection(holder_client, self.path, "holder")
            self.holder.campaign(timeout=15)
            return
        kazoo_election = Election(holder_client, self.path, "holder")

        def lead() -> None:                 # kazoo's leader function: it leads until it returns
            self.leading.set()
            self.step_down.wait(120)

        def run() -> None:
            try:
                kazoo_election.run(lead)
            except KazooException:
                pass                        # the session ended under it: nothing to release
            finally:
                self.stepped_down.set()
        threading.Thread(target=run, name="kazoo-leader", daemon=True).start()
        wait_until(self.leading.is_set, "kazoo's leader function to run", timeout=15)

    def waiter_enters(self, patience: float) -> None:
        self.waiter.campaign(timeout=patience)

    def wait_queued(self, ended: Callable[[], bool]) -> None:
        wait_until(lambda: len(self.waiter.candidates()) == 2 or ended(), "the waiter to campaign behind the leader",
                   timeout=30)

    def holder_believes(self) -> bool:
        if self.deadline:
            return self.holder.is_leader
        return self.leading.is_set() and not self.stepped_down.is_set()

    def close(self) -> None:
        for candidate in (self.waiter, self.holder):
            try:
                if candidate is not None:
                    candidate.resign()
            except (KazooException, LockError):
                pass                        # its session's end takes its node anyway
        if not self.deadline:
            self.step_down.set()            # kazoo's leader function returns, its lock is released
            self.stepped_down.wait(10)
        super().close()
