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

The double grants are made to happen, not hoped for: each arranges the one situation the
algorithm cannot tell from a healthy one (a majority of keys expired early by a clock
step; a vote forgotten by a restart; a holder frozen past its validity), then a second
client acquires while the first still believes it holds the lock. The evidence is the
servers' own state (who has the key on each instance) and an unfenced store's write log.
"""
from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import redis
from matplotlib.axes import Axes

from labkit.clients import spawn_clients
from labkit.errors import ClockUnavailable
from labkit.locks.redis_lock import RedisLock
from labkit.locks.redlock import Redlock, instance_clients
from labkit.plots import hold_timeline
from labkit.record.checker import Verdict, check_mutual_exclusion
from labkit.record.fencing import FencedStore, StoreWrite
from labkit.record.history import History
from labkit.vocabulary import FAULT_COLOUR


def holders_on(redlock: Any, name: str) -> list[str]:
    """Whose value each instance (r1 first) has for the lock ``name`` right now, read straight
    from the servers: a client's identifier, or "-" for no key. A stopped instance reads "down"."""
    holders = []
    for client in instance_clients(redlock.endpoints):
        try:
            raw = client.get(name)
            holders.append(raw.decode().split(":")[0] if raw else "-")
        except (redis.RedisError, OSError):  # refused or timed out
            holders.append("down")
        finally:
            client.close()
    return holders


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
        return statistics.median(self.redlock_ms)

    @property
    def set_nx_p50(self) -> float:
        return statistics.median(self.set_nx_ms)

    @property
    def ratio(self) -> float:
        return self.redlock_p50 / self.set_nx_p50

    def in_seconds(self, instances: int = 5) -> dict[str, list[float]]:
        """The samples as ``labkit.plots.latency_plot`` takes them (seconds, by label)."""
        return {f"Redlock on {instances}": [ms / 1000 for ms in self.redlock_ms],
                "one SET NX": [ms / 1000 for ms in self.set_nx_ms]}


def compare_with_set_nx(lab: Any, rounds: int = 200, ttl_ms: int = 5000) -> LatencyComparison:
    """Acquire and release a Redlock on ``lab.redlock`` and a single-instance SET NX lock on
    ``lab.redis`` in turns, ``rounds`` times each (turns, so that a busy moment of the machine
    hits both). What can fail: ``LockTimeout`` if an instance is down or holds the name."""
    name = f"lock:price-{uuid.uuid4().hex[:8]}"
    redlock_servers = instance_clients(lab.redlock.endpoints)
    single_server = instance_clients([lab.redis.nodes[0].endpoint])
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


