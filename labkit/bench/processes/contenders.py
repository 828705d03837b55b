"""The rows of ``labkit bench --processes`` whose contenders are long-lived processes: the four
Python recipes (one ``labkit.clients.crowd`` worker process per contender, one session each)
and Curator's InterProcessMutex (one JVM per contender: ``labkit.locks.curator.CuratorPeer``).

Each row hands one lock on ``releases`` times with ``labkit.harness.handoff.hand_off``: a
holder is asked to let go only once every waiter still waiting watches again, and around
each release the servers' own counters are read (``scale.crowd_handoff.server_counters``):
the wakeups of a release are the watches the ZooKeeper ensemble fired for it (``mntr``) or the
watch events the etcd members sent (``/metrics``), summed over the members. A hand-off is
timed inside the contenders' own processes, on the machine's one monotonic clock
(time.monotonic() in Python, System.nanoTime in the JVM): from the moment the holder began to
let go to the moment the next holder's acquire returned.

What can fail: ``BenchTimeout`` when a step does not happen within its budget, ``CrowdError``
from a worker that cannot open its session, ``CuratorPeerError`` from a JVM. Every process
is stopped on the way out, also on failure.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from labkit.bench.peers import watches_under
from labkit.bench.processes.targets import CURATOR, ETCD_MUTEX, KAZOO, PYTHON_ETCD3, ZOOKEEPER_LOCK
from labkit.bench.scale.crowd_handoff import BenchTimeout, WatchTally, patiently, server_counters, where_the_time_goes
from labkit.clients.crowd import Crowd
from labkit.harness.handoff import HandOffs, Settled, close_all, hand_off
from labkit.locks.curator import CuratorPeer
from labkit.locks.registry import RecipeHandle, connections_of
from labkit.record.history import History
from labkit.stats import summarize

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

Say = Callable[[str], Any]   # one progress line
# row label -> the recipe of labkit.locks.registry each contender process runs
PYTHON_ROWS = {ZOOKEEPER_LOCK: "zookeeper", KAZOO: "kazoo", ETCD_MUTEX: "etcd", PYTHON_ETCD3: "etcd3-lock"}
JVMS_AT_ONCE = 4   # JVMs started side by side: more only thrash 2 cores
PYTHONS_AT_ONCE = 8   # crowd workers started side by side (50 at once on a loaded machine: none ready in 180 s)
# the server's count of wakeups, per service: (counter of server_counters, what it is)
WAKEUPS = {"zookeeper": ("watchers_fired", "watches fired (mntr)"),
           "etcd": ("watch_events", "watch events sent (/metrics)")}


def zookeeper_settled(lab: Lab, prefix: str) -> Settled:
    """Every waiter still waiting has a watch set under ``prefix`` at the server (``wchp``)."""
    return patiently(lambda history, waiting: watches_under(lab, prefix) == len(waiting))


class ServerWakeups:
    """``before_release`` / ``after_settled`` hooks of ``hand_off``: the service's counters read
    just before each release and once its waiters settled again; ``per_release`` the differences."""

    def __init__(self, lab: Lab, service: str):
        self.lab, self.service, self.counter = lab, service, WAKEUPS[service][0]
        self.before: dict[str, float] = {}
        self.per_release: list[int] = []

    def before_release(self, number: int) -> None:
        self.before = server_counters(self.lab, self.service)

    def after_settled(self, number: int) -> None:
        after = server_counters(self.lab, self.service)
        self.per_release.append(round(after[self.counter] - self.before[self.counter]))


def run_hand_offs(lab: Lab, service: str, make: Any, n: int, releases: int, settled: Settled, history: History,
                  budget: float, one_by_one: bool = False) -> tuple[HandOffs, list[int]]:
    """``releases`` hand-offs among ``n`` contenders; returns them and the server's wakeups."""
    wakeups = ServerWakeups(lab, service)
    try:
        run = hand_off(make, n - 1, settled, releases=min(releases, n - 1), timeout=budget, history=history,
                       before_release=wakeups.before_release, after_settled=wakeups.after_settled,
                       one_by_one=one_by_one)
    except TimeoutError as error:
        raise BenchTimeout(str(error), hint="the machine may be overloaded: try a smaller --processes N") from None
    return run, wakeups.per_release


def row_of(label: str, n: int, spans: list[tuple[float, float]], wakeups: list[int], service: str,
           client_wakeups: list[int] | None, breakdown: dict[str, float], started_s: float) -> dict[str, Any]:
    """A row of the table: ``spans`` (holder began to let go, next holder's acquire returned) on
    time.monotonic(); hand-offs in ms."""
    return {"row": label, "n": n, "service": service, "handoffs": len(spans), "spans": spans,
            "handoff_ms": [round(1000 * (taken - began), 3) for began, taken in spans],
            "wakeups": wakeups, "wakeups_from": f"server: {WAKEUPS[service][1]}", "client_wakeups": client_wakeups,
            "breakdown_p50_ms": breakdown, "start_s": round(started_s, 1)}


