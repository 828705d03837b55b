"""Partitions and client-side expiry (notebook 07), on a lab started with
``labkit.up(zookeeper=3, etcd=3, redis=True, replica=True, sentinels=3, network=True)``.

What can fail, first: ``TimeoutError`` (from ``wait_until``) when an election, a grant or a
failover does not come within its deadline, naming what was awaited; ``FailoverTimeout``
with the sentinels' logs when Sentinel does not promote the replica; ``NetworkNotEnabled``
on a lab without ``network=True``. Every experiment heals the network before it returns,
even when it fails, and stops the clients it made. The clients each experiment makes have
names of their own (``via=``), so a partition can put a client on one side or the other.

The experiments:

* ``zookeeper_minority`` / ``etcd_minority`` / ``redis_minority_still_grants`` (C19): the old
  leader and one client on the small side cannot grant; the majority elects and grants.
* ``cut_off_zookeeper_holder`` (C20): kazoo's own Lock keeps "holding" while SUSPENDED and the server
  grants the lock to another; ``ZooKeeperLock``'s client-side deadline stops first.
* C21 reuses ``labkit.lessons.client_deadlines.cut_off_holder(lab, "etcd")``.
* C22 and C23 live in ``labkit.lessons.split_brain`` and ``labkit.lessons.link_delays``.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import matplotlib.pyplot as plt
from kazoo.protocol.states import KazooState
from kazoo.recipe.lock import Lock as KazooLock

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.locks.zookeeper_queue import contenders_seen
from labkit.progress import shows_progress
from labkit.timing import wait_until
from labkit.vocabulary import ACCEPTED_COLOUR, ERROR_COLOUR, FAULT_COLOUR, STATE_COLOURS, SUCCESSOR_COLOUR


def _roles(service) -> dict[str, str]:
    return {node.name: node.role for node in service.nodes}


def _unique(prefix: str) -> str:
    return f"/{prefix}-{uuid.uuid4().hex[:6]}"


def _attempt(action, outcome: list) -> threading.Thread:
    """Run ``action`` in a daemon thread; its result or its exception lands in ``outcome``."""
    def run():
        try:
            outcome.append(action())
        except Exception as error:  # the lesson shows which error the minority side got
            outcome.append(error)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# ---- C19: the minority cannot grant ----------------------------------------------------------
@dataclass
class MinorityOutcome:
    """One partition of a consensus cluster's leader, with a client on each side."""

    system: str
    old_leader: str
    new_leader: str
    elected_s: float                 # cut -> the majority side has a leader
    majority_token: int | None       # the lock the majority side granted
    minority_result: str             # what the minority client's acquire gave, while cut
    old_leader_role_while_cut: str   # etcd: not "leader" (check-quorum); ZooKeeper: not serving
    rejoined_as: str                 # the old leader's role after the heal
    rejoined_s: float

    def row(self) -> dict:
        return {"system": self.system, "old leader": self.old_leader, "new leader": self.new_leader,
                "elected after (s)": round(self.elected_s, 1), "majority granted": self.majority_token is not None,
                "minority client got": self.minority_result, "old leader rejoined as": self.rejoined_as}


@shows_progress("a ZooKeeper minority asked for a lock")
def zookeeper_minority(lab, session_timeout: float = 2.0) -> MinorityOutcome:
    """Partition the ZooKeeper leader with ``client-1`` away from the other two servers and
    ``client-2``. The minority client's acquire must not succeed while cut (no server on its
    side serves: its request waits, and the acquire times out); the majority elects and grants."""
    old = lab.zookeeper.leader()
    rest = [node for node in lab.zookeeper.nodes if node is not old]
    stranded = lab.zookeeper.client(timeout=session_timeout, via="client-1", nodes=[old],
                                    connection_retry={"max_tries": -1, "max_delay": 0.5})
    majority = lab.zookeeper.client(timeout=8, via="client-2", nodes=rest)
    path = _unique("minority")
    outcome: list = []
    try:
        try:
            began = time.monotonic()
            lab.partition([old.name, "client-1"], [node.name for node in rest] + ["client-2"])
            attempt = _attempt(lambda: ZooKeeperLock(stranded, path, "client-1").acquire(timeout=3), outcome)
            wait_until(lambda: sorted(_roles(lab.zookeeper)[n.name] for n in rest) == ["follower", "leader"],
                       "the majority side elects a ZooKeeper leader", timeout=30)
            elected = time.monotonic() - began
            new = next(node for node in rest if node.role == "leader")
            lock = ZooKeeperLock(majority, path, "client-2")
            token = lock.acquire(timeout=15)
            old_role = old.role
            attempt.join(max(0.0, 3.5 - (time.monotonic() - began)))
            while_cut = "nothing (still waiting)" if not outcome else _describe(outcome[0])
            lock.release()
        finally:
            lab.heal()
        rejoined = wait_until(lambda: old.role == "follower", f"{old.name} rejoins as a follower", timeout=30)
    finally:
        for client in (stranded, majority):
            client.stop()
            client.close()
    lab.zookeeper.wait_for_leader(30)
    return MinorityOutcome("zookeeper", old.name, new.name, elected, token, while_cut, old_role, old.role, rejoined)


