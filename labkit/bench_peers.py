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

import importlib.metadata
import re
from typing import TYPE_CHECKING, Any, Callable

from labkit.locks.curator import CuratorPeer, CuratorUnavailable, curator_version
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


def curator_in_jvm(curator: list[float]) -> dict[str, dict[str, Any]]:
    """The JVM's own times of the timed cycles."""
    return {CURATOR_IN_JVM: summarize(curator)} if curator else {}


# the ZooKeeper methods whose requests the server counts (requests_per_cycle)
COUNTED = ("curator from Python", "zookeeper", "zookeeper raw ops")


def requests_per_cycle(lab: Lab, steps: dict[str, Callable[[], None]], cycles: int = 50) -> dict[str, dict[str, float]]:
    """For each step, alone: reset the ZooKeeper server's counters (``srst``), run ``cycles``
    cycles, and read back (``srvr``) how many requests it received per cycle, and its average
    time from receipt to reply (a write's includes its fsync; measured alone, not in turns,
    so load on the machine moves it). Exact only when nothing else talks to that server
    meanwhile (the bench's own lab)."""
    node = lab.zookeeper.nodes[0]
    counted = {}
    for name, step in steps.items():
        node.four_letter("srst")
        for _ in range(cycles):
            step()
        stats = node.four_letter("srvr")
        received = re.search(r"^Received: (\d+)", stats, re.MULTILINE)
        latency = re.search(r"^Latency min/avg/max: [\d.]+/([\d.]+)/", stats, re.MULTILINE)
        if received and latency:
            counted[name] = {"requests_per_cycle": round(int(received.group(1)) / cycles, 2),
                             "server_avg_ms": float(latency.group(1))}
    return counted


def where_curator_time_goes(uncontended: dict[str, dict[str, Any]]) -> list[str]:
    """Lines for the report: Curator's cycle seen from Python, inside the JVM, the pipe alone,
    against ZooKeeperLock and the three raw operations both recipes send."""
    if CURATOR_IN_JVM not in uncontended:
        return ["  (Curator not measured: java or the Curator jars are missing)"]
    p50 = {name: uncontended[name]["p50_ms"] for name in
           ("curator from Python", CURATOR_IN_JVM, "curator pipe ping", "zookeeper", "zookeeper raw ops")}
    lines = [f"  Curator acquire + release, p50: {p50['curator from Python']:.3f} ms seen from Python = "
             f"{p50[CURATOR_IN_JVM]:.3f} ms in the JVM + about {p50['curator pipe ping']:.3f} ms of pipe",
             f"  ZooKeeperLock {p50['zookeeper']:.3f} ms; create + getChildren + delete sent by kazoo "
             f"{p50['zookeeper raw ops']:.3f} ms"]
    for name in COUNTED:
        row = uncontended[name]
        if "requests_per_cycle" in row:
            lines.append(f"  {name}: the server received {row['requests_per_cycle']:g} requests per cycle")
    ours, raw = (uncontended[name].get("requests_per_cycle", 0) for name in ("zookeeper", "zookeeper raw ops"))
    if raw and ours - raw >= 0.5:
        lines.append(f"  ZooKeeperLock's extra {ours - raw:.2g} request per cycle beyond the recipe's three: heartbeats of "
                     "its client-side deadline, one per interval held (labkit/locks/zookeeper_deadline.py, HolderDeadline._watch)")
    return lines


# the libraries labkit's recipes are compared with: (name, Python distribution or None, what uses it)
LIBRARIES = (("redis-py", "redis", "labkit's Redis client; its Lock is a peer (01, bench)"),
             ("python-redis-lock", "python-redis-lock", "peer of RedisLock (01, bench)"),
             ("pottery", "pottery", "peer of Redlock (08, bench)"),
             ("kazoo", "kazoo", "ZooKeeper client; its Lock is a reference (02, bench)"),
             ("python3-etcd3", "python3-etcd3", "etcd client; its Lock is a reference (03, bench)"),
             ("Curator", None, "Java peer of ZooKeeperLock (02, 10, bench), from /usr/share/java"))


def library_versions() -> list[dict[str, Any]]:
    """Each library of ``LIBRARIES`` with its installed version (importlib.metadata; Curator's
    jar for Curator), or None when it is not installed."""
    found = []
    for name, distribution, used_for in LIBRARIES:
        if distribution is None:
            version = curator_version()
        else:
            try:
                version = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                version = None
        found.append({"name": name, "version": version, "used_for": used_for})
    return found
