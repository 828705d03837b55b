"""The experiments of the semaphore section of notebook 09 (claim C27), the tests and the bench.

- ``never_more_than``: client processes loop on a semaphore of N and write to a store,
  some holders are SIGKILLed on the way; the store's record is judged ("at most N").
- ``slot_after_death``: N holders in processes of their own, one more waiter here; a
  killed holder frees its slot only when the server gives up on it (session / lease
  timeout), a holder that closes its session frees it at once.
- ``wakeups_per_freed_slot``: N holders, W waiters lined up, the holders let go one at a
  time; who woke for each freed slot.
- ``curator_interop``: labkit's ZooKeeperSemaphore and Curator's InterProcessSemaphoreV2
  (a real JVM) holding leases of the same semaphore.
- ``bench_semaphore_vs_mutex``: acquire + release p50 of each semaphore against the mutex
  of the same service, same servers, same connection.

What can fail: ``TimeoutError`` (labkit.timing) naming the step that did not happen in
time; ``CuratorUnavailable`` when Java or Curator's jars are missing (``curator_interop``).
Every connection and process a function opens is closed before it returns.
"""
from __future__ import annotations

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from labkit.clients import spawn_clients
from labkit.locks.curator import CuratorPeer
from labkit.locks.errors import LockTimeout
from labkit.locks.registry import RecipeHandle, connections_of, make_lock
from labkit.progress import shows_progress, step_of_innermost
from labkit.record.checker import Verdict, check_at_most_holders
from labkit.record.fencing import FencedStore
from labkit.record.history import History
from labkit.record.resource_log import ResourceLog
from labkit.stats import summarize, take_turns
from labkit.timing import wait_for_value, wait_until
from labkit.torture.workload import TortureWorkload

SEMAPHORES = {"zookeeper": "zookeeper-semaphore", "etcd": "etcd-semaphore"}
MUTEXES = {"zookeeper": "zookeeper", "etcd": "etcd"}


def semaphore_on(lab: Any, recipe: str, name: str, limit: int, identifier: str, history: History | None = None,
                 timeout: float = 2.0) -> RecipeHandle:
    """A semaphore of ``recipe`` on connections (a session, a lease) of its own; ``timeout``:
    the ZooKeeper session timeout or the etcd lease TTL. Close it with ``handle.close()``."""
    sink = history.sink(identifier) if history is not None else (lambda kind, **detail: None)
    return make_lock(recipe, connections_of(lab), name, identifier, sink, session_timeout=timeout, ttl=timeout,
                     holders=limit)


@dataclass
class Occupancy:
    verdict: Verdict          # "at most N", from the store's record
    limit: int
    killed: int               # holders SIGKILLed (or paused) while they held
    holds: int                # holds the record shows
    writes: list[Any]         # the store's record (StoreWrite), to judge again
    history: History

    @property
    def most(self) -> int:
        return self.verdict.most or 0


