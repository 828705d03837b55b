"""Notebook 08's three double grants: Redlock hands one lock to two clients, made to
happen on real servers: a clock step on a majority, a restart without fsync, a holder
frozen past its validity. Each arranges the one situation the algorithm cannot tell from
a healthy one, then a second client acquires while the first still believes it holds the
lock. The evidence is the servers' own state (who has the key on each instance) and an
unfenced store's write log.

What can fail, first: each kills, restarts, freezes or steps the clock of real servers of
the lab it is given and puts them back before it returns; if it raises half-way
(``LockTimeout``, ``TimeoutError``, ``labkit.clients.ClientError``), a server may be left
stopped or with a shifted clock: ``lab.down()`` cleans up. ``ClockUnavailable`` on a lab
without ``clocks=True``.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import redis
from matplotlib.axes import Axes

from labkit.harness.frozen_holder import frozen_holder
from labkit.locks.redlock import OBSERVE_TIMEOUT_MS, Redlock, instance_clients
from labkit.record.plots import hold_timeline
from labkit.progress import shows_progress
from labkit.record.checker import Verdict, check_mutual_exclusion
from labkit.record.fencing import FencedStore, StoreWrite
from labkit.record.history import History
from labkit.vocabulary import FAULT_COLOUR, MARK_COLOUR

if TYPE_CHECKING:
    from labkit.servers.lab import Lab
    from labkit.servers.services.redis import RedlockService


def holders_on(redlock: RedlockService, name: str, owners: dict[str, str] | None = None) -> list[str]:
    """Whose value each instance (r1 first) has for the key ``name`` right now, read straight
    from the servers: a client's identifier, or "-" for no key. A stopped instance reads "down".
    The reads wait up to ``OBSERVE_TIMEOUT_MS`` per instance, not the 50 ms a Redlock vote
    waits: on a loaded machine a slow reply is not a missing key.
    labkit's values start with the identifier; ``owners`` names the others (a library's
    random values: {value: identifier})."""
    holders = []
    owners = owners or {}
    for client in instance_clients(redlock.endpoints, timeout_ms=OBSERVE_TIMEOUT_MS):
        try:
            raw = client.get(name)
            holders.append("-" if not raw else owners.get(raw.decode(), raw.decode().split(":")[0]))
        except (redis.RedisError, OSError):  # refused or timed out
            holders.append("down")
        finally:
            client.close()
    return holders


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


def _names(lab: Lab, endpoints: list[str]) -> list[str]:
    return [node.name for node in lab.redlock.nodes if node.endpoint in endpoints]


def _valid_until_wall(lock: Any) -> float:
    """The end of a Redlock's validity (kept on the monotonic clock) as a time.time() value."""
    return time.time() + (lock.valid_until - time.monotonic())


# connect(endpoints, name, ttl_ms=, identifier=, on_event=) -> a Redlock: labkit's, or a library's
# with the same attributes (labkit.locks.redis_peers.PotteryRedlock)
Connect = Callable[..., Any]


def key_of(lock: Any) -> str:
    """The Redis key a Redlock client sets: its name, or a library's prefixed name."""
    return getattr(lock, "key", lock.name)


def _alice_and_bob(lab: Lab, fault: str, ttl_ms: int, connect: Connect) -> tuple[str, History, Any, Any]:
    """A new lock name, a History, and two Redlock clients on every instance recording into it."""
    name, history = f"lock:{fault}-{uuid.uuid4().hex[:8]}", History()
    alice, bob = (connect(lab.redlock.endpoints, name, ttl_ms=ttl_ms, identifier=who,
                          on_event=history.sink(who)) for who in ("alice", "bob"))
    return name, history, alice, bob


def _both_hold(fault: str, lab: Lab, name: str, history: History, alice: Any, bob: Any,
               breaks: Callable[[], None], work: float, periods: list[tuple[float, float, str]]) -> DoubleGrant:
    """alice holds; ``breaks()`` lets bob acquire too; both write (``_both_write``); the
    instances' keys are read, then both release. The evidence, as a DoubleGrant."""
    validity_left, writes = _both_write(lab, name, alice, bob, breaks, work)
    holders = holders_on(lab.redlock, key_of(alice), {alice.value: "alice", bob.value: "bob"})
    validity_ends = {"alice": _valid_until_wall(alice), "bob": _valid_until_wall(bob)}
    alice_on, bob_on = _names(lab, alice.acquired_on), _names(lab, bob.acquired_on)
    alice.release()  # a majority may no longer have her value: then "lost"
    bob.release()
    return DoubleGrant(fault, history, alice_on, bob_on, validity_left, holders, writes, periods, validity_ends)


