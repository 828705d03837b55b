"""A holder that is told it holds must really hold: the client-side deadline, tried in every
topology where it could fail.

``holder_race(lab, recipe, topology)`` runs one race on a real 3-node ensemble started with
``network=True``. A holder takes the lock through its own links (``holder-1``), a waiter
queues through others (``waiter-1``), then the network is broken so that the holder loses
the quorum while the waiter keeps it. The holder's ``is_held`` is read every 2 ms; the
outcome says when it first read False and when the waiter's ``acquire`` returned, in ms
after the fault. Safe means: the holder gave up strictly before the waiter acquired.

The topologies (``TOPOLOGIES``, and ``ZOOKEEPER_ONLY``'s one):

- ``client-link``: the holder's own link to its server is cut (the server is fine).
- ``follower-cut``: the holder's server is a follower, cut from the leader and the third
  member; the holder's link to it stays up. A ZooKeeper follower keeps answering pings
  until it has missed the leader for syncLimit x tickTime, while the leader, which alone
  expires sessions, hears nothing of them: the answers are no proof that the session lives.
  An etcd member forwards keep-alives to its leader, so there they fail at once.
- ``old-leader``: the holder's server is the leader, isolated with the holder; the other two
  elect a new leader.
- ``follower-paused`` (ZooKeeper): the holder's server, a follower, is frozen (SIGSTOP) for
  P = T / 2, longer than syncLimit x tickTime (so the leader drops it) and than the deadline's
  margin, shorter than the 2/3 T after which kazoo gives up on a silent connection; then
  SIGCONT. A tick into the pause its links to the other members are cut, which holds back
  the leader's close: on resume the follower answers what was queued in its socket (kazoo's
  ping sent at about T / 3, the holder's heartbeat) before it notices, syncLimit x tickTime
  later, that it lost its leader and drops its clients (the order forced, see ``pause``); once the holder's connection has dropped, its link is cut so that it cannot come
  back before the leader expires its session (that is not the fault: a session that
  survives would be a lock legitimately still held, and no race). T is 20 s by default.

``naive=True`` (ZooKeeper only) is the negative control, the rule that fails there: in
``follower-paused``, today's rule with its one hole (every answer counts, a read heartbeat,
the ensemble's lag subtracted: proof "any answer"); elsewhere the holder trusts every answer
of its own server with ``server_lag=0`` too, the rule that is unsafe in ``follower-cut``.

What can fail: ``TimeoutError`` if the waiter never acquires or the ensemble does not settle
again after the heal (the message says which); ``ValueError`` for an unknown recipe or
topology, or a lab without 3 members of that service and ``network=True``.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import etcd3
from kazoo.client import KazooState

from labkit.harness.cut_off import seats
from labkit.lessons.client_deadlines import DEADLINE_RECIPES
from labkit.locks.errors import LockError
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.registry import recipe_named
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.locks.zookeeper_queue import contenders_seen
from labkit.progress import repeat, waiting_for
from labkit.servers import up
from labkit.servers.services.zookeeper_conf import ask_conf
from labkit.lessons.race_plots import plot_races  # noqa: F401  (lessons 07 and 10 import it from here)
from labkit.timing import became_true, wait_until

TOPOLOGIES = {
    "client-link": "the holder's link to its server is cut",
    "follower-cut": "the holder's server (a follower) is cut from the leader; the holder's link stays up",
    "old-leader": "the holder's server is the leader, isolated with the holder",
}
# A ZooKeeper follower's own way to fail, kept apart so that TOPOLOGIES stays what every recipe
# runs (lesson 07 loops over it for etcd too): ALL_TOPOLOGIES is what holder_race and
# `labkit races` accept.
ZOOKEEPER_ONLY = {
    "follower-paused": "the holder's server (a follower) is frozen for half the session timeout, then resumed",
}
ALL_TOPOLOGIES = {**TOPOLOGIES, **ZOOKEEPER_ONLY}
# The session timeout a topology runs with unless told: a paused follower's race needs one long
# enough that the pause (T / 2) exceeds the margin and the ensemble's lag, and that kazoo's ping
# (T / 3) falls inside the pause; with 2 s the other races take 8 s a run.
TIMEOUTS = {"follower-paused": 20.0}
DEFAULT_TIMEOUT = 2.0
NEGATIVE_CONTROLS = ("trusts its server", "counts any answer")   # the rules a batch must find unsafe
HOLDER, WAITER = "holder-1", "waiter-1"
POLL = 0.002


@dataclass(frozen=True)
class RaceRun:
    """One race. Times in ms after the fault; ``gave_up_ms`` is None if the holder still
    believed it held two timeouts after the waiter's grant."""

    recipe: str
    topology: str
    rule: str                   # "server_lag subtracted" / "trusts its server" / "keep-alive reply"
    timeout_s: float            # the holder's session timeout or lease TTL
    gave_up_ms: float | None    # the holder's is_held first read False
    acquired_ms: float          # the waiter's acquire returned

    @property
    def safe(self) -> bool:
        return self.gave_up_ms is not None and self.gave_up_ms < self.acquired_ms

    @property
    def margin_ms(self) -> float | None:
        """How long before the waiter's grant the holder gave up (negative: after it)."""
        return None if self.gave_up_ms is None else self.acquired_ms - self.gave_up_ms

    def row(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "topology": self.topology, "rule": self.rule,
                "timeout (s)": self.timeout_s,
                "holder gave up (ms)": "never" if self.gave_up_ms is None else round(self.gave_up_ms),
                "waiter acquired (ms)": round(self.acquired_ms),
                "margin (ms)": "-" if self.margin_ms is None else round(self.margin_ms),
                "safe": self.safe}