def measure_python(lab: Lab, label: str, n: int, releases: int, name: str, say: Say,
                   budget: float = 180.0) -> dict[str, Any]:
    """One Python row: ``n`` crowd workers, one contender (and one session) each."""
    recipe = PYTHON_ROWS[label]
    service = "zookeeper" if recipe in ("zookeeper", "kazoo") else "etcd"
    name = name.strip("/").replace("/", "-") if recipe == "etcd3-lock" else name
    began = time.monotonic()
    tally = WatchTally()
    crowd = Crowd(connections_of(lab), recipe, name, n, workers=n, start_timeout=budget,
                  ttl=600 if recipe == "etcd3-lock" else 60,   # python-etcd3's lease is never refreshed
                  share_client=False, starting_at_once=PYTHONS_AT_ONCE,
                  progress=lambda ready, total: say(f"{label}: {ready}/{total} processes up"))
    crowd.listeners.append(tally)
    started_s = time.monotonic() - began
    settled = zookeeper_settled(lab, f"{name}/") if service == "zookeeper" else tally.settled
    try:
        run, wakeups = run_hand_offs(lab, service, crowd.lock_factory(), n, releases, settled, crowd.history,
                                     budget, one_by_one=recipe == "etcd3-lock")   # as the scale bench queues it
    finally:
        crowd.close()
    taken = [crowd.acquired_at[acquired] for _, _, acquired in run.releases]
    spans = [(started, acquired) for acquired, (started, _) in zip(taken, crowd.releases)]
    return row_of(label, n, spans, wakeups, service, run.wakeups, where_the_time_goes(crowd, run.releases), started_s)


def start_peers(lab: Lab, path: str, n: int, warm_up: int, say: Say,
                sinks: dict[str, Callable[..., Any]]) -> dict[str, CuratorPeer]:
    """``n`` Curator JVMs on ``path`` (JVMS_AT_ONCE at a time, a progress line as they come up),
    then ``warm_up`` acquire + release cycles each, all JVMs at once (the JIT compiles what a
    long-lived JVM would have compiled). Their events go to ``sinks[name]`` once set."""
    peers: dict[str, CuratorPeer] = {}
    lock = threading.Lock()

    def start(name: str) -> None:
        peer = CuratorPeer(lab.zookeeper.hosts, path, identifier=name, session_timeout=30.0,
                           on_event=lambda kind, **detail: sinks.get(name, lambda *a, **d: None)(kind, **detail))
        with lock:
            peers[name] = peer
            say(f"{CURATOR}: {len(peers)}/{n} JVMs up")

    try:
        with ThreadPoolExecutor(JVMS_AT_ONCE) as pool:
            list(pool.map(start, [f"contender-{number}" for number in range(n)]))
        if warm_up:
            say(f"{CURATOR}: warming up, {warm_up} acquire + release cycles in each JVM, all at once")
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(lambda peer: [peer.cycle() for _ in range(warm_up)], peers.values()))
    except BaseException:
        close_all([peer.close for peer in peers.values()])
        raise
    return dict(sorted(peers.items(), key=lambda item: int(item[0].split("-")[1])))


def measure_curator(lab: Lab, n: int, releases: int, path: str, warm_up: int, say: Say,
                    budget: float = 180.0) -> dict[str, Any]:
    """Curator's row: ``n`` JVMs, one CuratorPeer (one session) each, timed by their own
    stamps (``CuratorPeer.acquired_at``, ``released_at``)."""
    began = time.monotonic()
    sinks: dict[str, Callable[..., Any]] = {}
    peers = start_peers(lab, path, n, warm_up, say, sinks)
    started_s = time.monotonic() - began
    history = History()

    def make(name: str, on_event: Any) -> RecipeHandle:
        sinks[name] = on_event
        return RecipeHandle(peers[name], close=peers[name].close)

    run, wakeups = run_hand_offs(lab, "zookeeper", make, n, releases, zookeeper_settled(lab, f"{path}/"),
                                 history, budget)
    holder_of = {event.time: event.client for event in history.events(kind="acquired")}
    spans, calls = [], []
    for giver, _, acquired in run.releases:
        released, taker = peers[giver].released_at, peers[holder_of[acquired]]
        if released is None or taker.acquired_at is None:
            raise BenchTimeout("a Curator peer answered without its JVM's time stamps",
                               hint="the compiled CuratorPeer is older than labkit/locks/java/CuratorPeer.java")
        spans.append((released[0], taker.acquired_at))
        calls.append(released[1] - released[0])
    parts = {"release call": calls, "release call to acquired": [taken - start for start, taken in spans]}
    breakdown = {part: summarize(seconds)["p50_ms"] for part, seconds in parts.items() if seconds}
    return row_of(CURATOR, n, spans, wakeups, "zookeeper", None, breakdown, started_s)
