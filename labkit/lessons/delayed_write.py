"""Kleppmann's delayed write: a deadline does not replace fencing.

``delayed_write(lab, fenced)`` runs one schedule on real servers (a lab started with
``network=True``, ZooKeeper and Redis). The holder takes a ``ZooKeeperLock`` (its token is
the czxid of its node) and writes once to a ``FencedStore`` on Redis. Then only the link
from the holder to Redis, in that direction, is delayed for longer than the session
timeout. The holder checks ``lock.is_held`` and sends its second write while it still holds,
well before its client-side deadline ``lock.give_up_at()``; right after the send, its links
to ZooKeeper are cut, so its session expires on the server. A second client, queued behind
it, gets the lock (a higher token) and writes. Then the delayed write reaches Redis: the
link holds it for the delay and, on a machine slow enough that the successor has not written
by then, until it has (a one-way cut of holder -> Redis from the send to the successor's
write), so the order the lesson shows is forced, never a race that a busy machine can lose. The
unfenced store applies it after the successor's write, so the old holder's value wins: the
data is corrupted. The fenced store refuses it: its token is lower than one it has seen.

The holder did everything right by its client-side deadline: its check passed, its send came
before its deadline, and it gave up before the successor acquired. The network still
carried its write past all of that. Only the resource, which sees the writes in the order
they arrive, can tell.

``delayed_write_runs(lab, runs)`` runs it ``runs`` times with each store;
``plot_delayed_writes(outcomes)`` draws each outcome as a timeline. The holder's Redis
client waits longer than the delay for its answer (``socket_timeout``), so nothing hangs
and nothing times out. The holder's first write loads the store's script into Redis and
opens the connection, so the delayed write is one request on one open connection: it pays
the delay once.

What can fail: ``ValueError`` for a lab without ZooKeeper, Redis or ``network=True``, or a
delay not longer than the session timeout; ``TimeoutError`` if the successor does not get
the lock or the late write gets no answer in time; ``RuntimeError`` if the holder's check
fails before the send (it does not hold: nothing to show).
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labkit.lessons.holder_safety import HOLDER, POLL
from labkit.locks.errors import LockError
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.locks.zookeeper_queue import contenders_seen
from labkit.progress import shows_progress
from labkit.record.fencing import FencedStore, StoreWrite
from labkit.timing import wait_until
from labkit.vocabulary import FAULT_BAND_COLOURS, MARK_COLOUR, REJECTED_COLOUR, STATE_COLOURS, SUCCESSOR_COLOUR

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

SUCCESSOR = "successor-1"
LATE_VALUE = "late write of the old holder"
SUCCESSOR_VALUE = "written by the successor"


@dataclass(frozen=True)
class DelayedWrite:
    """One run. Times are in ms after the holder sent its late write (the send is 0).
    Client times are this process's monotonic clock; ``successor_wrote_ms`` and
    ``late_arrived_ms`` are Redis's own clock (the store's write log), on the same machine."""

    fenced: bool
    session_timeout_s: float
    delay_ms: float
    old_token: int
    new_token: int
    time_left_at_send_ms: float     # lock.time_left() read just before the send
    holder_acquired_ms: float       # negative: before the send
    holder_deadline_ms: float       # lock.give_up_at(), once the cut froze it
    holder_gave_up_ms: float        # lock.is_held first read False
    successor_acquired_ms: float
    successor_wrote_ms: float       # Redis ran the successor's write
    late_arrived_ms: float          # Redis ran the delayed write (applied or refused)
    late_replied_ms: float          # the holder got the answer
    late_accepted: bool
    final_value: str | None
    writes: tuple[StoreWrite, ...]

    @property
    def sent_before_deadline(self) -> bool:
        """The holder sent strictly before its client-side deadline."""
        return 0 < self.holder_deadline_ms

    @property
    def gave_up_first(self) -> bool:
        """The holder's deadline worked: it gave up before the successor acquired."""
        return self.holder_gave_up_ms < self.successor_acquired_ms

    @property
    def arrived_after_successor(self) -> bool:
        """The delayed write reached the store after the successor's write."""
        return self.late_arrived_ms > self.successor_wrote_ms

    @property
    def corrupted(self) -> bool:
        """The store ends with the old holder's value, written over the successor's."""
        return self.final_value == LATE_VALUE

    def row(self) -> dict[str, Any]:
        return {"store": "fenced" if self.fenced else "unfenced",
                "tokens (old, new)": f"{self.old_token:#x}, {self.new_token:#x}",
                "time left at send (ms)": round(self.time_left_at_send_ms), "sent (ms)": 0,
                "holder deadline (ms)": round(self.holder_deadline_ms),
                "successor acquired (ms)": round(self.successor_acquired_ms),
                "successor wrote (ms)": round(self.successor_wrote_ms),
                "late write arrived (ms)": round(self.late_arrived_ms),
                "late write": "applied" if self.late_accepted else "refused",
                "final value": self.final_value}


