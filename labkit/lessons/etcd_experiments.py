"""The many-client experiments of the etcd lesson (notebook 03): threads, barriers and plots,
so that a notebook cell shows the experiment and not its harness. (``etcd_leases`` holds the
contender factories and the wakeup count they build on; ``etcd_order`` the compare-and-swap
counters and the order of writes across members.)

* ``sample_leases`` / ``lease_countdown_plot``: leases' remaining TTL as etcd reports it.
* ``stop_keepalive``: two client processes; the holder's keep-alive stops: when etcd deletes
  its key, when the waiter acquires, when the holder itself knows.
* ``guarded_put`` / ``careless_holder``: a holder that goes on writing after its lease ended,
  with plain puts and with puts guarded by ``is_owner()`` in the same transaction.
* ``hold_past_ttl``: python-etcd3's Lock and the Mutex held past their TTL, then a rival each.
* ``queue_behind_etcdctl``: our Mutex asks for a lock that ``etcdctl lock`` (Go's Mutex) holds.

What can fail: ``TimeoutError`` naming what was awaited; python-etcd3's errors when etcd does
not answer (a linearizable read without quorum is *expected* to fail, and is reported, not
raised, by ``without_quorum``).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from labkit.clients import spawn_clients
from labkit.locks import Locked
from labkit.locks.etcd3_reference import Etcd3ReferenceLock
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.progress import shows_progress
from labkit.record.events import Event
from labkit.record.history import History
from labkit.timing import wait_until
from labkit.vocabulary import (ACCEPTED_COLOUR, ERROR_COLOUR, FAULT_COLOUR, REJECTED_COLOUR, STATE_COLOURS,
                               SUCCESSOR_COLOUR)

if TYPE_CHECKING:
    from labkit.servers.services.etcd import EtcdService
    from labkit.servers.lab import Lab


UNREFRESHED, REFRESHED = "python-etcd3 Lock's lease (never refreshed)", "EtcdMutex's lease (its session refreshes it)"


# ---- leases -------------------------------------------------------------------------------
@shows_progress("etcd leases counting down")
def sample_leases(etcd: EtcdService, lease_ids: dict[str, int], key: str, ttl: float,
                  every: float = 0.1) -> list[tuple[float, dict[str, int], bool]]:
    """Every ``every`` seconds: (seconds since the call, {name: the lease's remaining TTL as
    the server reports it, -1 once it is gone}, does ``key`` exist). Stops one second after
    ``key`` is gone, or ``ttl + 8`` seconds after the call."""
    started, samples = time.monotonic(), []
    while time.monotonic() - started < ttl + 8:   # a sampler, not a wait: every reading is kept
        exists = etcd.get(key)[0] is not None
        ttls = {name: etcd.get_lease_info(lease_id).TTL for name, lease_id in lease_ids.items()}
        samples.append((time.monotonic() - started, ttls, exists))
        if not exists and samples[-1][0] > ttl + 1:
            break
        time.sleep(every)
    return samples


def lease_countdown_plot(samples: list[tuple[float, dict[str, int], bool]], ax: Any, title: str,
                         gone_label: str = "key on the lone lease deleted") -> Any:
    """One step curve per lease, and a dashed line (``gone_label``) where the key went."""
    seconds = [moment for moment, _, _ in samples]
    for name in samples[0][1]:
        ax.step(seconds, [ttls[name] for _, ttls, _ in samples], where="post", label=name)
    gone_at = next((moment for moment, _, exists in samples if not exists), None)
    if gone_at is not None:
        ax.axvline(gone_at, color=ERROR_COLOUR, linestyle="--", label=gone_label)
    ax.set(title=title, xlabel="seconds since the grant", ylabel="remaining TTL (s, whole seconds; -1 = gone)")
    ax.legend()
    return ax


# ---- a holder that goes on writing ----------------------------------------------------------
@dataclass(frozen=True)
class KeepaliveStop:
    """Seconds after the holder's keep-alive stopped: until etcd deleted its key, until the
    waiter held the lock, until the holder itself knew; whether the holder held and the
    waiter waited before the stop; the holder's state at the end; the run's History."""

    key_gone_after: float
    acquired_after: float
    holder_noticed_after: float
    queued_behind_holder: bool
    holder_state: str
    history: History


@shows_progress("an etcd lease left without keep-alives")
def stop_keepalive(lab: "Lab", etcd: Any, path: str, ttl: int, work: float = 0.3) -> KeepaliveStop:
    """Two client processes on ``path`` (leases of ``ttl`` s): the holder's keep-alive stops,
    its process runs on, silent. The waiter holds the lock for ``work`` seconds at the end."""
    history = History()
    with spawn_clients(lab, recipe="etcd", n=2, name=path, ttl=ttl, history=history) as processes:
        holder, waiter = processes[0], processes[1]
        holder.acquire(timeout=10)
        holder_key = f"{path}/{holder.session['lease_id']:x}"
        request = waiter.send("acquire", timeout=30)
        history.wait_for("watch", client=waiter.name, timeout=10)
        queued = etcd.get(holder_key)[0] is not None and waiter.state == "waiting"

        stopped = time.time()
        holder.stop_keepalive()                      # the holder is alive, but silent
        wait_until(lambda: etcd.get(holder_key)[0] is None, "etcd to delete the holder's key", timeout=ttl + 10)
        key_gone_after = time.time() - stopped
        waiter.wait_reply(request, timeout=10)
        acquired_after = history.events(client=waiter.name, kind="acquired")[0].time - stopped
        noticed_after = history.wait_for("lost", client=holder.name, timeout=ttl + 10)[0].time - stopped
        time.sleep(work)                             # the new holder's work (a chosen time, not a wait)
        waiter.release()
        return KeepaliveStop(key_gone_after, acquired_after, noticed_after, queued, holder.state, history)


def guarded_put(mutex: EtcdMutex, key: str, value: str) -> bool:
    """Write only while ``mutex`` is held: the comparison and the put are one step on the server."""
    client = mutex.client
    succeeded, _ = client.transaction(compare=[mutex.is_owner()],
                                      success=[client.transactions.put(key, value)], failure=[])
    return succeeded


@dataclass
class CarelessRun:
    """Times in seconds after the holder's keep-alive stopped. ``writes``: (started, ended,
    "plain put" or "guarded txn", accepted); ``noticed``: when the holder's session gave up
    (None if it never did); ``successor_results``: the successor's two guarded writes."""

    writes: list[tuple[float, float, str, bool]] = field(default_factory=list)
    successor_acquired: float = 0.0
    successor_wrote_at: float = 0.0
    successor_results: list[bool] = field(default_factory=list)
    noticed: float | None = None


