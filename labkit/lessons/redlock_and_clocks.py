"""Notebook 08: Redlock on five independent Redis primaries, what it survives, and three
ways it grants one lock to two clients; then what a wall-clock step does to each system.

What can fail, first. Every experiment here kills, restarts, freezes or steps the clock of
real servers of the lab it is given, and puts them back before it returns; if it raises
half-way (``LockTimeout`` when a lock is not granted in time, ``TimeoutError`` when a
server does not come back, ``labkit.clients.ClientError`` when a client process does not
start), a server may be left stopped or with a shifted clock: ``lab.down()`` cleans up.
The lab must be ``labkit.up(zookeeper=1, etcd=1, redis=True, redlock=5, clocks=True)``:
the single Redis holds the protected store and the SET NX baseline, r1..r5 are Redlock's
instances, and ``clocks=True`` lets the ZooKeeper and Redis nodes' wall clocks be stepped
(etcd's cannot be: see docs/CLOCKS.md).

The double grants (``redlock_double_grants.py``) are made to happen, not hoped for: each
arranges the one situation the algorithm cannot tell from a healthy one (a majority of
keys expired early by a clock step; a vote forgotten by a restart; a holder frozen past
its validity), then a second client acquires while the first still believes it holds the
lock. The evidence is the servers' own state (who has the key on each instance) and an
unfenced store's write log.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labkit.errors import ClockUnavailable
from labkit.harness.stress import stress
from labkit.lessons.redlock_double_grants import (DoubleGrant, clock_step_double_grant, holders_on,
                                                  offer_to_a_fenced_store, pause_double_grant, plot_double_grant,
                                                  restart_double_grant)
from labkit.locks.redis_lock import RedisLock
from labkit.locks.redlock import Redlock, instance_clients
from labkit.progress import shows_progress
from labkit.record.checker import Verdict, check_mutual_exclusion
from labkit.record.events import EventSink
from labkit.record.fencing import FencedStore
from labkit.record.history import History
from labkit.stats import percentile

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

# The three double grants live in their own module (redlock_double_grants.py); notebook 08
# reaches every experiment of its lesson from here.
__all__ = ["DoubleGrant", "LatencyComparison", "CrashRun", "ZooKeeperStep", "EtcdLease", "holders_on",
           "compare_with_set_nx", "survive_one_crash", "clock_step_double_grant", "restart_double_grant",
           "pause_double_grant", "offer_to_a_fenced_store", "plot_double_grant", "zookeeper_session_across_step",
           "etcd_lease_countdown"]


def _set_calls(clients: list[Any]) -> int:
    return sum(int(client.info("commandstats").get("cmdstat_set", {}).get("calls", 0)) for client in clients)


# ---- the price: Redlock against one SET NX ---------------------------------------------------
@dataclass
class LatencyComparison:
    """Acquire times in ms of Redlock on N instances and of one SET NX, taken in turns in the
    same run, and the SET commands the servers counted per acquire."""

    redlock_ms: list[float]
    set_nx_ms: list[float]
    redlock_sets_per_acquire: float
    set_nx_sets_per_acquire: float

    @property
    def redlock_p50(self) -> float:
        return percentile(self.redlock_ms, 0.5)

    @property
    def set_nx_p50(self) -> float:
        return percentile(self.set_nx_ms, 0.5)

    @property
    def ratio(self) -> float:
        return self.redlock_p50 / self.set_nx_p50

    def in_seconds(self, instances: int = 5) -> dict[str, list[float]]:
        """The samples as ``labkit.record.plots.latency_plot`` takes them (seconds, by label)."""
        return {f"Redlock on {instances}": [ms / 1000 for ms in self.redlock_ms],
                "one SET NX": [ms / 1000 for ms in self.set_nx_ms]}


PRICE_REPLY_MS = 1000   # compare_with_set_nx: how long each client waits to connect and for a reply
PRICE_TTL_MS = 20_000   # a tenth of it covers both waits, as Redlock demands (each hold ends at once)


@shows_progress("Redlock and one SET NX, timed in turns")
def compare_with_set_nx(lab: Lab, rounds: int = 200, ttl_ms: int = PRICE_TTL_MS) -> LatencyComparison:
    """Acquire and release a Redlock on ``lab.redlock`` and a single-instance SET NX lock on
    ``lab.redis`` in turns, ``rounds`` times each (turns, so that a busy moment of the machine
    hits both). Both sides wait up to ``PRICE_REPLY_MS`` for a reply: the library's 50 ms is
    meant for a dead instance, and a busy classroom machine stalls a live one that long now and
    then (a timed-out release raised here at load 20); the price is the p50, which a longer
    wait does not move. What can fail: ``LockTimeout`` if an instance is down or holds the name."""
    name = f"lock:price-{uuid.uuid4().hex[:8]}"
    redlock_servers = instance_clients(lab.redlock.endpoints, PRICE_REPLY_MS)
    single_server = instance_clients([lab.redis.nodes[0].endpoint], PRICE_REPLY_MS)
    redlock = Redlock(redlock_servers, name, ttl_ms=ttl_ms)
    single = RedisLock(single_server[0], f"{name}-single", ttl_ms=ttl_ms)
    timings: dict[str, list[float]] = {"redlock": [], "set_nx": []}
    sets_before = {"redlock": _set_calls(redlock_servers), "set_nx": _set_calls(single_server)}
    try:
        for _ in range(rounds):
            for label, lock in (("redlock", redlock), ("set_nx", single)):
                began = time.perf_counter()
                lock.acquire(timeout=5)
                timings[label].append((time.perf_counter() - began) * 1000)
                lock.release()
        sets = {"redlock": _set_calls(redlock_servers) - sets_before["redlock"],
                "set_nx": _set_calls(single_server) - sets_before["set_nx"]}
    finally:
        redlock.close()
        single_server[0].close()
    return LatencyComparison(timings["redlock"], timings["set_nx"], sets["redlock"] / rounds, sets["set_nx"] / rounds)


# ---- what it survives: one crashed instance -----------------------------------------------------
@dataclass
class CrashRun:
    """Contenders on a Redlock while one instance was down: who voted, and the store's verdict."""

    crashed: str
    votes: list[list[str]]          # the instances that granted each acquire
    verdict: Verdict
    most_inside_at_once: int