def holder_race(lab, recipe: str = "zookeeper", topology: str = "follower-cut", timeout: float | None = None,
                naive: bool = False) -> RaceRun:
    """One race (see the module docstring). ``timeout``: the holder's session timeout
    (ZooKeeper, seconds) or lease TTL (etcd, whole seconds); None: ``TIMEOUTS`` or 2 s."""
    recipe_named(recipe, among=DEADLINE_RECIPES)
    if topology not in ALL_TOPOLOGIES:
        raise ValueError(f"topology={topology!r} is not one of {tuple(ALL_TOPOLOGIES)}")
    if topology in ZOOKEEPER_ONLY and recipe != "zookeeper":
        raise ValueError(f"topology={topology!r} is a ZooKeeper race (a follower's own answers); etcd forwards "
                         "keep-alives to its leader")
    timeout = TIMEOUTS.get(topology, DEFAULT_TIMEOUT) if timeout is None else timeout
    if naive and recipe != "zookeeper":
        raise ValueError("naive=True is the ZooKeeper negative control (every answer counts); etcd has no such rule")
    service = lab.zookeeper if recipe == "zookeeper" else lab.etcd
    if service is None or len(service.nodes) != 3 or lab.network is None:
        raise ValueError(f"holder_race needs a lab with 3 {recipe} members and network=True, "
                         f"e.g. labkit.up({recipe}=3, network=True)")
    race = _ZooKeeperRace if recipe == "zookeeper" else _EtcdRace
    return race(lab, topology, timeout, naive).run()


def race_many(lab, recipe: str, topology: str, runs: int, timeout: float | None = None, naive: bool = False,
              progress=None) -> list[RaceRun]:
    """``runs`` races in a row, each shown as a step (labkit.progress); ``progress(i, run)``
    after each (e.g. print)."""
    return repeat(f"{recipe} race", runs, lambda: holder_race(lab, recipe, topology, timeout, naive),
                  topology + (" · naive rule" if naive else ""), progress)


def summary(runs: list[RaceRun]) -> dict[str, Any]:
    """Counts and margins of a batch of runs of one kind."""
    margins = [run.margin_ms for run in runs if run.margin_ms is not None]
    first = runs[0]
    return {"recipe": first.recipe, "topology": first.topology, "rule": first.rule, "runs": len(runs),
            "safe": sum(run.safe for run in runs),
            "margin min (ms)": round(min(margins)) if margins else "-",
            "margin max (ms)": round(max(margins)) if margins else "-"}


