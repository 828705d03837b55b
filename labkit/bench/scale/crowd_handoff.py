"""Hand-offs with a thousand contenders, and what each release costs the server.

The contenders live in worker processes (``labkit.clients.crowd``), a hundred sessions
each; ``labkit.harness.handoff.hand_off`` drives them as it drives threads, so the wakeup
counts mean exactly what they mean in notebooks 02 and 03. Around each release the
server's own counters are read twice (just before the release is asked for, and once
every waiter still waiting has armed its watch again): ZooKeeper's ``mntr``
(zk_packets_sent; the watchers fired, zk_sum_node_*_watch_count), etcd's ``/metrics``
(etcd_debugging_mvcc_events_total: watch events sent; the Watch stream's messages), and
the CPU time of the server processes (utime + stime in /proc/PID/stat).

What can fail: ``BenchTimeout`` when a step does not happen within its budget (an
overloaded machine, a server that stopped answering), ``CrowdError`` from a worker that
cannot open its sessions. Every session is closed and every worker stopped on the way
out, also on failure; ``left_behind`` in the result lists any worker pid still alive.
"""
from __future__ import annotations

import os
import re
import statistics
import time
from typing import TYPE_CHECKING, Any

from labkit.clients.crowd import Crowd, running
from labkit.errors import LabError
from labkit.harness.handoff import Settled, hand_off, server_watches, starts_after
from labkit.locks.registry import connections_of, make_lock
from labkit.record.history import History
from labkit.servers.services.zookeeper import parse_mntr
from labkit.stats import summarize, take_turns

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

# The hand-off scenarios of both benchmarks (label -> registered recipe), the targets
# first: a herd of a thousand leaves the machine busy for a while after it ends.
HANDOFF_SCENARIOS = {"zookeeper predecessor": "zookeeper", "etcd EtcdMutex": "etcd",
             "zookeeper parent": "zookeeper-parent", "etcd python-etcd3 Lock": "etcd3-lock"}
HERDS = ("zookeeper parent", "etcd python-etcd3 Lock")
# python-etcd3's Lock grants a lease and sends a txn per try: a thousand at once on 2 busy
# cores ran into gRPC deadlines and UNAVAILABLE. Queued one by one, nobody is woken by a
# newcomer (its waiters watch the one key's deletion), so the releases measure the same.
# (Not for the parent watch: there every newcomer wakes the whole queue.)
QUEUE_ONE_BY_ONE = ("etcd3-lock",)
ZOOKEEPER_FIRED = ("zk_sum_node_created_watch_count", "zk_sum_node_deleted_watch_count",
                   "zk_sum_node_changed_watch_count", "zk_sum_node_children_watch_count")
ETCD_WATCH_MESSAGES = re.compile(r'^grpc_server_msg_sent_total\{grpc_method="Watch",'
                                 r'grpc_service="etcdserverpb.Watch"[^}]*\}\s+(\S+)', re.MULTILINE)
MNTR_TIMEOUT = 15.0   # a server busy with a thousand-waiter herd answers mntr late, but it answers
ETCD_EVENTS = re.compile(r"^etcd_debugging_mvcc_events_total\s+(\S+)", re.MULTILINE)
# the server's own time sums, in ms: ZooKeeper's (whole ms per request, so only their means
# over many requests say something) and etcd's (seconds in /metrics)
ZOOKEEPER_TIMES = {"write_ms": "zk_sum_updatelatency", "read_ms": "zk_sum_readlatency", "fsync_ms": "zk_sum_fsynctime"}
ETCD_TIMES = {"fsync_ms": re.compile(r"^etcd_disk_wal_fsync_duration_seconds_sum\s+(\S+)", re.MULTILINE),
              "backend_commit_ms": re.compile(r"^etcd_disk_backend_commit_duration_seconds_sum\s+(\S+)", re.MULTILINE)}


class BenchTimeout(LabError):
    """A benchmark scenario (of ``labkit.bench`` or of the bench at scale) did not reach the
    state it waits for before its deadline."""