def survive_one_crash(lab: Any, crashed: str = "r5", contenders: int = 3, rounds: int = 3) -> CrashRun:
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
    inside, most_inside, guard = [0], [0], threading.Lock()
    errors: list[BaseException] = []

    def contender(identifier: str) -> None:
        lock = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=10_000, identifier=identifier,
                               on_event=history.sink(identifier), retry_delay_ms=5)
        try:
            for round_number in range(rounds):
                lock.acquire(timeout=30)
                with guard:
                    inside[0] += 1
                    most_inside[0] = max(most_inside[0], inside[0])
                    votes.append(list(lock.acquired_on))
                store.write(identifier, None, f"{identifier} begin {round_number}")
                store.write(identifier, None, f"{identifier} end {round_number}")
                with guard:
                    inside[0] -= 1
                lock.release()
        except BaseException as error:  # noqa: BLE001  (raised again in the caller's thread)
            errors.append(error)
        finally:
            lock.close()

    threads = [threading.Thread(target=contender, args=(f"client-{n + 1}",)) for n in range(contenders)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        node.start()
        node.wait_ready()
        history.record_fault("start", crashed)
    if errors:
        raise errors[0]
    endpoint = {n.name: n.endpoint for n in lab.redlock.nodes}
    named_votes = [[n for n, e in endpoint.items() if e in vote] for vote in votes]
    verdict = check_mutual_exclusion(store.writes(), history)
    store.reset()
    store.client.close()
    return CrashRun(crashed, named_votes, verdict, most_inside[0])


# ---- three double grants -------------------------------------------------------------------------
@dataclass
class DoubleGrant:
    """Two clients each holding the lock by their own reckoning. ``first_validity_left`` is
    how long (s) the first holder's validity still had to run when the second acquired:
    positive means it still believed, by its own correct clock. ``holders`` is each
    instance's key (r1 first) right after the second acquire; ``periods`` are the fault
    periods (start, end, label) in ``time.time()`` seconds, for the timeline."""

    fault: str
    history: History
    first_instances: list[str]
    second_instances: list[str]
    first_validity_left: float
    holders: list[str]
    writes: list[StoreWrite]
    periods: list[tuple[float, float, str]] = field(default_factory=list)
    validity_ends: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return check_mutual_exclusion(self.writes, self.history)


def _names(lab: Any, endpoints: list[str]) -> list[str]:
    return [node.name for node in lab.redlock.nodes if node.endpoint in endpoints]


def _valid_until_wall(lock: Redlock) -> float:
    """The end of a Redlock's validity (kept on the monotonic clock) as a time.time() value."""
    return time.time() + (lock.valid_until - time.monotonic())


def _both_write(lab: Any, name: str, first: Redlock, second: Redlock, steps: Callable[[], None],
                work: float) -> tuple[float, list[StoreWrite]]:
    """first writes "begin" and works for ``work`` seconds; ``steps()`` breaks the lock and lets
    second acquire; second writes; first, still valid by its own clock, writes "end" after
    ``work`` more seconds: the store's log shows both holds at once. Returns the validity the
    first had left when the second acquired, and the store's log."""
    store = FencedStore(lab.redis.client(), f"store:{name}", fenced=False)
    store.reset()
    store.write(first.identifier, None, "begin")
    time.sleep(work)
    steps()
    validity_left = first.valid_until - time.monotonic()
    store.write(second.identifier, None, "the second holder writes")
    time.sleep(work)
    if first.is_valid:  # the check a careful holder makes before writing: it passes
        store.write(first.identifier, None, "end")
    writes = store.writes()
    store.reset()
    store.client.close()
    return validity_left, writes


def clock_step_double_grant(lab: Any, ttl_ms: int = 10_000, stepped: tuple[str, ...] = ("r1", "r2", "r3"),
                            work: float = 0.3) -> DoubleGrant:
    """alice holds the lock on all five; the wall clocks of ``stepped`` (a majority) jump
    ahead by the TTL, so those servers expire her key at once; bob wins them. Clocks are
    reset afterwards. What can fail: ``ClockUnavailable`` on a lab without ``clocks=True``."""
    name = f"lock:clock-{uuid.uuid4().hex[:8]}"
    history = History()
    alice = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=ttl_ms, identifier="alice", on_event=history.sink("alice"))
    bob = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=ttl_ms, identifier="bob", on_event=history.sink("bob"))
    nodes = [lab.redlock.node(which) for which in stepped]
    periods: list[tuple[float, float, str]] = []
    try:
        alice.acquire(timeout=5)

        def step_and_acquire() -> None:
            stepped_at = time.time()
            for node in nodes:
                node.clock.step(ttl_ms / 1000)
            bob.acquire(timeout=5)
            periods.append((stepped_at, time.time(), f"{' '.join(stepped)} clocks +{ttl_ms / 1000:g} s"))

        validity_left, writes = _both_write(lab, name, alice, bob, step_and_acquire, work)
        holders = holders_on(lab.redlock, name)
        validity_ends = {"alice": _valid_until_wall(alice), "bob": _valid_until_wall(bob)}
        alice_on, bob_on = _names(lab, alice.acquired_on), _names(lab, bob.acquired_on)
        alice.release()  # a majority no longer has her value: "lost"
        bob.release()
    finally:
        for node in nodes:
            node.clock.reset()
        alice.close()
        bob.close()
    start, _, label = periods[0]
    periods[0] = (start, time.time(), label)  # the clocks were ahead until the reset
    return DoubleGrant("clock step", history, alice_on, bob_on, validity_left, holders, writes, periods, validity_ends)