def careless_holder(careless: EtcdMutex, successor: EtcdMutex, plain_key: str, guarded_key: str,
                    writes_after_successor: int = 3, pace: float = 0.1, timeout: float = 30.0) -> CarelessRun:
    """``careless`` holds the lock and ``successor`` queues behind it. The careless holder's
    keep-alive is stopped; from then on it writes every ``pace`` seconds, a plain put to
    ``plain_key`` and a guarded put to ``guarded_key``, whatever its session says, until it
    has written ``writes_after_successor`` times after the successor took the lock and wrote
    "B" to both keys (guarded). Raises TimeoutError if the successor never gets the lock."""
    run, successor_wrote = CarelessRun(), threading.Event()
    session = careless.session
    with ThreadPoolExecutor(2) as pool:
        successor_turn = pool.submit(successor.lock, timeout)
        wait_until(lambda: len(careless.contenders()) == 2, "the successor to queue behind the holder", timeout=10)
        stopped = time.monotonic()
        session.add_done_callback(lambda: setattr(run, "noticed", time.monotonic() - stopped))

        def write_carelessly() -> None:
            after_successor, deadline = 0, time.monotonic() + timeout
            # the experiment itself (writes at a pace), not a wait for something: it stays a loop
            while after_successor < writes_after_successor and time.monotonic() < deadline:
                late = successor_wrote.is_set()
                number = len(run.writes) // 2
                started = time.monotonic() - stopped
                careless.client.put(plain_key, f"A #{number}")
                run.writes.append((started, time.monotonic() - stopped, "plain put", True))
                started = time.monotonic() - stopped
                accepted = guarded_put(careless, guarded_key, f"A #{number}")
                run.writes.append((started, time.monotonic() - stopped, "guarded txn", accepted))
                after_successor += late
                time.sleep(pace)

        session.stop_keepalive()
        writer = pool.submit(write_carelessly)
        successor_turn.result(timeout=timeout)
        run.successor_acquired = time.monotonic() - stopped
        run.successor_results = [guarded_put(successor, plain_key, "B"), guarded_put(successor, guarded_key, "B")]
        run.successor_wrote_at = time.monotonic() - stopped
        successor_wrote.set()
        writer.result(timeout=timeout)
    session.done.wait(timeout=timeout)
    return run


def careless_writes_plot(run: CarelessRun, ax: Any) -> Any:
    """A's writes on two rows (accepted green, rejected red) and the moments of the run."""
    for row, write in enumerate(("plain put", "guarded txn")):
        for accepted, color, label in ((True, ACCEPTED_COLOUR, "A's write accepted"),
                                        (False, REJECTED_COLOUR, "A's write rejected")):
            times = [ended for _, ended, what, ok in run.writes if what == write and ok == accepted]
            already_in_legend = label in ax.get_legend_handles_labels()[1]
            ax.scatter(times, [row] * len(times), color=color, marker="o" if accepted else "x",
                       label=None if already_in_legend or not times else label)
    ax.axvline(run.successor_acquired, color=FAULT_COLOUR, linestyle="--", label="A's key deleted, B acquires")
    ax.axvline(run.successor_wrote_at, color=SUCCESSOR_COLOUR, linestyle=":", label="B writes 'B'")
    if run.noticed is not None:
        ax.axvline(run.noticed, color=STATE_COLOURS["holding"], linestyle="-.", label="A's session.done is set")
    ax.set(yticks=[0, 1], yticklabels=["plain put", "guarded txn"], ylim=(-0.6, 1.6),
           title="A keeps writing after its lease ended", xlabel="seconds since A's keep-alive stopped")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