# ---- the server's own counters ------------------------------------------------------------
def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes ``pids`` used so far (/proc/PID/stat, Linux);
    a process that is gone counts 0."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])   # utime, stime: fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def server_counters(lab: Lab, service: str) -> dict[str, float]:
    """Counters that only grow, summed over the service's nodes: ``cpu_s``, and for ZooKeeper
    ``packets_sent`` and ``watchers_fired``, for etcd ``watch_events`` and ``watch_messages``."""
    nodes = getattr(lab, service).nodes
    counters = {"cpu_s": cpu_seconds([node.pid for node in nodes if node.pid])}
    for node in nodes:
        if service == "zookeeper":
            mntr = parse_mntr(node.four_letter("mntr", timeout=MNTR_TIMEOUT))
            counters["packets_sent"] = counters.get("packets_sent", 0) + int(mntr.get("zk_packets_sent", 0))
            counters["watchers_fired"] = counters.get("watchers_fired", 0) + sum(
                int(mntr.get(name, 0)) for name in ZOOKEEPER_FIRED)
            for key, name in ZOOKEEPER_TIMES.items():
                counters[key] = counters.get(key, 0) + float(mntr.get(name, 0))
        else:
            text = node.metrics()
            events, messages = ETCD_EVENTS.search(text), ETCD_WATCH_MESSAGES.search(text)
            counters["watch_events"] = counters.get("watch_events", 0) + (float(events.group(1)) if events else 0)
            counters["watch_messages"] = counters.get("watch_messages", 0) + (
                float(messages.group(1)) if messages else 0)
            for key, pattern in ETCD_TIMES.items():
                found = pattern.search(text)
                counters[key] = counters.get(key, 0) + (1000 * float(found.group(1)) if found else 0)
    return counters


# ---- settled, from the events: fast enough for a thousand waiters -----------------------
class WatchTally:
    """Per contender, "watch" events minus "woke" events, kept as the events arrive. A waiter
    with one more "watch" than "woke" waits on a watch again (``watching_again`` of
    ``labkit.harness.handoff``, without scanning the whole History at every poll)."""

    def __init__(self) -> None:
        self.armed: dict[str, int] = {}
        self.since: dict[str, Any] = {}   # where each contender's newest watch starts (if it says)
        self.newest_token: Any = None

    def __call__(self, kind: str, client: str = "", **detail: Any) -> None:
        if kind in ("watch", "woke"):
            self.armed[client] = self.armed.get(client, 0) + (1 if kind == "watch" else -1)
        if kind == "watch":
            self.since[client] = detail.get("from_revision")
        elif kind == "acquired":
            self.newest_token = detail.get("token")

    def settled(self, history: History, waiting: list[str]) -> bool:
        return all(self.armed.get(name) == 1 and starts_after(self.since.get(name), self.newest_token)
                   for name in waiting)


def patiently(settled: Settled) -> Settled:
    """``settled``, where a probe that gets no answer in time (mntr to a server busy with
    a herd) means "not yet" rather than an error: the caller polls again."""
    def check(history: History, waiting: list[str]) -> bool:
        try:
            return settled(history, waiting)
        except OSError:   # socket.timeout, a reset connection: ask again at the next poll
            return False
    return check


