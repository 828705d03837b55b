"""The libraries learners use, in the benchmark's uncontended run (``labkit bench``): redis-py's
``Lock`` and python-redis-lock against labkit's Redis lock, pottery's ``Redlock`` against
labkit's Redlock, and Apache Curator's ``InterProcessMutex`` (a Java peer) against
ZooKeeperLock. They take turns with labkit's recipes in the same run, on the same servers.

Curator runs in its own JVM, driven over a pipe, so what Python sees of one acquire + release
is the JVM's work plus two pipe crossings. The peer times each cycle inside the JVM too
(``System.nanoTime``), and a ``ping`` measures the pipe alone: the report puts the three side by
side, after warming the JVM up (its first thousand calls run interpreted, then compiled).

What can fail: ``CuratorPeerError`` when the JVM dies or stops answering; Curator missing
(``CuratorUnavailable``) only leaves its rows out, with a note.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from labkit.locks.curator import CuratorPeer, CuratorUnavailable
from labkit.locks.registry import connections_of, make_lock
from labkit.stats import summarize

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

Methods = dict[str, tuple[Callable[[], None], Callable[[], None]]]

# label -> (labkit's method, the peer's method, the largest ratio of p50s that meets the target)
PEER_TARGETS = {"redis / redis-py Lock": ("redis", "redis-py Lock", 1.1),
                "redlock / pottery Redlock": ("redlock", "pottery Redlock", 1.0)}
# printed without a target: a different design (python-redis-lock reads before it sets), or a
# different runtime (the JVM)
PEER_RATIOS = {"redis / python-redis-lock": ("redis", "python-redis-lock"),
               "zookeeper / curator in JVM": ("zookeeper", "curator in JVM"),
               "zookeeper / curator from Python": ("zookeeper", "curator from Python")}
CURATOR_IN_JVM = "curator in JVM"


def peer_methods(lab: Lab, run_id: str, curator: list[float], jvm_warm_up: int = 500) -> Methods:
    """name -> (one acquire + release, cleanup) for every peer this lab can run: the Redis
    peers on its primary, the Redlocks on its Redlock instances (a lab with ``redlock=N``),
    Curator on its ZooKeeper (if java and the Curator jars are installed). Curator's cycle
    times inside the JVM are appended to ``curator``; it runs ``jvm_warm_up`` cycles first."""
    connections = connections_of(lab)
    methods: Methods = {}

    def recipe(label: str, name: str, lock_name: str) -> None:
        handle = make_lock(name, connections, lock_name, label, ttl=10)
        methods[label] = (lambda: (handle.lock.acquire(timeout=5), handle.lock.release()), handle.close)

    recipe("redis-py Lock", "redis-py", f"bench-{run_id}-redis-py")
    recipe("python-redis-lock", "python-redis-lock", f"bench-{run_id}-python-redis-lock")
    if getattr(lab, "redlock", None) is not None:
        recipe("redlock", "redlock", f"bench-{run_id}-redlock")
        recipe("pottery Redlock", "pottery", f"bench-{run_id}-pottery")
    try:
        peer = CuratorPeer(lab.zookeeper.hosts, f"/bench-{run_id}/curator", identifier="bench")
    except CuratorUnavailable:
        return methods
    for _ in range(jvm_warm_up):
        peer.cycle()
    methods["curator from Python"] = (lambda: curator.append(peer.cycle()), peer.close)
    methods["curator pipe ping"] = (peer.ping, lambda: None)
    return methods


def peer_ratios(uncontended: dict[str, dict[str, Any]]) -> dict[str, float]:
    pairs = {label: (ours, theirs) for label, (ours, theirs, _) in PEER_TARGETS.items()} | PEER_RATIOS
    return {label: round(uncontended[ours]["p50_ms"] / uncontended[theirs]["p50_ms"], 3)
            for label, (ours, theirs) in pairs.items() if ours in uncontended and theirs in uncontended}


def peer_targets(ratios: dict[str, float]) -> list[dict[str, Any]]:
    return [{"target": f"p50 {label} <= {limit}", "measured": ratios[label], "met": ratios[label] <= limit}
            for label, (_, _, limit) in PEER_TARGETS.items() if label in ratios]


def curator_in_jvm(curator: list[float], iterations: int) -> dict[str, dict[str, Any]]:
    """The JVM's own times of the timed cycles (the warm-up calls left out)."""
    return {CURATOR_IN_JVM: summarize(curator[-iterations:])} if curator else {}


def where_curator_time_goes(uncontended: dict[str, dict[str, Any]]) -> list[str]:
    """Lines for the report: Curator's cycle seen from Python, inside the JVM, the pipe alone,
    against ZooKeeperLock and the three raw operations both recipes send."""
    if CURATOR_IN_JVM not in uncontended:
        return ["  (Curator not measured: java or the Curator jars are missing)"]
    p50 = {name: uncontended[name]["p50_ms"] for name in
           ("curator from Python", CURATOR_IN_JVM, "curator pipe ping", "zookeeper", "zookeeper raw ops")}
    return [f"  Curator acquire + release, p50: {p50['curator from Python']:.3f} ms seen from Python = "
            f"{p50[CURATOR_IN_JVM]:.3f} ms in the JVM + about {p50['curator pipe ping']:.3f} ms of pipe",
            f"  ZooKeeperLock {p50['zookeeper']:.3f} ms; the 3 requests both send (create, getChildren, "
            f"delete) from Python {p50['zookeeper raw ops']:.3f} ms"]
