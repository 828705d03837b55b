"""Curator's InterProcessMutex cut off from the quorum: when does Curator say so, against the
moment the servers give its lock to someone else?

``curator_race(lab, topology)`` runs one race on a real 3-node ZooKeeper ensemble started
with ``network=True``. A real Curator (the Java peer, labkit/locks/curator.py) takes a lock
through its own links (``holder-1``) to one follower only; a ZooKeeperLock waiter queues
behind it through others (``waiter-1``) on the other two members. Then the network breaks
(the topologies of holder_safety.py):

- ``client-link``: the holder's link to its server is cut. The ZooKeeper Java client hears
  nothing for 2/3 of the session timeout, drops the connection, and Curator reports
  SUSPENDED; the leader expires the session one timeout after the last ping it saw.
- ``follower-cut``: the holder's server, a follower, is cut from the leader and the third
  member; the holder's link to it stays up. The follower keeps answering the client's pings
  until it has missed the leader for syncLimit x tickTime, then drops its clients: only then
  does Curator report SUSPENDED. The leader, which alone expires sessions, heard of the last
  ping before the cut.

In both, Curator's LOST is simulated: Curator 5 reports it once SUSPENDED has lasted the
negotiated session timeout (no server can tell the cut-off client that its session expired).

The run records, in ms after the fault: Curator's first SUSPENDED and first LOST, the
waiter's client seeing the server delete the holder's node, and the waiter's ``acquire``
returning. What a Curator user must do follows from the order of these (CURATOR_RULE).

Measured (Debian's Curator 5.4.0 and ZooKeeper 3.8.0; tickTime 200 ms, syncLimit 5, so a
cut-off follower drops its clients ~1 s after the cut; the fault at a random point of the
client's ping cycle):

| topology | session | runs | SUSPENDED (ms) | grant (ms) | SUSPENDED before the grant by (ms) | LOST (ms) |
|---|---|---|---|---|---|---|
| client-link | 2 s | 12 | 853-1360 | 1532-2071 | 663 to 864, 12 of 12 | 2858-4907 |
| client-link | 0.6 s | 5 | 384-482 | 547-853 | 153 to 381, 5 of 5 | 988-1661 |
| follower-cut | 2 s | 12 | 1019-1107 | 1493-2117 | 404 to 1017, 12 of 12 | 3028-4798 |
| follower-cut | 1.2 s | 5 | 1045-1106 | 972-1273 | -120 to 198, 3 of 5 | 2297-2898 |
| follower-cut | 0.8 s | 5 | 1028-1082 | 741-873 | -291 to -158, 0 of 5 | 1833-2952 |
| follower-cut | 0.6 s | 13 | 1012-1104 | 474-739 | -585 to -304, 0 of 13 | 1618-3091 |

With the holder's follower cut off, SUSPENDED stays at ~1 s whatever the session timeout
(on a loaded machine a 0.6 s session's own read timeout, 0.4 s after its last answer, can
fire first when a ping is answered late: 728 ms once at load 8, still after the grant),
while the grant moves with it: a session shorter than syncLimit x tickTime gets SUSPENDED
after another client holds the lock, every time. LOST came one session timeout after
SUSPENDED, or up to 2 s later still, and after the grant in every run (by 0.2 to 3.1 s).

What can fail: ``CuratorUnavailable`` without Java or Curator's jars; ``TimeoutError`` if the
waiter never acquires or the ensemble does not settle after the heal (the message says
which); ``ValueError`` for an unknown topology or a lab without 3 ZooKeeper members and
``network=True``.
"""
from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from labkit.harness.cut_off import again_if_void, ensemble_to_cut, seats
from labkit.lessons.holder_safety import HOLDER, WAITER
from labkit.lessons.holder_safety import TOPOLOGIES as ALL_TOPOLOGIES
from labkit.locks.curator import CuratorLockGone, CuratorPeer
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.locks.zookeeper_queue import contenders_seen
from labkit.progress import repeat, shows_progress, waiting_for
from labkit.timing import became_true, wait_until

CURATOR_TOPOLOGIES = {name: ALL_TOPOLOGIES[name] for name in ("client-link", "follower-cut")}
WAITER_TIMEOUT = 6.0      # the waiter's own session: long, it must not expire in the race
# beyond SUSPENDED + the session timeout, how long to wait for Curator's LOST: it came up to 3.1 s
# late on an idle machine and later on a loaded one (a notebook read "never" at load 28). The
# wait ends as soon as LOST comes, so a generous bound costs nothing when it is on time.
LOST_GRACE = 20.0