class _Race:
    """The shared shape: set up, queue the waiter, break the network, watch, heal, settle."""

    rule = ""

    def __init__(self, lab, topology: str, timeout: float, naive: bool):
        self.lab, self.topology, self.timeout, self.naive = lab, topology, timeout, naive
        self.name = f"race-{uuid.uuid4().hex[:8]}"

    def run(self) -> RaceRun:
        holder_node, others = seats(self.service(), self.topology)
        self.open(holder_node, others)
        acquired: list[float] = []
        failed: list[BaseException] = []
        try:
            self.holder_acquire()
            waiting = threading.Thread(target=self._waiter, args=(acquired, failed), daemon=True)
            waiting.start()
            self.wait_queued()
            gave_up: list[float] = []   # when the holder's is_held first read False

            def holder_gave_up() -> bool:
                if not gave_up and not self.holder_is_held():
                    gave_up.append(time.monotonic())
                return bool(gave_up)

            fault_at = time.monotonic()
            if self.topology == "client-link":
                self.lab.isolate(HOLDER)
            elif self.topology == "follower-paused":
                self.pause(holder_node, holder_gave_up)
            else:
                self.lab.partition([holder_node.name, HOLDER], [node.name for node in others] + [WAITER])

            def waiter_done() -> bool:
                holder_gave_up()          # the holder's is_held is read at every poll, while the waiter tries
                return bool(acquired or failed)

            patience = 30 + 6 * self.timeout
            with waiting_for("the holder's session to expire", self.timeout):
                wait_until(waiter_done, f"{self.topology}: the waiter to get the lock", patience, POLL,
                           error=TimeoutError(f"{self.topology}: the waiter did not get the lock within "
                                              f"{patience:.0f} s of the fault"))
            if failed:
                raise failed[0]
            # Unsafe if it still believes it holds: go on reading, to say how late it gave up.
            became_true(holder_gave_up, max(0.0, acquired[0] + 2 * self.timeout - time.monotonic()), POLL)
        finally:
            if self.topology == "follower-paused":
                holder_node.resume()              # a no-op if it was resumed already
            self.lab.heal()
            self.close()
        self.settle()
        return RaceRun(self.recipe, self.topology, self.rule, float(self.timeout),
                       1000 * (gave_up[0] - fault_at) if gave_up else None, 1000 * (acquired[0] - fault_at))

    def _waiter(self, acquired: list[float], failed: list[BaseException]) -> None:
        try:
            self.waiter_acquire()
            acquired.append(time.monotonic())
        except BaseException as error:  # handed to the main thread
            failed.append(error)

    def settle(self) -> None:
        """After the heal: one leader, every member serving again, before the next race."""
        service = self.service()
        wait_until(lambda: service.is_ready(), f"the {self.recipe} ensemble settles after the heal", timeout=60,
                   poll=0.05)


class _ZooKeeperRace(_Race):
    recipe = "zookeeper"

    def service(self):
        return self.lab.zookeeper

    @property
    def rule(self) -> str:
        if not self.naive:
            return "server_lag subtracted"
        return "counts any answer" if self.topology == "follower-paused" else "trusts its server"

    def open(self, holder_node, others) -> None:
        zookeeper = self.service()
        # The holder may reconnect only to its own server: in the partition it has no other.
        self.holder_client = zookeeper.client(timeout=self.timeout, via=HOLDER, nodes=[holder_node])
        self.waiter_client = zookeeper.client(timeout=max(self.timeout, 6.0), via=WAITER, nodes=others)
        path = f"/{self.name}"
        paused = self.topology == "follower-paused"
        self.holder = ZooKeeperLock(self.holder_client, path, "holder", server_lag=0 if self.naive and not paused else None)
        if self.naive:                            # the rule before the fix: every answer, reads and pings too
            self.holder.client_deadline.proof = "any answer"
        self.waiter = ZooKeeperLock(self.waiter_client, path, "waiter")
        self.path = path

    def pause(self, holder_node, holder_gave_up) -> None:
        """Freeze the holder's follower for T / 2 and let it go; once the holder's connection
        has dropped (the follower lost its leader), cut the holder's link.

        The order on resume is forced, not left to the follower's threads: a tick into the
        pause (the leader's pings of that tick are in the follower's socket by then), its
        links to the other members are cut, well before the leader drops it (syncLimit x
        tickTime after its last ack). The cut holds back the leader's close as well, so on
        resume the follower reads those pings, waits syncLimit x tickTime for more, and
        meanwhile answers what its clients queued during the freeze; only then does it give
        up on its leader and drop them. Let through, the close could be read first and the
        queued requests never answered: then no rule is put to the test."""
        if not self.holder.server_lag < self.timeout / 2:
            raise ValueError(f"follower-paused pauses the follower for T / 2 = {self.timeout / 2:g} s, which must exceed "
                             f"the ensemble's lag ({self.holder.server_lag:g} s) so that the leader drops it: "
                             "pass a longer timeout (20 s by default)")
        settings = ask_conf(holder_node.host, holder_node.port)
        tick = int(settings["tickTime"]) / 1000.0
        drops_after = int(settings["syncLimit"]) * tick
        others = [node.name for node in self.service().nodes if node.name != holder_node.name]
        paused_at = time.monotonic()
        holder_node.pause()
        try:
            became_true(lambda: holder_gave_up() and False, tick, POLL)         # is_held read meanwhile
            self.lab.partition([holder_node.name], others)
            late = time.monotonic() - paused_at
            if late >= drops_after - tick / 2:
                raise RuntimeError(
                    f"follower-paused: the cut of the paused follower from the other members took effect "
                    f"{late:.2f} s into the pause, too close to when the leader drops it ({drops_after:.2f} s): "
                    "the order on resume would not be forced. Is the machine overloaded? Run the race again")
            became_true(lambda: holder_gave_up() and False, self.timeout / 2 - late, POLL)
        finally:
            holder_node.resume()

        def dropped() -> bool:
            holder_gave_up()
            return self.holder_client.state != KazooState.CONNECTED

        wait_until(dropped, "the holder's connection to drop after the pause", self.timeout, POLL)
        self.lab.isolate(HOLDER)

    def holder_acquire(self) -> None:
        self.holder.acquire(timeout=15)

    def waiter_acquire(self) -> None:
        self.waiter.acquire(timeout=30 + 6 * self.timeout)

    def wait_queued(self) -> None:
        wait_until(lambda: contenders_seen(self.waiter_client, self.path) == 2, "the waiter queues")

    def holder_is_held(self) -> bool:
        return self.holder.is_held

    def close(self) -> None:
        try:
            self.waiter.release()
        except LockError:
            pass                        # a dropped connection (a loaded machine): stop() below ends the session
        finally:
            for client in (self.holder_client, self.waiter_client):
                client.stop()
                client.close()