# ---- one scenario ---------------------------------------------------------------------------
def measure_crowd(lab: Lab, label: str, n: int, releases: int, workers: int, run_id: str,
                  budget: float = 180.0) -> dict[str, Any]:
    """N contenders (one holder, N - 1 waiters) over ``workers`` processes; ``releases``
    hand-offs, each once the waiters settled. Returns wakeups per release, hand-off
    p50/p99, the server's cost per release (means) and how long setup and teardown took."""
    recipe, service = HANDOFF_SCENARIOS[label], label.split()[0]
    name = f"/scale-{run_id}/{recipe}-{n}"
    name = name.strip("/").replace("/", "-") if recipe == "etcd3-lock" else name
    row: dict[str, Any] = {"scenario": label, "n": n, "workers": workers, "herd": label in HERDS}
    started = time.monotonic()
    tally = WatchTally()
    settled: Settled = patiently(server_watches(lab.zookeeper)) if service == "zookeeper" else tally.settled
    crowd = Crowd(connections_of(lab), recipe, name, n, workers=min(workers, n), start_timeout=budget,
                  ttl=600 if recipe == "etcd3-lock" else 60)   # python-etcd3's lease is never refreshed
    crowd.listeners.append(tally)
    row["sessions_open_s"] = round(time.monotonic() - started, 2)
    before: dict[str, float] = {}
    costs: list[dict[str, float]] = []

    def before_release(_: int) -> None:
        before.update(server_counters(lab, service))

    def after_settled(_: int) -> None:
        after = server_counters(lab, service)
        costs.append({key: after[key] - before[key] for key in after})

    try:
        queued = time.monotonic()
        run = hand_off(crowd.lock_factory(), n - 1, settled, releases=min(releases, n - 1), timeout=budget,
                       history=crowd.history, before_release=before_release, after_settled=after_settled,
                       one_by_one=recipe in QUEUE_ONE_BY_ONE)
        row["run_s"] = round(time.monotonic() - queued, 2)
    except TimeoutError as error:
        raise BenchTimeout(str(error), hint="the machine may be overloaded: try --quick") from None
    finally:
        closing = time.monotonic()
        crowd.close()
        row["teardown_s"] = round(time.monotonic() - closing, 2)
        row["left_behind"] = running(crowd.pids)
    # The recipe's hand-off: from the moment the holder began to let go (in its worker) to
    # the next holder's "acquired" (in its worker), both on time.monotonic(). The target is
    # on this one. "From the reply": from when the holder's release call returned (the
    # server has deleted the node or key) instead: what the next holder alone spends
    # noticing and re-checking. run.latencies also counts the harness's pipe to the worker.
    taken = [crowd.acquired_at[acquired] for _, _, acquired in run.releases]
    latency = summarize([acquired - started for acquired, (started, _) in zip(taken, crowd.releases)])
    from_reply = summarize([acquired - replied for acquired, (_, replied) in zip(taken, crowd.releases)])
    harness = summarize(run.latencies)
    row["breakdown_p50_ms"] = where_the_time_goes(crowd, run.releases)
    row.update(handoffs=len(run.releases), wakeups=run.wakeups, mean_wakeups=round(statistics.mean(run.wakeups), 2),
               handoff_p50_ms=latency["p50_ms"], handoff_p99_ms=latency["p99_ms"],
               handoff_from_reply_p50_ms=from_reply["p50_ms"],
               asked_p50_ms=harness["p50_ms"], retried_acquires=crowd.retries,
               server_per_release={key: round(statistics.mean(cost[key] for cost in costs), 3) for key in costs[0]})
    return row


def where_the_time_goes(crowd: Crowd, releases: list[tuple[str, float, float]]) -> dict[str, float]:
    """Each hand-off cut in three, in the clients (every worker stamps time.monotonic()):
    the holder's release call until its reply (the delete committed at the server), the
    release call until the next holder's watch fired in its worker (the commit, the watch
    event on its way, the client library's thread waking), and that wake-up until its
    "acquired" (its waiting thread woken, the queue read again, the decision). p50s in ms;
    hand-offs whose next holder reported no wake-up are left out."""
    holder_of = {event.time: event.client for event in crowd.history.events(kind="acquired")}
    parts: dict[str, list[float]] = {"release call": [], "release call to next holder woke": [],
                                     "woke to acquired": []}
    for (started, replied), (_, _, taken) in zip(crowd.releases, releases):
        acquired = crowd.acquired_at[taken]
        woke = [moment for moment in crowd.woke_at.get(holder_of.get(taken, ""), []) if started <= moment <= acquired]
        parts["release call"].append(replied - started)
        if woke:
            parts["release call to next holder woke"].append(woke[-1] - started)
            parts["woke to acquired"].append(acquired - woke[-1])
    return {part: summarize(seconds)["p50_ms"] for part, seconds in parts.items() if seconds}


def uncontended(lab: Lab, iterations: int, run_id: str,
                recipes: tuple[str, ...] = ("zookeeper predecessor", "etcd EtcdMutex"),
                pause: float = 0.0) -> dict[str, dict[str, Any]]:
    """Acquire + release with nobody else around (the targets' yardstick), for ``recipes``
    (labels of HANDOFF_SCENARIOS), each on its own connections, taking turns (``labkit.stats``).
    ``pause``: seconds of quiet before each op, as before each hand-off (its waiters settle
    first): then every thread on the op's path starts asleep."""
    handles = {label: make_lock(HANDOFF_SCENARIOS[label], connections_of(lab),
                                f"/scale-{run_id}/alone-{HANDOFF_SCENARIOS[label]}", label, ttl=60) for label in recipes}
    try:
        samples = take_turns({label: (lambda lock=handle.lock: (lock.acquire(timeout=10), lock.release()))
                              for label, handle in handles.items()}, iterations, warm_up=3, pause=pause)
    finally:
        for handle in handles.values():
            handle.close()
    return {label: summarize(seconds) for label, seconds in samples.items()}
