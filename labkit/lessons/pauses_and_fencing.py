"""Notebook 04: a pause longer than the session timeout, and what fencing does about it.

``pause_past_timeout`` freezes a holder (SIGSTOP) longer than its session timeout or
lease TTL, lets a second client take the lock meanwhile, then lets the first one write
late to a store, fenced or not.

What can fail: ``labkit.clients.ClientError`` / ``ClientTimeout`` when a client process
does not start or answer, ``TimeoutError`` when an expected event does not come.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labkit.clients import spawn_clients
from labkit.record.checker import Verdict, check_mutual_exclusion
from labkit.record.fencing import FencedStore, StoreWrite
from labkit.record.history import History

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


@dataclass
class PauseOutcome:
    """What ``pause_past_timeout`` saw. Tokens are ZooKeeper sequence numbers or etcd
    create revisions; ``writes`` is the store's own record, in the order it ran them."""

    recipe: str
    fenced: bool
    history: History
    writes: list[StoreWrite]
    old_token: int
    new_token: int
    late_write_accepted: bool
    new_holder_acquired_at: float   # time.time() of the second client's "acquired"
    old_holder_told_at: float       # time.time() of the paused client's "lost"

    @property
    def verdict(self) -> Verdict:
        return check_mutual_exclusion(self.writes)

    def rows(self) -> list[dict[str, Any]]:
        """The store's record as table rows, time in seconds since its first write."""
        origin = self.writes[0].time
        return [{"t (s)": round(write.time - origin, 3), "client": write.client, "token": write.token,
                 "value": write.value, "accepted": write.accepted, "reason": write.reason}
                for write in self.writes]


def pause_past_timeout(lab: Lab, recipe: str = "zookeeper", fenced: bool = True, timeout: float = 1.0,
                       pause: float = 3.0, name: str | None = None) -> PauseOutcome:
    """Two client processes of ``recipe`` share a lock and a FencedStore (``fenced`` or not).

    client-1 acquires and writes; it is frozen with SIGSTOP for ``pause`` seconds, longer
    than its session timeout / lease TTL (``timeout`` seconds); client-2 acquires as soon
    as the server lets it, and writes; client-1 resumes and, still believing it holds the
    lock, writes with its old token. Raises ValueError if ``pause`` is not longer than
    ``timeout``, ClientTimeout if client-2 never gets the lock.
    """
    if pause <= timeout:
        raise ValueError(f"pause ({pause} s) must be longer than the timeout ({timeout} s), or nothing is lost")
    name = name or f"/locks/pause-{recipe}-{'fenced' if fenced else 'unfenced'}-{time.time_ns()}"
    store = FencedStore(lab.redis.client(), f"store:{name}", fenced=fenced)
    store.reset()
    history = History()
    with spawn_clients(lab, recipe, n=2, name=name, history=history, store=store,
                       session_timeout=timeout, ttl=timeout) as clients:
        paused, other = clients
        old_token = paused.acquire(timeout=10)
        paused.write("written by the first holder")
        paused.pause(pause)
        new_token = other.acquire(timeout=pause + 10)
        other.write("written by the new holder")
        # sent while client-1 is frozen: it runs the moment the process resumes
        late_write_accepted = paused.wait_reply(paused.send("write", value="late write by the old holder"),
                                                timeout=pause + 10)
        told = history.wait_for("lost", client=paused.name, timeout=timeout + 10)[0]
        other.release()  # so that its hold ends as a release, not with the closing session
    acquired = history.events(client=other.name, kind="acquired")[0]
    writes = store.writes()
    store.reset()
    return PauseOutcome(recipe, fenced, history, writes, old_token, new_token, late_write_accepted,
                        acquired.time, told.time)