@shows_progress("an etcd minority asked for a lock")
def etcd_minority(lab) -> MinorityOutcome:
    """Partition the etcd leader with ``client-3`` away from the other two members and
    ``client-4``. The isolated leader steps down by itself (check-quorum: no heartbeat
    answers from a majority for an election timeout); the minority client cannot even get
    a lease; the majority elects and grants."""
    old = lab.etcd.leader()
    rest = [node for node in lab.etcd.nodes if node is not old]
    stranded = lab.etcd.client(node=old, via="client-3", timeout=1)
    majority = lab.etcd.client(node=rest[0], via="client-4", timeout=5)
    outcome: list = []
    try:
        try:
            began = time.monotonic()
            lab.partition([old.name, "client-3"], [node.name for node in rest] + ["client-4"])
            wait_until(lambda: [_roles(lab.etcd)[n.name] for n in rest].count("leader") == 1,
                       "the majority side elects an etcd leader", timeout=30)
            elected = time.monotonic() - began
            wait_until(lambda: old.role != "leader", f"the isolated {old.name} steps down", timeout=10)
            old_role = old.role
            new = next(node for node in rest if node.role == "leader")
            session = EtcdSession(majority, ttl=5)
            mutex = EtcdMutex(session, _unique("minority"), "client-4")
            token = mutex.lock(timeout=10)
            _attempt(lambda: EtcdMutex(EtcdSession(stranded, ttl=2), "/minority-stranded", "client-3").lock(timeout=2),
                     outcome).join(5)
            while_cut = "nothing (still waiting)" if not outcome else _describe(outcome[0])
            mutex.unlock()
            session.close()
        finally:
            lab.heal()
        rejoined = wait_until(lambda: sorted(_roles(lab.etcd).values()) == ["follower", "follower", "leader"],
                              "the etcd cluster is whole again", timeout=30)
    finally:
        for client in (stranded, majority):
            client.close()
    return MinorityOutcome("etcd", old.name, new.name, elected, token, while_cut, old_role, old.role, rejoined)


def _describe(result) -> str:
    if isinstance(result, Exception):
        text = str(result).splitlines()[0].split(";")[0] if str(result) else ""
        return f"{type(result).__name__}: {text}"[:90]
    return f"the lock (token {result})"


def redis_minority_still_grants(lab) -> bool:
    """Partition the Redis primary with ``client-5`` away from its replica (the sentinels
    keep their links, so no failover starts): SET NX on the primary still succeeds. Redis
    has no majority to lose. Returns what SET NX answered."""
    primary, replica = lab.redis.primary, lab.redis.replica
    client = lab.redis.client(via="client-5")
    try:
        client.ping()
        lab.partition([primary.name, "client-5"], [replica.name])
        granted = bool(client.set(f"minority-{uuid.uuid4().hex[:6]}", "client-5", nx=True, px=5000))
    finally:
        lab.heal()
        client.close()
    return granted


# ---- C20: a cut-off holder -------------------------------------------------------------------
@dataclass
class CutOffRun:
    """Seconds after the cut. ``gave_up_s`` is None when the holder never stopped by itself
    (kazoo's Lock: it learns only when the link heals)."""

    deadline: bool                     # ZooKeeperLock with its client-side deadline, or kazoo's Lock
    session_timeout: float
    deadline_s: float | None           # when the client-side deadline was due
    acquired_s: float                  # the holder's acquire, before the cut (negative)
    gave_up_s: float | None
    waiter_acquired_s: float
    healed_s: float
    learned_lost_s: float | None       # kazoo's LOST after the heal (session expired)
    holder_believed_at_grant: bool     # the holder's is_held/is_acquired when the waiter got the lock
    holder_state_at_grant: str         # kazoo's connection state then

    @property
    def both_held(self) -> bool:
        return self.holder_believed_at_grant

    def row(self) -> dict:
        def ms(value):
            return "never" if value is None else round(1000 * value)
        return {"holder": "ZooKeeperLock + deadline" if self.deadline else "kazoo Lock",
                "holder gave up (ms)": ms(self.gave_up_s), "waiter acquired (ms)": ms(self.waiter_acquired_s),
                "holder state then": self.holder_state_at_grant,
                "holder believed it held": self.holder_believed_at_grant}