def _both_write(lab: Lab, name: str, first: Any, second: Any, steps: Callable[[], None],
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


def clock_step_double_grant(lab: Lab, ttl_ms: int = 10_000, stepped: tuple[str, ...] = ("r1", "r2", "r3"),
                            work: float = 0.3, connect: Connect = Redlock.connect) -> DoubleGrant:
    """alice holds the lock on all five; the wall clocks of ``stepped`` (a majority) jump
    ahead by the TTL, so those servers expire her key at once; bob wins them. Clocks are
    reset afterwards. ``connect``: labkit's Redlock, or a library's (PotteryRedlock.connect).
    What can fail: ``ClockUnavailable`` on a lab without ``clocks=True``."""
    name, history, alice, bob = _alice_and_bob(lab, "clock", ttl_ms, connect)
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

        run = _both_hold("clock step", lab, name, history, alice, bob, step_and_acquire, work, periods)
    finally:
        for node in nodes:
            node.clock.reset()
        alice.close()
        bob.close()
    start, _, label = periods[0]
    periods[0] = (start, time.time(), label)  # the clocks were ahead until the reset
    return run


def restart_double_grant(lab: Lab, ttl_ms: int = 10_000, forgetful: str = "r3",
                         unreachable: tuple[str, ...] = ("r4", "r5"), work: float = 0.3,
                         connect: Connect = Redlock.connect) -> DoubleGrant:
    """``unreachable`` are down while alice acquires, so she wins a bare majority; they come
    back (empty), then ``forgetful``, one of alice's instances, crashes and restarts without
    having written anything to disk (appendonly off): her vote there is forgotten, and bob
    wins the forgetful one plus the two that were away. ``connect`` as for the clock step.
    What can fail: ``LockTimeout``; ``NodeStartError`` if an instance does not come back."""
    name, history, alice, bob = _alice_and_bob(lab, "restart", ttl_ms, connect)
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

        run = _both_hold("restart without fsync", lab, name, history, alice, bob, crash_restart_and_acquire,
                         work, periods)
    finally:
        for node in away:
            if node.state != "running":
                node.start()
                node.wait_ready()
        alice.close()
        bob.close()
    return run


@shows_progress("a Redlock holder paused past its TTL")
def pause_double_grant(lab: Lab, ttl: float = 1.0, pause: float = 2.5, recipe: str = "redlock",
                       connect: Connect = Redlock.connect) -> DoubleGrant:
    """A Redlock client process (client-1, TTL ``ttl`` s) acquires and writes to an unfenced
    store, then is frozen (SIGSTOP) for ``pause`` seconds, longer than its TTL; bob (in this
    process, a longer TTL) acquires once the keys expire, and writes; client-1 wakes and runs
    the write it was about to make. ``first_validity_left`` is negative: client-1's validity
    was over, but it was frozen and could not know. ``recipe`` (the client process's, from
    the registry) and ``connect`` (bob's): labkit's Redlock, or "pottery" and
    PotteryRedlock.connect. What can fail: ``ValueError`` if
    ``pause`` is not longer than ``ttl``; ClientError / ClientTimeout when the client
    process does not start or answer; ``LockTimeout`` if bob never gets the lock."""
    if pause <= ttl:
        raise ValueError(f"pause ({pause} s) must be longer than the TTL ({ttl} s), or nobody else can acquire")
    name, history = f"lock:pause-{uuid.uuid4().hex[:8]}", History()
    bob = connect(lab.redlock.endpoints, name, ttl_ms=int(4 * pause * 1000), identifier="bob",
                  on_event=history.sink("bob"), **({"retry_delay_ms": 20} if connect == Redlock.connect else {}))
    try:
        with frozen_holder(lab, recipe, name, pause, successor=bob, history=history, ttl=ttl) as run:
            frozen = run.frozen
            periods = [(run.frozen_at, run.late_answered_at, f"{frozen.name} frozen")]
            first_value = history.events(client=frozen.name, kind="acquired")[0].detail["value"]
            holders = holders_on(lab.redlock, key_of(bob), {first_value: frozen.name, bob.value: "bob"})
            frozen.release()  # its value is on no instance any more: "lost"
        validity_ends = {"bob": _valid_until_wall(bob)}
        bob.release()
    finally:
        bob.close()
    acquired = {event.client: event for event in history.events(kind="acquired")}
    first, second = acquired["client-1"], acquired["bob"]
    validity_ends["client-1"] = first.time + first.detail["validity_ms"] / 1000
    validity_left = validity_ends["client-1"] - second.time
    writes = run.writes
    return DoubleGrant("pause past validity", history, _names(lab, first.detail.get("instances", [])),
                       _names(lab, second.detail.get("instances", [])), validity_left, holders, writes, periods, validity_ends)


def offer_to_a_fenced_store(lab: Lab, writes: list[StoreWrite], history: History) -> list[StoreWrite]:
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
            ax.plot([until - origin], [rows[client] - 0.38], marker="v", color=MARK_COLOUR, linestyle="none")
        else:  # far beyond the run: say how far
            ax.annotate(f"valid {until - origin - right:.1f} s more \u2192", (right, rows[client] - 0.38),
                        ha="right", va="bottom", fontsize=8)
    return ax
