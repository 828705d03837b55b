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

from labkit.bench.scale.crowd_handoff import MNTR_TIMEOUT, BenchTimeout, server_counters
from labkit.harness.handoff import HandOffs
from labkit.locks.curator import CuratorHandOff, CuratorPeer, CuratorUnavailable, curator_version
from labkit.locks.registry import connections_of, make_lock
from labkit.stats import summarize
from labkit.timing import wait_until

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
OP_TIMEOUT = 5.0
# A Redlock vote waits 50 ms per instance. On a busy machine an instance can set the key and
# answer after the client gave up; the round fails, and its compare-and-delete can time out
# too, so the key stays until its TTL. Once a majority holds such keys no round can win
# until they expire: with a TTL of 10 s, an uncontended acquire gave up after 5 s (CI, stop
# 40). The TTL stays well under half the op's timeout, so a stale key is always gone in time.
REDLOCK_TTL = 2.0
assert 2 * REDLOCK_TTL < OP_TIMEOUT


def peer_methods(lab: Lab, run_id: str, curator: list[float], jvm_warm_up: int = 500) -> Methods:
    """name -> (one acquire + release, cleanup) for every peer this lab can run: the Redis
    peers on its primary, the Redlocks on its Redlock instances (a lab with ``redlock=N``),
    Curator on its ZooKeeper (if java and the Curator jars are installed). Curator's cycle
    times inside the JVM are appended to ``curator``; it runs ``jvm_warm_up`` cycles first."""
    connections = connections_of(lab)
    methods: Methods = {}

    def recipe(label: str, name: str, lock_name: str, ttl: float = 10) -> None:
        methods[label] = lock_cycle(name, connections, lock_name, label, ttl=ttl)

    recipe("redis-py Lock", "redis-py", f"bench-{run_id}-redis-py")
    recipe("python-redis-lock", "python-redis-lock", f"bench-{run_id}-python-redis-lock")
    if getattr(lab, "redlock", None) is not None:
        recipe("redlock", "redlock", f"bench-{run_id}-redlock", ttl=REDLOCK_TTL)
        recipe("pottery Redlock", "pottery", f"bench-{run_id}-pottery", ttl=REDLOCK_TTL)
    try:
        peer = CuratorPeer(lab.zookeeper.hosts, f"/bench-{run_id}/curator", identifier="bench")
    except CuratorUnavailable:
        return methods
    for _ in range(jvm_warm_up):
        peer.cycle()
    methods["curator from Python"] = (lambda: curator.append(peer.cycle()), peer.close)
    methods["curator pipe ping"] = (peer.ping, lambda: None)
    return methods


def lock_cycle(recipe: str, connections: dict[str, str], lock_name: str, label: str,
               **settings: float) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one acquire + release of ``recipe``, giving up after ``OP_TIMEOUT``; its cleanup).
    ``settings``: make_lock's (``ttl``, ``session_timeout``)."""
    handle = make_lock(recipe, connections, lock_name, label, **settings)
    return (lambda: (handle.lock.acquire(timeout=OP_TIMEOUT), handle.lock.release())), handle.close


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


# ---- Curator's hand-off: N contenders inside one warmed JVM ----------------------------------
# label -> one CuratorFramework for every contender (as a Java program usually has) or one each
CURATOR_HANDOFFS = {"curator, a session each": False, "curator, one shared client": True}


def watches_under(lab: Lab, prefix: str) -> int:
    """Watches the ZooKeeper servers hold on nodes whose path starts with ``prefix``
    (``wchp``: each watched path, then one line per session watching it). Unlike the total
    of ``mntr``, no other client's watch (Curator's own on /zookeeper/config) counts."""
    count = 0
    for node in lab.zookeeper.nodes:
        path = ""
        for line in node.four_letter("wchp", timeout=MNTR_TIMEOUT).splitlines():
            if line.startswith("/"):
                path = line.strip()
            elif line.strip() and path.startswith(prefix):
                count += 1
    return count