def restart_double_grant(lab: Any, ttl_ms: int = 10_000, forgetful: str = "r3",
                         unreachable: tuple[str, ...] = ("r4", "r5"), work: float = 0.3) -> DoubleGrant:
    """``unreachable`` are down while alice acquires, so she wins a bare majority; they come
    back (empty), then ``forgetful``, one of alice's instances, crashes and restarts without
    having written anything to disk (appendonly off): her vote there is forgotten, and bob
    wins the forgetful one plus the two that were away. What can fail: ``LockTimeout``;
    ``NodeStartError`` if an instance does not come back."""
    name = f"lock:restart-{uuid.uuid4().hex[:8]}"
    history = History()
    alice = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=ttl_ms, identifier="alice", on_event=history.sink("alice"))
    bob = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=ttl_ms, identifier="bob", on_event=history.sink("bob"))
    away = [lab.redlock.node(which) for which in unreachable]
    periods: list[tuple[float, float, str]] = []
    try:
        went_away = time.time()
        for node in away:
            node.kill()
        alice.acquire(timeout=5)
        for node in away:
            node.start()
            node.wait_ready()
        periods.append((went_away, time.time(), f"{' '.join(unreachable)} down"))

        def crash_restart_and_acquire() -> None:
            crashed_at = time.time()
            lab.redlock.crash_restart(forgetful)
            periods.append((crashed_at, time.time(), f"{forgetful} crash, restart empty"))
            bob.acquire(timeout=5)

        validity_left, writes = _both_write(lab, name, alice, bob, crash_restart_and_acquire, work)
        holders = holders_on(lab.redlock, name)
        validity_ends = {"alice": _valid_until_wall(alice), "bob": _valid_until_wall(bob)}
        alice_on, bob_on = _names(lab, alice.acquired_on), _names(lab, bob.acquired_on)
        alice.release()
        bob.release()
    finally:
        for node in away:
            if node.state != "running":
                node.start()
                node.wait_ready()
        alice.close()
        bob.close()
    return DoubleGrant("restart without fsync", history, alice_on, bob_on, validity_left, holders, writes,
                       periods, validity_ends)