@shows_progress("semaphore holders under kills and pauses")
def never_more_than(lab: Any, recipe: str, limit: int = 2, clients: int = 5, seconds: float = 4.0,
                    kills: int = 2, hold: float = 0.05, timeout: float = 2.0, fault: str = "kill") -> Occupancy:
    """``clients`` processes loop acquire / write / hold / write / release on one semaphore
    of ``limit`` for ``seconds``; ``kills`` times a holder is SIGKILLed (and rejoins, as a
    restarted process would), or with ``fault="pause"`` frozen for twice the ``timeout`` (it
    resumes believing it still holds). The lab's Redis keeps the record (an unfenced store:
    N holders carry N tokens, see the notebook's pitfalls). Returns the verdict of that record."""
    if fault not in ("kill", "pause"):
        raise ValueError(f"fault={fault!r}: 'kill' (SIGKILL a holder) or 'pause' (SIGSTOP it past its timeout)")
    name = f"/semaphores/{uuid.uuid4().hex[:8]}"
    store = FencedStore(lab.redis.client(), f"semaphore-store:{name}", fenced=False)
    store.reset()
    history = History()
    killed = 0
    with spawn_clients(lab, recipe, n=clients, name=name, history=history, store=store, hold=hold,
                       session_timeout=timeout, ttl=timeout, holders=limit) as group:
        workload = TortureWorkload(group, hold)
        workload.start()
        try:
            # "never more than N" says little of a run that never had N: the faults and the
            # clock of the run start once the record shows the semaphore full (on a loaded
            # machine the first holds can take turns for a while)
            step_of_innermost(f"{recipe}: waiting for {limit} holders at once")
            wait_until(lambda: (check_at_most_holders(store.writes(), limit, history=history).most or 0) >= limit,
                       f"the record to show {limit} holds acting at once", timeout=60, poll=0.05)
            started = time.monotonic()
            for number in range(kills):
                step_of_innermost(f"{recipe}: {fault} {number + 1} of {kills} in a {seconds:g} s run")
                # kill evenly through the run, each time a client that holds right now
                wait_until(lambda: time.monotonic() >= started + seconds * (number + 1) / (kills + 1),
                           "the moment of the next kill", timeout=seconds + 5)
                if fault == "kill":
                    wait_for_value(lambda: _kill_inside_a_hold(group, store), "a holder to kill inside its hold",
                                   timeout=30, poll=0.01)
                else:
                    _pause_inside_a_hold(group, store, 2 * timeout)
                killed += 1
            # a paused holder must wake while the others still work, to show what it does then
            ends = max(started + seconds, time.monotonic() + (2 * timeout + 1.0 if fault == "pause" else 0.0))
            wait_until(lambda: time.monotonic() >= ends, "the end of the run", timeout=ends - started + 5)
        finally:
            workload.stop(timeout=2 * timeout + clients * hold + 5)
    writes = store.writes()
    store.reset()
    store.client.close()
    verdict = check_at_most_holders(writes, limit, history=history)
    return Occupancy(verdict, limit, killed, len({(w.client, w.token) for w in writes if w.accepted}), writes, history)


def _kill_inside_a_hold(group: Any, store: FencedStore) -> Any:
    """SIGKILL a client whose hold is open in the store's record, or return None to be
    tried again. The parent's list of holders lags the clients, so a holder is frozen
    first and killed only if its last write says "begin"; once it is gone, the record is
    read again, since an "end" it sent just before the freeze may have reached Redis later."""
    for holder in group.holders():
        holder.pause(60.0)
        if not _in_its_hold(store, holder.name):
            holder.resume()
            continue
        holder.kill()
        holder.wait_for_state("dead", timeout=10)
        if _in_its_hold(store, holder.name):
            return holder
    return None


def _in_its_hold(store: FencedStore, client: str) -> bool:
    mine = [write.value for write in store.writes() if write.client == client]
    return bool(mine) and " begin " in mine[-1]


def _pause_inside_a_hold(group: Any, store: FencedStore, seconds: float) -> None:
    """Freeze, for ``seconds``, a client whose hold is open in the store's record: its last
    write says "begin", so it will write "end" after it wakes, as a holder. The parent's list
    of holders lags the clients (their events come through a pipe), so a client it names may
    already have written "end" and be releasing or waiting again: such a pause missed the
    hold, and is undone at once before another holder is tried."""
    def pause_one_that_holds():
        for holder in group.holders():
            holder.pause(seconds)
            time.sleep(0.05)   # a write sent just before the freeze reaches the store
            mine = [write.value for write in store.writes() if write.client == holder.name]
            if mine and " begin " in mine[-1]:
                return holder
            holder.resume()
        return None
    wait_for_value(pause_one_that_holds, "a holder to freeze inside its hold", timeout=10, poll=0.01)


@dataclass
class SlotRelease:
    timeout: float            # the session timeout / lease TTL of the holders
    killed_freed_after: float  # seconds from SIGKILL of a holder to the waiter's acquire
    released_freed_after: float  # seconds from a holder's release to the next waiter's acquire


def _acquire_in_thread(handle: RecipeHandle, acquired: dict[str, float], key: str) -> threading.Thread:
    def run() -> None:
        try:
            handle.lock.acquire(timeout=60)
        except Exception:      # closed under it at the end of an experiment: the waiter just stops
            return
        acquired[key] = time.monotonic()
    thread = threading.Thread(target=run, name=f"semaphore-{key}", daemon=True)
    thread.start()
    return thread