def curator_handoffs(lab: Lab, n: int, releases: int, run_id: str, jvm_warm_up: int = 500,
                     warm_handoffs: int = 3, budget: float = 120.0) -> list[dict[str, Any]]:
    """Curator's InterProcessMutex handed on ``releases`` times among ``n`` contenders, all
    threads of one JVM (labkit/locks/java/CuratorHandoff.java), once per way of giving them
    clients (CURATOR_HANDOFFS). The JVM is warmed up first (``jvm_warm_up`` acquire +
    release cycles, then ``warm_handoffs`` untimed hand-offs of each crowd). Each release
    waits until every waiter still waiting watches its predecessor at the server (``wchp``),
    and counts the watchers the server fired for it (``mntr``). No Curator: one row with a
    note. Raises CuratorPeerError if the JVM fails, BenchTimeout if a waiter never watches."""
    path = f"/bench-{run_id}/curator-handoff"
    try:
        peer = CuratorPeer(lab.zookeeper.hosts, path, identifier="bench")
    except CuratorUnavailable as error:
        return [{"scenario": "curator", "n": n, "handoffs": 0, "note": f"not measured: {error}"}]
    rows = []
    try:
        for _ in range(jvm_warm_up):
            peer.cycle()
        for label, shared in CURATOR_HANDOFFS.items():
            warm = max(0, min(warm_handoffs, n - 1 - releases))
            peer.queue_crowd(n, shared, budget)
            handed, wakeups = [], []
            for number in range(min(warm + releases, n - 1)):
                before = watched(lab, f"{path}-handoff/", n - 1 - number, budget)
                one = peer.hand_over(budget)
                after = watched(lab, f"{path}-handoff/", n - 2 - number, budget)
                if number >= warm:
                    handed.append(one)
                    wakeups.append(round(after["watchers_fired"] - before["watchers_fired"]))
            peer.disband()
            rows.append(curator_row(label, n, handed, wakeups))
    finally:
        peer.close()
    return rows


def watched(lab: Lab, prefix: str, waiting: int, budget: float) -> dict[str, float]:
    """Wait until ``waiting`` watches are set under ``prefix``; then the server's counters."""
    try:
        wait_until(lambda: watches_under(lab, prefix) == waiting, f"{waiting} Curator waiters to watch", budget)
    except TimeoutError as error:
        raise BenchTimeout(str(error), hint="the machine may be overloaded: try --quick") from None
    return server_counters(lab, "zookeeper")


def curator_row(label: str, n: int, handed: list[CuratorHandOff], wakeups: list[int]) -> dict[str, Any]:
    """The numbers of one crowd's hand-offs, in ms: from the holder being asked (as the
    Python hand-off measures ZooKeeperLock's) and from its release call, and the parts."""
    parts = {"asked to watch fired": [one.woke - one.asked for one in handed if one.woke],
             "holder's thread woke": [one.release_start - one.asked for one in handed],
             "release call": [one.release_return - one.release_start for one in handed],
             "release call to watch fired": [one.woke - one.release_start for one in handed if one.woke],
             "watch fired to acquired": [one.acquired - one.woke for one in handed if one.woke]}
    asked = summarize([one.acquired - one.asked for one in handed])
    released = summarize([one.acquired - one.release_start for one in handed])
    return {"scenario": label, "n": n, "handoffs": len(handed), "wakeups": wakeups,
"givers": [one.giver for one in handed], "takers": [one.taker for one in handed],
            "overlaps": handed[-1].overlaps if handed else 0,
            "handoff_p50_ms": asked["p50_ms"], "handoff_p99_ms": asked["p99_ms"],
            "from_release_p50_ms": released["p50_ms"], "from_release_p99_ms": released["p99_ms"],
            "breakdown_p50_ms": {part: summarize(seconds)["p50_ms"] for part, seconds in parts.items() if seconds}}


def handoff_parts(run: HandOffs) -> dict[str, float]:
    """A Python hand-off (``labkit.harness.handoff``) cut in two, from its History: the holder
    asked to let go until the watch fired in the next holder's client (its "woke"), and that
    until its "acquired". p50s in ms, as ``curator_row`` gives them for Curator's."""
    parts: dict[str, list[float]] = {"asked to watch fired": [], "watch fired to acquired": []}
    for _, asked, acquired in run.releases:
        taker = next(event.client for event in run.history.events(kind="acquired") if event.time == acquired)
        woke = [event.time for event in run.history.events(client=taker, kind="woke") if asked <= event.time <= acquired]
        if woke:
            parts["asked to watch fired"].append(woke[-1] - asked)
            parts["watch fired to acquired"].append(acquired - woke[-1])
    return {part: summarize(seconds)["p50_ms"] for part, seconds in parts.items() if seconds}