def survive_one_crash(lab: Lab, crashed: str = "r5", contenders: int = 3, rounds: int = 3) -> CrashRun:
    """Kill one instance (SIGKILL), let ``contenders`` threads take the lock ``rounds`` times
    each and write begin/end to an unfenced store, then start the instance again.
    What can fail: ``LockTimeout`` if a majority cannot be reached (more than one instance
    down); the killed instance is restarted even then."""
    name = f"lock:crash-{uuid.uuid4().hex[:8]}"
    history = History()
    store = FencedStore(lab.redis.client(), f"store:{name}", fenced=False)
    node = lab.redlock.node(crashed)
    node.kill()
    history.record_fault("kill", crashed)
    votes: list[list[str]] = []

    def connect(identifier: str, sink: EventSink) -> Redlock:
        return Redlock.connect(lab.redlock.endpoints, name, ttl_ms=10_000, identifier=identifier, on_event=sink,
                               retry_delay_ms=5)

    try:
        run = stress(connect, [f"client-{n + 1}" for n in range(contenders)], store, rounds, history,
                     on_hold=lambda lock: votes.append(list(lock.acquired_on)))
    finally:
        node.start()
        node.wait_ready()
        history.record_fault("start", crashed)
    endpoint = {n.name: n.endpoint for n in lab.redlock.nodes}
    named_votes = [[n for n, e in endpoint.items() if e in vote] for vote in votes]
    verdict = check_mutual_exclusion(store.writes(), history)
    store.reset()
    store.client.close()
    return CrashRun(crashed, named_votes, verdict, run.most_inside)


# ---- clocks on all three systems -----------------------------------------------------------------
@dataclass
class ZooKeeperStep:
    """A session and its ephemeral node watched across a wall-clock step of the server."""

    step: float
    session_timeout: float
    watched: float                  # seconds watched after the step
    node_alive_throughout: bool
    same_session: bool
    new_node_ctime_ahead: float     # a znode created after the step: its ctime minus our clock (s)


@shows_progress("a ZooKeeper session across a clock step")
def zookeeper_session_across_step(lab: Lab, step: float = 30.0, session_timeout: float = 2.0,
                                  watch: float = 4.0) -> ZooKeeperStep:
    """Step the ZooKeeper server's wall clock by ``step`` seconds while a client holds an
    ephemeral node with a ``session_timeout`` session; check for ``watch`` seconds that the
    node and the session stay. The clock is reset afterwards. What can fail:
    ``ClockUnavailable`` without ``clocks=True``; kazoo's errors if the server is down."""
    server = lab.zookeeper.nodes[0]
    client = lab.zookeeper.client(timeout=session_timeout)
    path = f"/clock-step-{uuid.uuid4().hex[:8]}"
    try:
        client.create(path, b"", ephemeral=True)
        session = client.client_id
        server.clock.step(step)
        client.create(f"{path}-probe", b"", ephemeral=True)
        ctime_ahead = client.exists(f"{path}-probe").created - time.time()
        alive, until = True, time.monotonic() + watch
        while time.monotonic() < until:   # a sampler: the node must be there at every look
            alive = alive and client.exists(path) is not None
            time.sleep(0.1)
        return ZooKeeperStep(step, session_timeout, watch, alive, client.client_id == session, ctime_ahead)
    finally:
        server.clock.reset()
        client.stop()
        client.close()


@dataclass
class EtcdLease:
    """Why etcd's clock could not be stepped, and a lease's TTL read over time."""

    refusal: str
    samples: list[tuple[float, int]]   # (seconds since the grant, remaining TTL etcd reported)

    @property
    def counted_down(self) -> float:
        return self.samples[0][1] - self.samples[-1][1]

    @property
    def elapsed(self) -> float:
        return self.samples[-1][0] - self.samples[0][0]


@shows_progress("an etcd lease counting down across a clock step")
def etcd_lease_countdown(lab: Lab, ttl: int = 5, watch: float = 2.5, every: float = 0.25) -> EtcdLease:
    """Try to step etcd's clock (it refuses: Go reads the clock through the vDSO), then grant
    a lease of ``ttl`` seconds and read its remaining TTL every ``every`` seconds for
    ``watch`` seconds. The lease is revoked afterwards. What can fail: python-etcd3's
    connection errors if etcd does not answer."""
    try:
        lab.etcd.nodes[0].clock.step(30)
        refusal = ""
    except ClockUnavailable as error:
        refusal = str(error)
    client = lab.etcd.client()
    lease = client.lease(ttl)
    try:
        granted, samples = time.monotonic(), []
        while time.monotonic() - granted < watch:   # a sampler, not a wait: every reading is kept
            samples.append((time.monotonic() - granted, int(lease.remaining_ttl)))
            time.sleep(every)
        return EtcdLease(refusal, samples)
    finally:
        lease.revoke()
        client.close()