def delayed_write(lab: Lab, fenced: bool, session_timeout: float = 2.0, delay: float | None = None,
                  name: str | None = None) -> DelayedWrite:
    """One run of the schedule in the module docstring. ``delay``: seconds the holder's
    write to Redis is held (default: the session timeout + 2 s, past the server's expiry
    of the session and the successor's write). Ends with ``lab.heal()``: every link of the
    lab is restored, whoever broke it."""
    if lab.network is None or lab.zookeeper is None or lab.redis is None:
        raise ValueError("delayed_write needs ZooKeeper, Redis and network=True, "
                         "e.g. labkit.up(zookeeper=1, etcd=0, redis=True, network=True)")
    delay = session_timeout + 2.0 if delay is None else delay
    if delay <= session_timeout:
        raise ValueError(f"delay={delay} s must be longer than the session timeout ({session_timeout} s): "
                         "the write must still be on its way when the session expires")
    return _Run(lab, fenced, session_timeout, delay, name or f"delayed-{uuid.uuid4().hex[:8]}").run()


@shows_progress("late writes through a slowed link")
def delayed_write_runs(lab: Lab, runs: int, session_timeout: float = 2.0,
                       delay: float | None = None) -> dict[bool, list[DelayedWrite]]:
    """``runs`` runs with an unfenced store, then ``runs`` with a fenced one:
    {False: unfenced runs, True: fenced runs}."""
    return {fenced: [delayed_write(lab, fenced, session_timeout, delay) for _ in range(runs)]
            for fenced in (False, True)}


class _Run:
    def __init__(self, lab: Lab, fenced: bool, session_timeout: float, delay: float, name: str):
        self.lab, self.fenced, self.session_timeout, self.delay = lab, fenced, session_timeout, delay
        self.path, self.store_name = f"/locks/{name}", f"store:{name}"
        self.zookeeper_node = lab.zookeeper.nodes[0]
        self.redis_node = lab.redis.primary
        self.wall_minus_monotonic = time.time() - time.monotonic()

    def run(self) -> DelayedWrite:
        lab, fenced = self.lab, self.fenced
        holder_zk = lab.zookeeper.client(timeout=self.session_timeout, via=HOLDER, nodes=[self.zookeeper_node])
        successor_zk = lab.zookeeper.client(timeout=max(self.session_timeout, 4.0), via=SUCCESSOR)
        # the late answer comes after the delay: wait well past it, never time out
        holder_redis = lab.redis.client(via=HOLDER, socket_timeout=self.delay + 10)
        successor_redis = lab.redis.client(via=SUCCESSOR)
        holder_store = FencedStore(holder_redis, self.store_name, fenced=fenced)
        successor_store = FencedStore(successor_redis, self.store_name, fenced=fenced)
        holder_store.reset()
        holder = ZooKeeperLock(holder_zk, self.path, identifier="holder")
        successor = ZooKeeperLock(successor_zk, self.path, identifier="successor")
        got: dict[str, Any] = {}
        try:
            old_token = holder.acquire(timeout=15)
            got["holder acquired"] = time.monotonic()
            # loads the store's script into Redis and opens the connection: the late write is one request
            holder_store.write("holder", old_token, "first write of the holder")
            waiting = threading.Thread(target=self._successor, args=(successor, successor_store, got), daemon=True)
            waiting.start()
            wait_until(lambda: contenders_seen(successor_zk, self.path) == 2, "the successor queues")
            lab.delay(self.delay * 1000, links=[f"{HOLDER}->{self.redis_node.name}"])
            sending = threading.Thread(target=self._late_write, args=(holder, holder_store, old_token, got),
                                       daemon=True)
            sending.start()
            wait_until(lambda: "sent" in got or "error" in got, "the holder sends its write", timeout=5, poll=0.001)
            if "error" in got:
                raise got["error"]
            # the write is held past the delay until the successor wrote: the schedule, forced
            link = f"{HOLDER}->{self.redis_node.name}"
            lab.cut(HOLDER, self.redis_node.name, both_ways=False)
            stall = next(fault["id"] for fault in reversed(lab.network.open_faults())
                         if fault["what"] == "cut" and fault["target"] == link)
            lab.cut(HOLDER, self.zookeeper_node.name)   # both ways: the session expires on the server
            wait_until(lambda: not holder.is_held, "the holder gives up by its deadline",
                       timeout=2 * self.session_timeout, poll=POLL)
            got["holder gave up"] = time.monotonic()
            deadline = holder.give_up_at()   # frozen: no answer has come through the cut since
            waiting.join(timeout=30 + 3 * self.session_timeout)
            lab.network.end(stall)   # the delay still holds it until `delay` after the send
            sending.join(timeout=self.delay + 15)
            if "error" in got:
                raise got["error"]
            if "successor wrote" not in got:
                raise TimeoutError(f"the successor did not get the lock and write within "
                                   f"{30 + 3 * self.session_timeout:.0f} s of the holder's cut")
            if "late replied" not in got:
                raise TimeoutError(f"the delayed write got no answer within {self.delay + 15:.0f} s")
        finally:
            lab.heal()
            if successor.is_held:
                try:
                    successor.release()
                except LockError:   # a dropped connection on a loaded machine: stop() below ends the session
                    pass
            for client in (holder_zk, successor_zk):
                client.stop()
                client.close()
        writes = tuple(successor_store.writes())
        final_value = successor_store.value()
        successor_store.reset()
        for client in (holder_redis, successor_redis):
            client.close()
        late = next(write for write in writes if write.value == LATE_VALUE)
        theirs = next(write for write in writes if write.value == SUCCESSOR_VALUE)
        sent = got["sent"]

        def ms(moment: float) -> float:
            return 1000 * (moment - sent)

        def store_ms(write: StoreWrite) -> float:
            return ms(write.time - self.wall_minus_monotonic)

        return DelayedWrite(fenced, self.session_timeout, self.delay * 1000, old_token, got["new token"],
                            1000 * got["time left"], ms(got["holder acquired"]), ms(deadline),
                            ms(got["holder gave up"]), ms(got["successor acquired"]), store_ms(theirs),
                            store_ms(late), ms(got["late replied"]), got["late accepted"], final_value, writes)

    def _late_write(self, holder: ZooKeeperLock, store: FencedStore, token: int, got: dict) -> None:
        """The careful holder: check, then write with its token."""
        try:
            held, time_left = holder.is_held, holder.time_left()
            if not held or time_left <= 0:
                raise RuntimeError(f"the holder's check failed before the send (is_held={held}, "
                                   f"time_left={time_left:.3f} s): it must hold to show the late write")
            got["time left"] = time_left
            got["sent"] = time.monotonic()
            got["late accepted"] = store.write("holder", token, LATE_VALUE)
            got["late replied"] = time.monotonic()
        except BaseException as error:  # handed to the main thread
            got["error"] = error

    @staticmethod
    def _successor(lock: ZooKeeperLock, store: FencedStore, got: dict) -> None:
        try:
            got["new token"] = lock.acquire(timeout=60)
            got["successor acquired"] = time.monotonic()
            store.write("successor", got["new token"], SUCCESSOR_VALUE)
            got["successor wrote"] = time.monotonic()
        except BaseException as error:  # handed to the main thread
            got.setdefault("error", error)