@dataclass
class PastTtl:
    """Both locks held past their TTL: the lease samples (``sample_leases``), when
    python-etcd3's key went (seconds held) and how long both were held; whether its Lock
    object still had its token; the rival's token on python-etcd3's lock; whether a Mutex
    rival was refused; the lock objects, for the asserts and the clean-up."""

    samples: list
    key_gone_at: float | None
    held_for: float
    reference_key_gone: bool
    still_says_held: bool
    rival_token: int | None
    mutex_rival_refused: bool
    reference: Etcd3ReferenceLock
    ported: EtcdMutex
    rival: Etcd3ReferenceLock


def hold_past_ttl(etcd: Any, new_client: Callable[[], Any], new_session: Callable[[], Any], ttl: int) -> PastTtl:
    """Take python-etcd3's Lock and an EtcdMutex with the same ``ttl``, hold both while
    sampling their leases until python-etcd3's key has been gone for a second, then let a
    rival ask for each lock."""
    reference = Etcd3ReferenceLock(new_client(), "nightly-job", ttl=ttl, identifier="python-etcd3 Lock")
    ported = EtcdMutex(new_session(), "/locks/nightly-job", identifier="EtcdMutex")
    reference.acquire(timeout=5)
    ported.lock(timeout=5)
    held_since = time.monotonic()
    samples = sample_leases(etcd, {UNREFRESHED: reference.etcd3_lock.lease.id, REFRESHED: ported.session.lease_id},
                            reference.key, ttl=ttl)
    key_gone_at = next((t for t, _, exists in samples if not exists), None)
    held_for = time.monotonic() - held_since
    reference_key_gone = etcd.get(reference.key)[0] is None
    still_says_held = reference.token is not None          # nothing told the Lock object anything

    rival = Etcd3ReferenceLock(new_client(), "nightly-job", ttl=30, identifier="rival")
    rival_token = rival.acquire(timeout=2)
    mutex_rival = EtcdMutex(new_session(), "/locks/nightly-job", identifier="Mutex rival")
    try:
        mutex_rival.try_lock()
        mutex_rival_refused = False
    except Locked:
        mutex_rival_refused = True
    return PastTtl(samples, key_gone_at, held_for, reference_key_gone, still_says_held, rival_token,
                   mutex_rival_refused, reference, ported, rival)


@dataclass
class BehindEtcdctl:
    """Our Mutex and a lock held by ``etcdctl lock``: was it refused and still waiting while
    etcdctl held; the queue then and once ours; etcdctl's key, its result and our token;
    our Mutex and the History (etcdctl's hold added as seen from here)."""

    refused_while_go_holds: bool
    still_waiting: bool
    queue_while_go_holds: list[str]
    queue_once_ours: list[str]
    go_key: str
    go_result: Any
    our_token: int
    ours: EtcdMutex
    history: History


@shows_progress("a queue behind etcdctl's lock holder")
def queue_behind_etcdctl(lab: "Lab", session: Any, path: str, pool: ThreadPoolExecutor,
                         hold: float = 2.0, work: float = 0.3) -> BehindEtcdctl:
    """``etcdctl lock path`` holds for ``hold`` s (its command prints the key, then sleeps);
    meanwhile our Mutex on ``session`` tries, then queues and waits its turn."""
    history = History()
    ours = EtcdMutex(session, path, identifier="our EtcdMutex", on_event=history.sink("our EtcdMutex (Python)"))
    go_run = pool.submit(lab.etcd.etcdctl, "lock", path, "--", "sh", "-c", f'echo "$ETCD_LOCK_KEY"; sleep {hold}')
    wait_until(lambda: ours.contenders(), f"etcdctl to hold {path}", timeout=15)
    go_seen_at, go_key = time.time(), ours.contenders()[0]
    try:
        ours.try_lock()
        refused = False
    except Locked:
        refused = True
    our_turn = pool.submit(ours.lock, 30)
    wait_until(lambda: len(ours.contenders()) == 2, "our key to queue behind etcdctl's")
    queue_while_go_holds, still_waiting = ours.contenders(), not our_turn.done()
    our_token = our_turn.result(timeout=30)
    queue_once_ours = ours.contenders()
    go_result = go_run.result(timeout=30)
    time.sleep(work)                   # our work under the lock (a chosen time, not a wait)
    ours.unlock()
    # etcdctl's hold as seen from here: from when its key appeared to when our watch saw it deleted
    woke = history.events(kind="woke")
    history.append(Event(go_seen_at, "etcdctl lock (Go)", "acquired", {"key": go_key}))
    if woke:
        history.append(Event(woke[0].time, "etcdctl lock (Go)", "released", {"key": go_key}))
    return BehindEtcdctl(refused, still_waiting, queue_while_go_holds, queue_once_ours, go_key, go_result,
                         our_token, ours, history)