@shows_progress("a semaphore slot after its holder dies")
def slot_after_death(lab: Any, recipe: str, limit: int = 2, timeout: float = 2.0) -> SlotRelease:
    """``limit`` holders in processes of their own, two waiters here. SIGKILL one holder: the
    first waiter gets in when the server ends the dead holder's session or lease. Then a
    holder releases: the second waiter gets in at once."""
    name = f"/semaphores/{uuid.uuid4().hex[:8]}"
    history = History()
    acquired: dict[str, float] = {}
    waiters: list[RecipeHandle] = []
    with spawn_clients(lab, recipe, n=limit, name=name, history=history, session_timeout=timeout, ttl=timeout,
                       holders=limit) as group:
        try:
            for client in group:
                client.acquire(timeout=10)
            for number in (1, 2):
                waiter = semaphore_on(lab, recipe, name, limit, f"waiter-{number}", history, timeout)
                waiters.append(waiter)
                _acquire_in_thread(waiter, acquired, f"waiter-{number}")
                wait_until(lambda: history.events(client=f"waiter-{number}", kind="watch"),
                           f"waiter-{number} to queue", timeout=10)
            wait_until(lambda: _watching_slot(history, "waiter-1"), "waiter-1 to wait at the head", timeout=10)
            group[0].kill()
            killed_at = time.monotonic()
            wait_until(lambda: "waiter-1" in acquired, "the dead holder's slot to be freed", timeout=timeout * 3 + 10)
            wait_until(lambda: _watching_slot(history, "waiter-2"), "waiter-2 to wait at the head", timeout=10)
            group[1].release()
            closed_at = time.monotonic()
            wait_until(lambda: "waiter-2" in acquired, "the released slot to be taken", timeout=10)
        finally:
            for waiter in waiters:
                waiter.close()
    return SlotRelease(timeout, acquired["waiter-1"] - killed_at, acquired["waiter-2"] - closed_at)


def _watching_slot(history: History, client: str) -> bool:
    """True once ``client``'s latest watch is the one a freed slot fires (the head's)."""
    watches = history.events(client=client, kind="watch")
    return bool(watches) and watches[-1].detail.get("what") == "slot"


@dataclass
class FreedSlot:
    slot: list[str]           # the waiters a freed slot woke (the head of the line)
    line: list[str]           # the waiters woken because the line moved up behind it


def wakeups_per_freed_slot(lab: Any, recipe: str, limit: int = 2, waiters: int = 4,
                           timeout: float = 4.0) -> list[FreedSlot]:
    """``limit`` holders and ``waiters`` waiters in line, each on a connection of its own in
    a thread of this process. The holders release one at a time, each once the line has
    settled (the new head waits on the holders again); for each freed slot, who woke."""
    name = f"/semaphores/{uuid.uuid4().hex[:8]}"
    history = History()
    acquired: dict[str, float] = {}
    handles: list[RecipeHandle] = []
    freed: list[FreedSlot] = []
    try:
        for number in range(limit + waiters):
            handles.append(semaphore_on(lab, recipe, name, limit, f"c{number}", history, timeout))
        for number in range(limit):
            handles[number].lock.acquire(timeout=10)
        for number in range(limit, limit + waiters):
            _acquire_in_thread(handles[number], acquired, f"c{number}")
            # queue in a known order: each waiter is in line before the next one comes
            wait_until(lambda: history.events(client=f"c{number}", kind="watch"), f"c{number} to wait", timeout=10)
        wait_until(lambda: _watching_slot(history, f"c{limit}"), "the head to wait on the holders", timeout=10)
        for release in range(waiters):
            before = len(history.events())
            handles[release].lock.release()
            head = f"c{limit + release}"
            wait_until(lambda: head in acquired, f"{head} to take the freed slot", timeout=10)
            if release + 1 < waiters:
                following = f"c{limit + release + 1}"
                wait_until(lambda: _watching_slot(history, following), f"{following} to become the head", timeout=10)
            woke = [event for event in history.events()[before:] if event.kind == "woke"]
            freed.append(FreedSlot([e.client for e in woke if e.detail.get("what") == "slot"],
                                   [e.client for e in woke if e.detail.get("what") == "line"]))
    finally:
        with contextlib.ExitStack() as closing:
            for handle in handles:
                closing.callback(handle.close)
    return freed


@dataclass
class Interop:
    curator_admitted_beside_labkit: bool   # Curator took the last slot while labkit held the others
    labkit_refused_while_full: bool        # then a labkit client had to wait (Curator's lease counted)
    labkit_admitted_after_curator: bool    # and got in once Curator returned its lease
    curator_refused_while_full: bool       # Curator had to wait while labkit held every slot
    together: Verdict                      # labkit threads and Curator looping together, judged
    curator_holds: int