def curator_handoff_lines(results: dict[str, Any]) -> list[str]:
    """The report's lines on Curator's hand-off: its p50/p99 next to ZooKeeperLock's at the same
    N in the same run, each against its own uncontended op, and where Curator's time goes."""
    rows = results.get("curator_handoff", [])
    if not rows or not rows[0]["handoffs"]:
        return [f"  {row.get('note', 'not measured')}" for row in rows[:1]]
    n, uncontended = rows[0]["n"], results["uncontended"]
    ours = next((row for row in results["handoff"] if row["scenario"] == "zookeeper predecessor"
                 and row["n"] == n and row["handoffs"]), None)
    lines = [f"  {'N = ' + str(n):<30}{'p50 ms':>9}{'p99 ms':>9}{'own op p50':>12}{'ratio':>8}  wakeups per release"]
    table = [(row["scenario"], row, CURATOR_IN_JVM) for row in rows]
    if ours:
        table.insert(0, ("zookeeper predecessor (Python)", ours, "zookeeper"))
    for label, row, alone in table:
        op = uncontended.get(alone, {}).get("p50_ms")
        ratio = f"{row['handoff_p50_ms'] / op:8.2f}" if op else f"{'':>8}"
        wakeups = ",".join(map(str, row["wakeups"]))
        lines.append(f"  {label:<30}{row['handoff_p50_ms']:>9.2f}{row['handoff_p99_ms']:>9.2f}"
                     f"{op or float('nan'):>12.3f}{ratio}  {wakeups[:30]}")
    for label, row, _ in table:
        parts = ", ".join(f"{part} {value:.2f}" for part, value in row.get("breakdown_p50_ms", {}).items())
        since = f"; from its release call {row['from_release_p50_ms']:.2f}" if "from_release_p50_ms" in row else ""
        lines.append(f"  {label}, p50 ms: {parts}{since}")
    lines += [f"  load average (1, 5, 15 min) at the start and end of the run: {results.get('load_average')}",
              "  Both are timed from asking the holder to let go to the next holder's acquire returning, in one",
              "  process: Curator's contenders are JVM threads (System.nanoTime); ZooKeeperLock's are threads of",
              "  one Python process (kazoo's connection and event threads for each, one interpreter lock for all).",
              "  A Curator hand-off: the holder's delete commits, the server sends the watch event to the next",
              "  waiter's client, its ZooKeeper event thread wakes the waiting thread, which reads the children",
              "  again and returns from acquire(); ZooKeeperLock's does the same in Python."]
    return lines


def curator_handoff_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Reported, not judged: Curator's hand-off p50 against its own op and against ZooKeeperLock's
    hand-off (another runtime: no target), and its wakeups per release (exactly 1)."""
    found = []
    ours = {row["n"]: row for row in results["handoff"] if row["scenario"] == "zookeeper predecessor" and row["handoffs"]}
    for row in results.get("curator_handoff", []):
        if not row["handoffs"]:
            continue
        op = results["uncontended"][CURATOR_IN_JVM]["p50_ms"]
        measured = f"{row['handoff_p50_ms']:.2f} ms = {row['handoff_p50_ms'] / op:.2f}x its op"
        if row["n"] in ours:
            measured += f"; ZooKeeperLock's hand-off p50 / this = {ours[row['n']]['handoff_p50_ms'] / row['handoff_p50_ms']:.2f}"
        found.append({"target": f"{row['scenario']}, N={row['n']}: hand-off p50 (reported)", "measured": measured,
                      "met": None})
        found.append({"target": f"{row['scenario']}, N={row['n']}: exactly 1 wakeup per release",
                      "measured": row["wakeups"], "met": set(row["wakeups"]) == {1} and row["overlaps"] == 0})
    return found
