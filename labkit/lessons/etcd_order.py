"""Transactions and order in the etcd lesson (notebook 03).

* ``plain_increment`` / ``cas_increment`` / ``count_with``: a read-modify-write race, made to
  happen on every round by a barrier, with and without compare-and-swap.
* ``counter_plots``: the counters the two increments reached, and the tries CAS needed.
* ``take_turns_through_members``: one client per member takes the same lock several times;
  ``member_views``: each member's (revision, raft index applied).
* ``write_in_real_time_order``: writes through different members, one after the other.
* ``without_quorum``: what a member answers to a serializable and a linearizable read when
  the two other members are frozen.

What can fail: ``TimeoutError`` naming what was awaited; python-etcd3's errors when etcd does
not answer (a linearizable read without quorum is *expected* to fail, and is reported, not
raised, by ``without_quorum``).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.timing import wait_until
from labkit.vocabulary import ACCEPTED_COLOUR, GUIDE_COLOUR, REJECTED_COLOUR

if TYPE_CHECKING:
    from labkit.servers.services.etcd import EtcdNode
    from labkit.servers.lab import Lab


# ---- read-modify-write -------------------------------------------------------------------
def plain_increment(client: Any, counter: str, barrier: threading.Barrier) -> int:
    """get, wait until every worker has read, put value + 1. Returns 1 (one attempt)."""
    value, _ = client.get(counter)
    barrier.wait(timeout=10)                  # every worker has read before anyone writes
    client.put(counter, str(int(value) + 1))
    return 1


def cas_increment(client: Any, counter: str, barrier: threading.Barrier) -> int:
    """get, wait until every worker has read, then put value + 1 only if the key's mod
    revision is still the one read; on a conflict read again and retry. Returns the attempts."""
    value, meta = client.get(counter)
    barrier.wait(timeout=10)                  # the same race
    for attempt in range(1, 100):             # bounded: a real program would back off and give up too
        succeeded, _ = client.transaction(
            compare=[client.transactions.mod(counter) == meta.mod_revision],   # nobody wrote since my read
            success=[client.transactions.put(counter, str(int(value) + 1))], failure=[])
        if succeeded:
            return attempt
        value, meta = client.get(counter)     # someone did: read again, try again
    raise RuntimeError("100 conflicting attempts in a row: is something else hammering the counter?")


def count_with(increment: Callable[[Any, str, threading.Barrier], int], workers: list[Any], counter: str,
               rounds: int) -> tuple[int, list[list[int]]]:
    """The counter starts at 0; in each round every worker (a client) increments it once, all
    reading before any writes. Returns (the counter at the end, attempts per round per worker)."""
    workers[0].put(counter, "0")
    attempts = []
    with ThreadPoolExecutor(len(workers)) as pool:
        for _ in range(rounds):
            barrier = threading.Barrier(len(workers))
            attempts.append(list(pool.map(lambda client: increment(client, counter, barrier), workers)))
    return int(workers[0].get(counter)[0]), attempts


# ---- order across members -----------------------------------------------------------------
def take_turns_through_members(lab: "Lab", new_session: Callable[..., Any], prefix: str,
                               turns: int) -> list[tuple[str, int, int]]:
    """One EtcdMutex per member (its session's client talks to that member only), all at
    once, each taking the lock ``turns`` times. Returns (member, token, response header
    revision) per acquisition, in acquisition order."""
    acquisitions: list[tuple[str, int, int]] = []

    def take_turns(node: EtcdNode) -> None:
        mutex = EtcdMutex(new_session(node=node), prefix, identifier=f"via {node.name}")
        for _ in range(turns):
            mutex.lock(timeout=20)
            try:                              # appended while holding: the list is in acquisition order
                acquisitions.append((node.name, mutex.token, mutex.header_revision))
            finally:
                mutex.unlock()

    with ThreadPoolExecutor(len(lab.etcd.nodes)) as pool:
        for turn in [pool.submit(take_turns, node) for node in lab.etcd.nodes]:
            turn.result(timeout=60)
    return acquisitions


def write_in_real_time_order(clients: dict[str, Any], key_prefix: str) -> list[dict[str, Any]]:
    """For every ordered pair of members (first, second): write a key through ``first``; once
    that write has returned, write another through ``second``; then read both back through
    the third member (linearizable reads, python-etcd3's default). ``clients``: member name ->
    client on that member. Returns one row per pair with both mod revisions."""
    rows = []
    names = list(clients)
    for first in names:
        for second in names:
            if first == second:
                continue
            third = next(name for name in names if name not in (first, second))
            earlier, later = f"{key_prefix}/{first}-then-{second}/1", f"{key_prefix}/{first}-then-{second}/2"
            clients[first].put(earlier, first)          # returns once the write is committed
            clients[second].put(later, second)          # starts after the first write completed
            _, earlier_meta = clients[third].get(earlier)
            _, later_meta = clients[third].get(later)
            rows.append({"first write via": first, "second write via": second, "both read via": third,
                         "first's revision": earlier_meta.mod_revision, "second's revision": later_meta.mod_revision})
    return rows


@dataclass(frozen=True)
class WithoutQuorum:
    """What member ``member`` answered while the two others were frozen: the serializable
    read's value and mod revision, and the linearizable read's error (its class name), or
    None if it answered; ``caught_up_after``: seconds after the others resumed until a
    linearizable read through ``member`` answered again."""

    member: str
    serializable_value: str | None
    serializable_revision: int | None
    linearizable_error: str | None
    caught_up_after: float


def without_quorum(lab: "Lab", key: str, read_timeout: float = 1.5) -> WithoutQuorum:
    """Freeze (SIGSTOP) two of three etcd members, the leader among them, and read ``key``
    through the third: once serializable, once linearizable (with a ``read_timeout`` s
    deadline). Then thaw them and time until a linearizable read answers again."""
    leader = lab.etcd.leader()
    member = next(node for node in lab.etcd.nodes if node is not leader)
    frozen = [node for node in lab.etcd.nodes if node is not member]
    reader = lab.etcd.client(node=member, timeout=read_timeout)
    try:
        for node in frozen:
            node.pause()
        try:
            value, meta = reader.get(key, serializable=True)   # answered from the member's own copy
            linearizable_error = None
            try:
                reader.get(key)                                 # must confirm with a quorum first
            except Exception as error:  # the expected outcome: no quorum, no confirmation
                linearizable_error = error.__class__.__name__
        finally:
            for node in frozen:
                node.resume()
        resumed = time.monotonic()
        wait_until(lambda: _answers(reader, key), f"a linearizable read through {member.name} to answer again",
                   timeout=30, poll=0.05)
        caught_up_after = time.monotonic() - resumed
    finally:
        reader.close()
    return WithoutQuorum(member.name, value.decode() if value is not None else None,
                         meta.mod_revision if meta is not None else None, linearizable_error, caught_up_after)


def _answers(client: Any, key: str) -> bool:
    try:
        client.get(key)
        return True
    except Exception:  # not yet: the cluster is electing a leader
        return False


# ---- counters, members, other locks --------------------------------------------------------
def counter_plots(axes: Any, expected: int, plain_total: int, cas_total: int, cas_attempts: list[list[int]],
                  title: str) -> Any:
    """On two axes: the counter each way of adding one reached; how many transactions each
    compare-and-swap increment needed (1 = no conflict)."""
    totals_axes, attempts_axes = axes
    bars = totals_axes.bar(["expected", "plain get / put", "txn compare mod_revision"],
                           [expected, plain_total, cas_total], color=[GUIDE_COLOUR, REJECTED_COLOUR, ACCEPTED_COLOUR])
    totals_axes.bar_label(bars)
    totals_axes.set(title=title, ylabel="counter at the end")
    attempts = [attempt for round_attempts in cas_attempts for attempt in round_attempts]
    counts = range(1, max(attempts) + 1)
    attempts_axes.bar(counts, [attempts.count(number) for number in counts], color=ACCEPTED_COLOUR,
                      label="compare-and-swap increments")
    attempts_axes.set(title="Transactions needed per increment", xlabel="attempts (1 = no conflict)",
                      ylabel="increments", xticks=list(counts))
    attempts_axes.legend()
    return axes


def member_views(lab: "Lab") -> dict[str, tuple[int, int]]:
    """Each member's (store revision, raft log index applied), from its own status."""
    statuses = {node.name: node.status() for node in lab.etcd.nodes}
    return {name: (int(status["header"]["revision"]), int(status["raftAppliedIndex"]))
            for name, status in statuses.items()}