@shows_progress("labkit's semaphore and Curator's, side by side")
def curator_interop(lab: Any, limit: int = 2, seconds: float = 3.0, hold: float = 0.02) -> Interop:
    """labkit's ZooKeeperSemaphore and Curator's InterProcessSemaphoreV2 on one path. First
    step by step (who is admitted, who must wait), then ``limit + 1`` labkit threads and
    one Curator peer loop together for ``seconds``, writing to one ResourceLog: judged
    "at most ``limit``"."""
    name = f"/semaphores/{uuid.uuid4().hex[:8]}"
    hosts = lab.zookeeper.hosts
    history = History()
    handles = [semaphore_on(lab, "zookeeper-semaphore", name, limit, f"labkit-{n}", history, 4.0)
               for n in range(limit + 1)]
    peer = CuratorPeer(hosts, name, identifier="curator", max_leases=limit, auth=lab.zookeeper.auth)
    try:
        for handle in handles[:limit - 1]:
            handle.lock.acquire(timeout=10)
        peer.acquire(timeout=10)
        curator_beside = peer.is_held
        last = handles[limit - 1].lock
        refused = _times_out(lambda: last.acquire(timeout=0.5))
        peer.release()
        last.acquire(timeout=10)
        admitted_after = last.is_held
        curator_refused = _times_out(lambda: peer.acquire(timeout=0.5))
        for handle in handles[:limit]:
            handle.lock.release()
        together, curator_holds = _loop_together(handles, peer, seconds, hold, limit)
    finally:
        peer.close()
        for handle in handles:
            handle.close()
    return Interop(curator_beside, refused, admitted_after, curator_refused, together, curator_holds)


def _times_out(acquire) -> bool:
    try:
        acquire()
    except LockTimeout:
        return True
    return False


def _loop_together(handles: list[RecipeHandle], peer: CuratorPeer, seconds: float, hold: float,
                   limit: int) -> tuple[Verdict, int]:
    resource = ResourceLog()
    stop = time.monotonic() + seconds
    curator_holds = [0]
    errors: list[BaseException] = []

    def loop(name: str, lock: Any) -> None:
        try:
            while time.monotonic() < stop:   # the work of the run (acquire, hold, release), not a wait
                token = lock.acquire(timeout=30)
                resource.write(name, token, "begin")
                time.sleep(hold)
                resource.write(name, token, "end")
                lock.release()
                if lock is peer:
                    curator_holds[0] += 1
        except BaseException as error:  # re-raised below, in the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=loop, args=(f"labkit-{n}", handle.lock), daemon=True)
               for n, handle in enumerate(handles)]
    threads.append(threading.Thread(target=loop, args=("curator", peer), daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    if errors:
        raise errors[0]
    return check_at_most_holders(resource.writes(), limit), curator_holds[0]


def bench_semaphore_vs_mutex(lab: Any, iterations: int = 100, limit: int = 3) -> dict[str, dict[str, Any]]:
    """Acquire + release, uncontended, of each service's semaphore (``limit`` slots) and
    mutex on the lab's servers, taken in turns on one connection each: p50 / p99 in ms and
    the ratio of the p50s (semaphore / mutex; the target is <= 1.5)."""
    results: dict[str, dict[str, Any]] = {}
    for service, semaphore_recipe in SEMAPHORES.items():
        if getattr(lab, service, None) is None:
            continue
        name = f"/bench-semaphore/{uuid.uuid4().hex[:8]}"
        semaphore = semaphore_on(lab, semaphore_recipe, name, limit, "bench-semaphore")
        mutex = make_lock(MUTEXES[service], connections_of(lab), f"{name}-mutex", "bench-mutex")
        try:
            def cycle(lock: Any):
                return lambda: (lock.acquire(timeout=10), lock.release())
            samples = take_turns({"semaphore": cycle(semaphore.lock), "mutex": cycle(mutex.lock)},
                                 iterations, warm_up=5)
        finally:
            semaphore.close()
            mutex.close()
        row = {primitive: summarize(values) for primitive, values in samples.items()}
        row["ratio"] = round(row["semaphore"]["p50_ms"] / row["mutex"]["p50_ms"], 2)
        results[service] = row
    return results
