"""Where fencing tokens stop protecting, as experiments a notebook runs and asserts on.

* ``late_write_schedule(store, protect)``: the old holder's late write lands between the
  new holder's read and its write. Unprotected, the store accepts it (it has not seen the
  new token yet) and the new holder's read-modify-write silently drops it: a lost update.
  With ``protect="claim"`` (the new holder shows its token before reading) or
  ``protect="fenced read"`` (it reads through ``FencedStore.read(token)``) the same schedule
  is safe: the late write is refused.
* ``sequence_restart(lab)``: a real Curator creates the lock's parent as a *container*
  node; once the queue is empty the server deletes it (the lab checks every 0.5 s) and the
  next lock re-creates it: the sequence numbers start again at 0, while ``czxid``, the
  token ``ZooKeeperLock`` hands out, keeps growing.

What can fail: redis errors if the store's server is down; ``CuratorUnavailable`` without
Java and Curator's jars; ``TimeoutError`` if the server does not delete the empty container
in time (the message names the path and the wait).
"""
from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from labkit.locks.curator import CuratorPeer
from labkit.locks.zookeeper import ZooKeeperLock, sequence_of
from labkit.record.fencing import FencedStore, StoreWrite
from labkit.timing import wait_until

PROTECTIONS = ("none", "claim", "fenced read")


@dataclass(frozen=True)
class LateWriteOutcome:
    """What the store did with one schedule. ``accepted_increments``: the amounts of the
    writes it accepted; a correct counter ends at their sum."""

    protect: str
    old_write_accepted: bool
    new_holder_read: int
    final_value: int
    accepted_increments: list[int]
    writes: list[StoreWrite]

    @property
    def lost_update(self) -> bool:
        """An accepted write whose effect is gone: the read-modify-write was corrupted."""
        return self.final_value != sum(self.accepted_increments)


def late_write_schedule(store: FencedStore, protect: str = "none", old_token: int = 5,
                        new_token: int = 6) -> LateWriteOutcome:
    """Run the schedule on ``store`` (a fenced FencedStore; it is reset first), a counter:

    1. the old holder (``old_token``) reads the counter, 0, and means to add 1; it pauses;
    2. the lock passes on: the new holder (``new_token``) reads the counter (plainly, after
       a ``claim``, or with a fenced read: ``protect``) and means to add 10;
    3. the old holder wakes and writes 0 + 1 with its old token;
    4. the new holder writes what it read + 10.
    """
    if protect not in PROTECTIONS:
        raise ValueError(f"protect={protect!r} is not one of {PROTECTIONS}")
    if not store.fenced:
        raise ValueError("late_write_schedule needs a fenced store: an unfenced one accepts every write anyway")
    store.reset()
    store.write("setup", old_token, "0")
    old_read = int(store.value())                          # 1. the old holder reads...
    increments = {"old holder": 1, "new holder": 10}
    if protect == "claim":                                 # 2. ...the new holder reads
        store.claim(new_token)
    new_read = int(store.read(new_token) if protect == "fenced read" else store.value())
    old_accepted = store.write("old holder", old_token, str(old_read + 1))                 # 3.
    store.write("new holder", new_token, str(new_read + increments["new holder"]))         # 4.
    writes = store.writes()
    accepted = [increments[w.client] for w in writes if w.accepted and w.client in increments]
    return LateWriteOutcome(protect, old_accepted, new_read, int(store.value()), accepted, writes)


@dataclass(frozen=True)
class NumberedHold:
    """One hold of the lock: who, its node's sequence number and its czxid (the token)."""

    holder: str
    sequence: int
    czxid: int


@dataclass(frozen=True)
class SequenceRestart:
    """``before``/``after``: the holds before and after the parent was deleted and
    re-created. ``parent_deleted_after_s``: how long the empty parent lived (a client's Stat
    shows a container like any node, ephemeralOwner 0: that the server deletes it is the
    sign). ``parent_czxids``: the parent's czxid in each round, a different node."""

    path: str
    parent_deleted_after_s: float
    parent_czxids: tuple[int, int]
    before: list[NumberedHold]
    after: list[NumberedHold]

    @property
    def sequence_went_back(self) -> bool:
        return self.after[-1].sequence < self.before[-1].sequence

    @property
    def czxid_kept_growing(self) -> bool:
        tokens = [hold.czxid for hold in self.before + self.after]
        return tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def sequence_restart(lab, path: str | None = None, deletion_timeout: float = 15.0) -> SequenceRestart:
    """Two rounds on one lock path (see the module docstring). In each, a Curator peer takes
    the lock first (creating the container parent if it is missing) and hands it to our
    ZooKeeperLocks in turn; the queue is never empty inside a round, so the parent survives
    until the round ends."""
    path = path or f"/fencing-edges/{uuid.uuid4().hex[:8]}"
    clients = [lab.zookeeper.client(), lab.zookeeper.client()]
    curator = None
    try:
        curator = CuratorPeer(lab.zookeeper.hosts, path)   # not `with`: entering it would acquire
        with ThreadPoolExecutor(1) as pool:
            observer = clients[0]
            before, first_parent = _round(curator, [ZooKeeperLock(client, path, f"ours-{n}")
                                                    for n, client in enumerate(clients)], pool, observer)
            deleted_after = wait_until(lambda: observer.exists(path) is None,
                                       f"the server deletes the empty container {path} (the lab checks every 0.5 s)",
                                       deletion_timeout)
            after, second_parent = _round(curator, [ZooKeeperLock(observer, path, "ours-0")], pool, observer)
    finally:
        if curator is not None:
            curator.close()
        for client in clients:
            client.stop()
            client.close()
    return SequenceRestart(path, deleted_after, (first_parent, second_parent), before, after)


def _round(curator: CuratorPeer, locks: list[ZooKeeperLock], pool: ThreadPoolExecutor,
           observer) -> tuple[list[NumberedHold], int]:
    """Curator holds first, then each lock in turn; each queues before the previous releases.
    Returns the holds and the parent's czxid (read while the queue keeps the parent alive)."""
    curator.acquire(timeout=30)
    # Curator's session may be on another server: the observer's may not have applied its create yet
    observer.sync(curator.node)
    parent_czxid = observer.exists(curator.node.rsplit("/", 1)[0]).czxid
    holds = [NumberedHold("curator", sequence_of(curator.node), observer.exists(curator.node).czxid)]
    release = curator.release
    for lock in locks:
        waiting = pool.submit(lock.acquire, 30)
        wait_until(lambda: lock.sequence is not None, f"{lock.identifier} queues", 30)
        release()
        waiting.result(timeout=30)
        holds.append(NumberedHold(lock.identifier, lock.sequence, lock.token))
        release = lock.release
    release()
    return holds, parent_czxid