class HolderWavered(RuntimeError):
    """Curator's connection changed state between its acquire and the fault (SUSPENDED, even
    LOST, by its own clock, on a stalled machine: a 0.6 s session's pings come late): the
    holder was not steadily connected when it was cut, so the race raced nothing; it runs again."""


CURATOR_RULE = (
    "InterProcessMutex does not watch the connection: add a ConnectionStateListener and stop "
    "using what the lock protects at SUSPENDED, as Curator's docs advise, never wait for LOST "
    "(it comes a whole session timeout after SUSPENDED, after another client got the lock). "
    "SUSPENDED is in time only if it comes before the leader expires the session. When the "
    "holder's server is a follower cut from the leader, SUSPENDED waits until the follower "
    "drops its clients, syncLimit x tickTime after the cut, while the leader can expire the "
    "session 2/3 of the session timeout minus half a tick after the cut (the client's last "
    "ping can be a third of the timeout old, and the follower reports pings every half tick). "
    "So 2/3 of the session timeout must exceed syncLimit x tickTime + half a tick + the time "
    "the holder needs to stop: with zoo_sample.cfg's tickTime=2000 and syncLimit=5, a session "
    "above 16.5 s plus 1.5 times that time. With a shorter one, SUSPENDED can come after the "
    "next holder got the lock. And fence the resource anyway: a write already sent can "
    "arrive late.")


@dataclass(frozen=True)
class CuratorRun:
    """One race. Times in ms after the fault; None when it did not happen in the run."""

    topology: str
    timeout_s: float              # the session timeout the server granted Curator
    suspended_ms: float | None    # Curator's first SUSPENDED
    lost_ms: float | None         # Curator's first LOST
    deleted_ms: float | None      # the waiter's client saw the holder's node deleted
    acquired_ms: float            # the waiter's acquire returned
    stamps_from_jvm: bool         # times of Curator's states taken in the JVM (else on arrival)

    @property
    def suspended_first(self) -> bool:
        """Curator said SUSPENDED strictly before the waiter got the lock."""
        return self.suspended_ms is not None and self.suspended_ms < self.acquired_ms

    @property
    def suspended_margin_ms(self) -> float | None:
        """How long before the waiter's grant Curator said SUSPENDED (negative: after it)."""
        return None if self.suspended_ms is None else self.acquired_ms - self.suspended_ms

    @property
    def lost_late_ms(self) -> float | None:
        """How long after the waiter's grant Curator said LOST (negative: before it)."""
        return None if self.lost_ms is None else self.lost_ms - self.acquired_ms

    def row(self) -> dict[str, Any]:
        def ms(value):
            return "never" if value is None else round(value)
        return {"topology": self.topology, "timeout (s)": self.timeout_s,
                "SUSPENDED (ms)": ms(self.suspended_ms), "node deleted (ms)": ms(self.deleted_ms),
                "waiter acquired (ms)": round(self.acquired_ms), "LOST (ms)": ms(self.lost_ms),
                "SUSPENDED before the grant by (ms)": ms(self.suspended_margin_ms),
                "LOST after the grant by (ms)": ms(self.lost_late_ms)}