def pause_double_grant(lab: Any, ttl: float = 1.0, pause: float = 2.5) -> DoubleGrant:
    """A Redlock client process (client-1, TTL ``ttl`` s) acquires and writes to an unfenced
    store, then is frozen (SIGSTOP) for ``pause`` seconds, longer than its TTL; bob (in this
    process, a longer TTL) acquires once the keys expire, and writes; client-1 wakes and runs
    the write it was about to make. ``first_validity_left`` is negative: client-1's validity
    was over, but it was frozen and could not know. What can fail: ``ValueError`` if
    ``pause`` is not longer than ``ttl``; ClientError / ClientTimeout when the client
    process does not start or answer; ``LockTimeout`` if bob never gets the lock."""
    if pause <= ttl:
        raise ValueError(f"pause ({pause} s) must be longer than the TTL ({ttl} s), or nobody else can acquire")
    name = f"lock:pause-{uuid.uuid4().hex[:8]}"
    store = FencedStore(lab.redis.client(), f"store:{name}", fenced=False)
    store.reset()
    history = History()
    bob = Redlock.connect(lab.redlock.endpoints, name, ttl_ms=int(4 * pause * 1000), identifier="bob",
                          on_event=history.sink("bob"), retry_delay_ms=20)
    try:
        with spawn_clients(lab, "redlock", n=1, name=name, history=history, store=store, ttl=ttl) as clients:
            frozen = clients[0]
            frozen.acquire(timeout=10)
            frozen.write("written by the first holder")
            frozen.pause(pause)
            frozen_at = time.time()
            bob.acquire(timeout=pause + 10)
            store.write("bob", bob.token, "written by the new holder")
            # sent while client-1 is frozen: it runs the moment the process resumes
            frozen.wait_reply(frozen.send("write", value="late write by the old holder"), timeout=pause + 10)
            periods = [(frozen_at, time.time(), f"{frozen.name} frozen")]
            holders = holders_on(lab.redlock, name)
            frozen.release()  # its value is on no instance any more: "lost"
        validity_ends = {"bob": _valid_until_wall(bob)}
        bob.release()
    finally:
        bob.close()
    acquired = {event.client: event for event in history.events(kind="acquired")}
    first, second = acquired["client-1"], acquired["bob"]
    validity_ends["client-1"] = first.time + first.detail["validity_ms"] / 1000
    validity_left = validity_ends["client-1"] - second.time
    writes = store.writes()
    store.reset()
    store.client.close()
    return DoubleGrant("pause past validity", history, _names(lab, first.detail["instances"]),
                       _names(lab, second.detail["instances"]), validity_left, holders, writes, periods, validity_ends)


def offer_to_a_fenced_store(lab: Any, writes: list[StoreWrite], history: History) -> list[StoreWrite]:
    """Replay ``writes`` (client, token, value) into a fenced store, in the same order, with
    the tokens the Redlock holders had (the ``token`` of each "acquired" event: None)."""
    tokens = {event.client: event.detail.get("token") for event in history.events(kind="acquired")}
    store = FencedStore(lab.redis.client(), f"store:fenced-{uuid.uuid4().hex[:8]}", fenced=True)
    store.reset()
    for write in writes:
        store.write(write.client, tokens.get(write.client), write.value)
    replayed = store.writes()
    store.reset()
    store.client.close()
    return replayed


def plot_double_grant(run: DoubleGrant, ax: Axes | None = None, title: str = "") -> Axes:
    """The hold timeline of ``run`` with its fault periods shaded and each client's validity
    end marked (▼): a bar past its marker is a client acting on a lock it no longer has."""
    ax = hold_timeline(run.history, ax=ax, title=title or f"Redlock granted twice: {run.fault}")
    origin = run.history.events()[0].time
    for start, end, label in run.periods:
        ax.axvspan(start - origin, max(end - origin, start - origin + 0.005), color=FAULT_COLOUR, alpha=0.15)
        ax.annotate(label, (start - origin, 0.02), xycoords=("data", "axes fraction"), fontsize=8, color=FAULT_COLOUR)
    rows = {label.get_text(): row for row, label in enumerate(ax.get_yticklabels())}
    right = ax.get_xlim()[1]
    for client, until in run.validity_ends.items():
        if client not in rows:
            continue
        if until - origin <= right:
            ax.plot([until - origin], [rows[client] - 0.38], marker="v", color="black", linestyle="none")
        else:  # far beyond the run: say how far
            ax.annotate(f"valid {until - origin - right:.1f} s more \u2192", (right, rows[client] - 0.38),
                        ha="right", va="bottom", fontsize=8)
    return ax


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


def zookeeper_session_across_step(lab: Any, step: float = 30.0, session_timeout: float = 2.0,
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
        while time.monotonic() < until:
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


def etcd_lease_countdown(lab: Any, ttl: int = 5, watch: float = 2.5, every: float = 0.25) -> EtcdLease:
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
        while time.monotonic() - granted < watch:
            samples.append((time.monotonic() - granted, int(lease.remaining_ttl)))
            time.sleep(every)
        return EtcdLease(refusal, samples)
    finally:
        lease.revoke()
        client.close()