@shows_progress("a ZooKeeper holder cut off from the ensemble")
def cut_off_zookeeper_holder(lab, deadline: bool, session_timeout: float = 2.0, heal_after: float = 0.5) -> CutOffRun:
    """A holder (``holder-1``, kazoo client through its own links) takes the lock; a waiter
    (``waiter-1``) queues; the holder is isolated. The server expires the holder's session
    and grants the lock to the waiter; ``heal_after`` seconds later the link heals.
    ``deadline``: the holder uses ``ZooKeeperLock`` (gives up on its own clock) rather than
    kazoo's ``Lock`` (believes it holds until it hears otherwise)."""
    holder_name = "holder-d" if deadline else "holder-k"
    holder_client = lab.zookeeper.client(timeout=session_timeout, via=holder_name,
                                         connection_retry={"max_tries": -1, "max_delay": 0.2})
    waiter_client = lab.zookeeper.client(timeout=4, via="waiter-1")
    times: dict[str, float] = {}

    def note(what: str):
        times.setdefault(what, time.monotonic())

    def on_state(state):
        if state == KazooState.LOST:
            note("lost")
    holder_client.add_listener(on_state)
    path = _unique("cut-off")
    if deadline:
        holder = ZooKeeperLock(holder_client, path, "holder",
                               on_event=lambda kind, **_: note("gave_up") if kind == "lost" else None)
    else:
        holder = KazooLock(holder_client, path, "holder")
    deadline_s = None
    waiter = ZooKeeperLock(waiter_client, path, "waiter")
    try:
        holder.acquire(timeout=10)
        note("holder_acquired")
        waiting: list = []
        thread = _attempt(lambda: waiter.acquire(timeout=30), waiting)
        wait_until(lambda: contenders_seen(waiter_client, path) == 2, "the waiter queues behind the holder")
        cut = time.monotonic()
        lab.isolate(holder_name)
        thread.join(30)
        if not waiting or isinstance(waiting[0], Exception):
            raise TimeoutError(f"the waiter did not get the lock after the holder was cut: {waiting}")
        granted = time.monotonic()
        if deadline:   # the send time of its last answer before the cut fixed it
            deadline_s = holder.give_up_at() - cut
        believed = holder.is_held if deadline else holder.is_acquired
        state = holder_client.state
        time.sleep(heal_after)
    finally:
        lab.heal()
    healed = time.monotonic()
    try:
        wait_until(lambda: "lost" in times, "the holder's client hears that its session expired", timeout=15)
        waiter.release()
    finally:
        for client in (holder_client, waiter_client):
            client.stop()
            client.close()
    after = lambda what: None if what not in times else times[what] - cut  # noqa: E731
    return CutOffRun(deadline, session_timeout, deadline_s, times["holder_acquired"] - cut, after("gave_up"),
                     granted - cut, healed - cut, after("lost"), believed, str(state))


def plot_cut_off(runs: list[CutOffRun], axes=None):
    """One panel per run: the partition as a shaded band, the session timeout and the
    deadline as lines, the holder's hold (as it believes) and the waiter's hold as bars."""
    if axes is None:
        _, axes = plt.subplots(len(runs), 1, figsize=(10, 2.2 * len(runs)), sharex=True, layout="constrained")
    for ax, run in zip(axes, runs):
        end = run.healed_s + 0.4
        ax.axvspan(0, run.healed_s, color=FAULT_COLOUR, alpha=0.12, label="partition (holder cut off)")
        ax.axvline(run.session_timeout, color=ERROR_COLOUR, linestyle="--", label="session timeout")
        if run.deadline_s is not None:
            ax.axvline(run.deadline_s, color=ACCEPTED_COLOUR, linestyle=":", label="client-side deadline")
        stopped = run.gave_up_s if run.gave_up_s is not None else run.learned_lost_s
        ax.barh(1, stopped - run.acquired_s, left=run.acquired_s, color=STATE_COLOURS["holding"], height=0.5)
        ax.barh(0, end - run.waiter_acquired_s, left=run.waiter_acquired_s, color=SUCCESSOR_COLOUR, height=0.5)
        ax.set_yticks([0, 1], ["waiter", "holder"])
        ax.set_title("ZooKeeperLock with a client-side deadline" if run.deadline else "kazoo's Lock, no deadline",
                     fontsize=10)
        ax.set_xlim(min(run.acquired_s, -0.2), end)
    axes[0].legend(loc="upper left", fontsize=8, ncol=3)
    axes[-1].set_xlabel("seconds after the cut")
    return axes