def plot_delayed_writes(outcomes: list[DelayedWrite], axes: Any = None) -> Any:
    """One timeline per outcome (ms after the send): the holder's hold by its own clock, its
    write in flight, the successor's hold and the writes the store ran."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(len(outcomes), 1, figsize=(11, 2.3 * len(outcomes)), layout="constrained",
                               sharex=True, squeeze=False)
        axes = axes[:, 0]
    for ax, outcome in zip(axes, outcomes):
        end = max(outcome.late_replied_ms, outcome.late_arrived_ms) + 300
        rows = {"holder": 2, "holder's write": 1, "successor": 0}
        ax.broken_barh([(outcome.holder_acquired_ms, outcome.holder_gave_up_ms - outcome.holder_acquired_ms)],
                       (rows["holder"] - 0.3, 0.6), color=STATE_COLOURS["holding"], label="holds (by its own deadline)")
        ax.broken_barh([(0, outcome.late_arrived_ms)], (rows["holder's write"] - 0.3, 0.6), color=FAULT_BAND_COLOURS["delay"],
                       label=f"write in flight (held ≥ {outcome.delay_ms / 1000:g} s on holder→Redis)")
        ax.broken_barh([(outcome.successor_acquired_ms, end - outcome.successor_acquired_ms)],
                       (rows["successor"] - 0.3, 0.6), color=SUCCESSOR_COLOUR, label="successor holds")
        ax.axvline(outcome.holder_deadline_ms, color=STATE_COLOURS["holding"], linestyle="--", linewidth=1)
        ax.plot([0], [rows["holder's write"]], marker="|", markersize=18, color=MARK_COLOUR)
        ax.plot([outcome.successor_wrote_ms], [rows["successor"]], marker="o", color=MARK_COLOUR, linestyle="",
                label="the store applied a write")
        if outcome.late_accepted:
            ax.plot([outcome.late_arrived_ms], [rows["holder's write"]], marker="o", color=MARK_COLOUR, linestyle="")
        else:
            ax.plot([outcome.late_arrived_ms], [rows["holder's write"]], marker="x", color=REJECTED_COLOUR, markersize=10,
                    linestyle="", label="the store refused it")
        ax.set_yticks(list(rows.values()), list(rows.keys()))
        ax.set_ylim(-0.7, 2.7)
        verdict = ("applied after the successor's: the old holder's value wins" if outcome.late_accepted
                   else "refused: stale token")
        ax.set_title(f"{'fenced' if outcome.fenced else 'unfenced'} store: the late write was {verdict}",
                     fontsize=10)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    axes[-1].set_xlabel("ms after the holder sent its write (dashed: the holder's deadline)")
    return axes