@shows_progress("a Curator holder cut off, against a waiter")
def curator_race(lab, topology: str = "follower-cut", timeout: float = 2.0) -> CuratorRun:
    """One race (see the module docstring). ``timeout``: the session timeout Curator asks
    for, in seconds."""
    if topology not in CURATOR_TOPOLOGIES:
        raise ValueError(f"topology={topology!r} is not one of {tuple(CURATOR_TOPOLOGIES)}")
    zookeeper = ensemble_to_cut(lab, "curator_race")
    holder_node, others = seats(zookeeper)
    path = f"/curator-race-{uuid.uuid4().hex[:8]}"
    # The holder may reconnect only to its own server: in the partition it has no other.
    holder = CuratorPeer(zookeeper.hosts_for(HOLDER, [holder_node]), path, session_timeout=timeout,
                         identifier="curator-holder", auth=zookeeper.auth)
    waiter_client = None
    waiter = None
    acquired: list[float] = []
    deleted: list[float] = []
    failed: list[BaseException] = []
    try:
        holder.acquire(timeout=15)
        held_at = time.monotonic()
        waiter_client = zookeeper.client(timeout=WAITER_TIMEOUT, via=WAITER, nodes=others)
        waiter = ZooKeeperLock(waiter_client, path, "waiter")

        def wait_for_the_lock() -> None:
            try:
                waiter.acquire(timeout=30 + 6 * timeout)
                acquired.append(time.monotonic())
            except BaseException as error:  # handed to the main thread
                failed.append(error)

        threading.Thread(target=wait_for_the_lock, daemon=True).start()
        wait_until(lambda: contenders_seen(waiter_client, path) == 2, "the waiter queues behind Curator")

        def on_change(event) -> None:
            if event.type == "DELETED":
                deleted.append(time.monotonic())

        if waiter_client.exists(holder.node, watch=on_change) is None:
            raise RuntimeError(f"Curator's node {holder.node} vanished before the fault")
        # The steps above take about as long in every run, so the fault would fall at the
        # same point of the client's ping cycle each time and show one case only. A random
        # wait over one ping interval (the Java client pings after a third of the session
        # timeout of silence) makes the runs cover the range: the leader's last news of the
        # session comes from up to one interval before the cut.
        time.sleep(random.uniform(0, holder.negotiated_timeout / 3))
        fault_at = time.monotonic()
        if topology == "client-link":
            lab.isolate(HOLDER)
        else:
            lab.partition([holder_node.name, HOLDER], [node.name for node in others] + [WAITER])
        patience = 30 + 6 * timeout
        with waiting_for("Curator's session to expire", timeout):
            wait_until(lambda: acquired or failed, f"{topology}: the waiter to get the lock", patience, 0.01,
                       error=TimeoutError(f"{topology}: the waiter did not get the lock within {patience:.0f} s "
                                          "of the fault"))
        if failed:
            raise failed[0]
        # LOST comes a session timeout after SUSPENDED: wait for it while the cut lasts.
        lost_by = fault_at + 2 * holder.negotiated_timeout + 2 * lab.zookeeper.server_lag + LOST_GRACE
        became_true(lambda: any(change.state == "LOST" for change in holder.states),
                    max(0.0, lost_by - time.monotonic()), 0.01)
    finally:
        lab.heal()
        try:
            if waiter is not None:
                waiter.release()
        finally:
            holder.close()
            if waiter_client is not None:
                waiter_client.stop()
                waiter_client.close()
    wait_until(zookeeper.is_ready, "the ZooKeeper ensemble settles after the heal", timeout=60, poll=0.05)
    wavered = [change.state for change in holder.states if held_at <= change.at < fault_at]
    if wavered:
        # seen in a fresh-clone run at load 16: SUSPENDED and LOST before the cut, none after
        raise HolderWavered(f"Curator said {', '.join(wavered)} before the fault: it was not steadily connected")

    def first(state: str) -> float | None:
        times = [change.at for change in holder.states if change.state == state and change.at >= fault_at]
        return 1000 * (times[0] - fault_at) if times else None

    return CuratorRun(topology, holder.negotiated_timeout, first("SUSPENDED"), first("LOST"),
                      1000 * (deleted[0] - fault_at) if deleted else None, 1000 * (acquired[0] - fault_at),
                      holder.stamps_from_jvm)


def curator_race_many(lab, topology: str, runs: int, timeout: float = 2.0, progress=None) -> list[CuratorRun]:
    """``runs`` races in a row, each shown as a step (labkit.progress); ``progress(i, run)``
    after each (e.g. print). A run whose holder's session expired right after its acquire (a
    stalled machine: CuratorLockGone), or whose holder's connection wavered before the fault
    (HolderWavered), raced nothing and runs again."""
    return repeat("Curator race", runs,
                  lambda: again_if_void(lambda: curator_race(lab, topology, timeout), (CuratorLockGone, HolderWavered)),
                  topology, progress)


def curator_summary(runs: list[CuratorRun]) -> dict[str, Any]:
    """Ranges over a batch of runs of one topology, in ms after the fault."""
    def span(values):
        values = [value for value in values if value is not None]
        return f"{min(values):.0f}-{max(values):.0f}" if values else "-"
    return {"topology": runs[0].topology, "runs": len(runs),
            "timeout (s)": sorted({run.timeout_s for run in runs}),
            "SUSPENDED (ms)": span(run.suspended_ms for run in runs),
            "waiter acquired (ms)": span(run.acquired_ms for run in runs),
            "LOST (ms)": span(run.lost_ms for run in runs),
            "SUSPENDED first": sum(run.suspended_first for run in runs),
            "SUSPENDED before the grant by (ms)": span(run.suspended_margin_ms for run in runs),
            "LOST after the grant by (ms)": span(run.lost_late_ms for run in runs)}