class _EtcdRace(_Race):
    recipe = "etcd"
    rule = "keep-alive reply"

    def service(self):
        return self.lab.etcd

    def open(self, holder_node, others) -> None:
        etcd = self.service()
        self.clients = [etcd.client(node=holder_node, via=HOLDER, timeout=10),
                        etcd.client(node=others[0], via=WAITER, timeout=10)]
        self.sessions = [EtcdSession(self.clients[0], ttl=int(self.timeout)),
                         EtcdSession(self.clients[1], ttl=max(int(self.timeout), 6))]
        self.holder = EtcdMutex(self.sessions[0], self.name, "holder")
        self.waiter = EtcdMutex(self.sessions[1], self.name, "waiter")

    def holder_acquire(self) -> None:
        self.holder.acquire(timeout=15)

    def waiter_acquire(self) -> None:
        # While the majority elects a new leader, its members answer "leader changed": a real
        # client asks again (the lock's key is named by the lease, so asking again is safe).
        patience = 30 + 6 * self.timeout
        deadline, last_error = time.monotonic() + patience, []

        def acquired() -> bool:
            try:
                self.waiter.acquire(timeout=max(deadline - time.monotonic(), 0.1))
                return True
            except (etcd3.exceptions.ConnectionFailedError, etcd3.exceptions.ConnectionTimeoutError) as error:
                last_error[:] = [error]
                return False

        wait_until(acquired, "the waiter's acquire", patience, 0.05, error=lambda: last_error[0])

    def wait_queued(self) -> None:
        prefix = self.holder.prefix
        wait_until(lambda: len(list(self.clients[1].get_prefix(prefix, keys_only=True))) == 2, "the waiter queues")

    def holder_is_held(self) -> bool:
        return self.holder.is_held

    def close(self) -> None:
        try:
            if self.waiter.is_held:
                self.waiter.release()
        finally:
            for session in self.sessions:
                session.close()
            for client in self.clients:
                client.close()


def batches(recipes=DEADLINE_RECIPES, topologies=tuple(ALL_TOPOLOGIES), runs: int = 10, naive_runs: int = 10,
            timeout: float | None = None, print_=print) -> list[dict[str, Any]]:
    """``labkit races``: ``runs`` races of each recipe in each topology on a lab of its own
    (3 members, network=True), plus ``naive_runs`` of the ZooKeeper negative controls in
    ``follower-cut`` and ``follower-paused``; prints each run and returns one summary row per
    batch. etcd skips the ZooKeeper-only topologies."""
    rows = []
    for recipe in recipes:
        members = {"zookeeper": 3 if recipe == "zookeeper" else 0, "etcd": 3 if recipe == "etcd" else 0}
        with up(redis=False, network=True, quiet=True, **members) as lab:
            plans = [(topology, False, runs) for topology in topologies
                     if recipe == "zookeeper" or topology not in ZOOKEEPER_ONLY]
            if recipe == "zookeeper" and naive_runs:
                plans += [(topology, True, naive_runs) for topology in ("follower-cut", "follower-paused")
                          if topology in topologies]
            for topology, naive, count in plans:
                done = race_many(lab, recipe, topology, count, timeout, naive,
                                 progress=lambda number, run: print_(f"  {number + 1:2d} {run.row()}"))
                rows.append(summary(done))
                print_(rows[-1])
    return rows
