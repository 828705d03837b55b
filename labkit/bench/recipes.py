"""The benchmark of the recipes: what each lock costs, and how many waiters one release wakes.

``labkit bench [--quick] [--json PATH] [--attach]`` (labkit/bench/command.py) measures on one lab (its own
``labkit.up(zookeeper=1, etcd=1, redis=True)``, or with ``--attach`` the one ``labkit up``
started), prints a table, and writes the same numbers as JSON for the notebooks:

- uncontended acquire + release latency (p50/p99) of every recipe, of the raw server
  operations our recipes are built from, and of the reference recipes (kazoo's Lock,
  python-etcd3's Lock, ``etcdctl lock``); methods take turns, one iteration each in a
  shuffled order, so that a burst of load on the machine hits them all alike;
- hand-off latency (from asking the holder to release to the next holder's acquire) and
  wakeups per release, with N contenders (one holder, N - 1 waiters), each a thread with
  its own session (``labkit.harness.handoff``): predecessor vs parent watch (ZooKeeper),
  EtcdMutex vs python-etcd3's Lock (etcd); and at the largest N, Curator's InterProcessMutex
  handed on among N threads of one warmed JVM (``bench_peers.curator_handoffs``), beside
  ZooKeeperLock's, each against its own uncontended op.

Targets are printed as PASS or MISS and never asserted: timing depends on the machine.
Wakeup counts are exact and do not depend on it. What can fail: a lab that cannot start
(see ``labkit.up``), a server that stops answering (the client libraries' errors), a
scenario that does not settle before its deadline (``BenchTimeout``).
"""
from __future__ import annotations

import os
import re
import statistics
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from etcd3 import Etcd3Client, etcdrpc
from etcd3.utils import prefix_range_end

from labkit.bench import peers as bench_peers
from labkit.bench.scale.crowd_handoff import HANDOFF_SCENARIOS, BenchTimeout
from labkit.harness.handoff import hand_off, server_watches, watching_again
from labkit.locks.registry import connections_of, lock_factory
from labkit.stats import summarize, take_turns

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


# ---- uncontended latency -----------------------------------------------------------------
def uncontended_methods(lab: Lab, run_id: str) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """name -> (one acquire + release, cleanup). Each method gets its own connections: the
    recipes and the references (kazoo's Lock, python-etcd3's Lock) come from the registry,
    as every client process makes them; the raw server operations are written out."""
    connections = connections_of(lab)
    methods: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}

    def recipe(label: str, name: str, lock_name: str, **settings: float) -> None:
        methods[label] = bench_peers.lock_cycle(name, connections, lock_name, label, **settings)

    recipe("redis", "redis", f"bench-{run_id}-redis", ttl=10)
    recipe("zookeeper", "zookeeper", f"/bench-{run_id}/zookeeper")

    raw = lab.zookeeper.client()
    raw_path = f"/bench-{run_id}/raw"
    raw.ensure_path(raw_path)

    def raw_zookeeper_ops() -> None:
        # what the recipe needs when nobody else waits: join the queue, look at it, leave
        node = raw.create(f"{raw_path}/{uuid.uuid4().hex}-lock-", ephemeral=True, sequence=True)
        raw.get_children(raw_path)
        raw.delete(node)
    methods["zookeeper raw ops"] = (raw_zookeeper_ops, lambda: (raw.stop(), raw.close()))

    recipe("kazoo Lock", "kazoo", f"/bench-{run_id}/kazoo")
    recipe("etcd", "etcd", f"/bench-{run_id}/etcd", ttl=30)  # long-lived: its lease is granted once

    raw_etcd = lab.etcd.client()
    raw_lease = raw_etcd.lease(600)   # never refreshed: it must outlive the whole run of turns
    methods["etcd raw ops"] = (_raw_etcd_ops(raw_etcd, raw_lease.id, f"/bench-{run_id}/raw-etcd/"),
                               lambda: (raw_etcd.revoke_lease(raw_lease.id), raw_etcd.close()))

    recipe("python-etcd3 Lock", "etcd3-lock", f"bench-{run_id}-etcd3", ttl=10)
    return methods


# ---- the price of a private lab --------------------------------------------------------
AUTH_COST_RECIPES = ("redis", "zookeeper", "etcd")


def connect_methods(lab: Lab) -> dict[str, Callable[[], None]]:
    """A new connection and one request, for each service: where a private lab pays its login
    (Redis AUTH, ZooKeeper's SASL exchange, etcd's Authenticate for a token)."""
    def redis_connect() -> None:
        client = lab.redis.client()
        client.ping()
        client.close()

    def zookeeper_connect() -> None:
        client = lab.zookeeper.client()
        client.exists("/")
        client.stop()
        client.close()

    def etcd_connect() -> None:
        client = lab.etcd.client()
        client.get("/")
        client.close()
    return {"redis": redis_connect, "zookeeper": zookeeper_connect, "etcd": etcd_connect}


def measure_auth_cost(private_lab: Lab, open_lab: Lab, iterations: int, run_id: str) -> dict[str, Any]:
    """The same lock operations (acquire + release, uncontended) and the same connects on a
    private lab and an open one, all taking turns in one run: the difference is what the
    login costs. Printed, never asserted: the numbers depend on the machine."""
    operations: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}
    connects: dict[str, Callable[[], None]] = {}
    for label, lab in (("private", private_lab), ("open", open_lab)):
        for name, (step, cleanup) in uncontended_methods(lab, f"{run_id}-{label}").items():
            if name in AUTH_COST_RECIPES:
                operations[f"{name} {label}"] = (step, cleanup)
            else:
                cleanup()
        connects.update({f"{name} {label}": connect for name, connect in connect_methods(lab).items()})
    try:
        lock_ops = take_turns({name: step for name, (step, _) in operations.items()}, iterations, warm_up=3)
        connect = take_turns(connects, max(5, iterations // 10), warm_up=1)
    finally:
        for _, cleanup in operations.values():
            cleanup()
    results = {}
    for measured, samples in (("lock op", lock_ops), ("connect", connect)):
        rows = {name: summarize(seconds) for name, seconds in samples.items()}
        results[measured] = {name: {"open_p50_ms": rows[f"{name} open"]["p50_ms"],
                                    "private_p50_ms": rows[f"{name} private"]["p50_ms"],
                                    "open_p99_ms": rows[f"{name} open"]["p99_ms"],
                                    "private_p99_ms": rows[f"{name} private"]["p99_ms"]}
                             for name in AUTH_COST_RECIPES}
    return results


def _raw_etcd_ops(client: Etcd3Client, lease_id: int, prefix: str) -> Callable[[], None]:
    """The transaction EtcdMutex sends (queue my key, read the owner) and the delete."""
    key = f"{prefix}{lease_id:x}".encode()
    owner = etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(
        key=prefix.encode(), range_end=prefix_range_end(prefix.encode()), limit=1,
        sort_target=etcdrpc.RangeRequest.CREATE, sort_order=etcdrpc.RangeRequest.ASCEND))
    request = etcdrpc.TxnRequest(
        compare=[etcdrpc.Compare(key=key, target=etcdrpc.Compare.CREATE, result=etcdrpc.Compare.EQUAL,
                                 create_revision=0)],
        success=[etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key, value=b"", lease=lease_id)), owner],
        failure=[etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=key)), owner])

    def step() -> None:
        client.kvstub.Txn(request, client.timeout, credentials=client.call_credentials, metadata=client.metadata)
        client.delete(key)
    return step


def measure_uncontended(lab: Lab, iterations: int, run_id: str, peers: bool = True) -> dict[str, dict[str, Any]]:
    """Every method of ``uncontended_methods`` and, with ``peers``, the libraries of
    ``bench_peers`` (Curator's JVM warmed up first), all taking turns in one run."""
    methods = uncontended_methods(lab, run_id)
    in_jvm: list[float] = []
    try:
        if peers:
            methods.update(bench_peers.peer_methods(lab, run_id, in_jvm, jvm_warm_up=max(50, iterations)))
        samples = take_turns({name: step for name, (step, _) in methods.items()}, iterations, warm_up=3)
        in_jvm = in_jvm[len(in_jvm) - iterations:]   # the cycles the server counts next are not timed
        counted = bench_peers.requests_per_cycle(lab, {name: methods[name][0] for name in bench_peers.COUNTED
                                                       if name in methods}) if peers else {}
    finally:
        for _, cleanup in methods.values():
            cleanup()
    rows = {name: summarize(seconds) for name, seconds in samples.items()} | bench_peers.curator_in_jvm(in_jvm)
    for name, server_side in counted.items():
        rows[name].update(server_side)
    return rows


def measure_etcdctl(lab: Lab, iterations: int, run_id: str) -> dict[str, dict[str, Any]]:
    """``etcdctl lock NAME -- true``: a new process per acquisition. ``etcdctl version``
    (no server contact) measures the process start alone, to subtract by eye."""
    results = {}
    for name, argv in (("etcdctl lock", ("lock", f"bench-{run_id}-etcdctl", "--", "true")),
                       ("etcdctl process start", ("version",))):
        seconds = []
        for _ in range(iterations):
            started = time.perf_counter()
            lab.etcd.etcdctl(*argv, timeout=30)
            seconds.append(time.perf_counter() - started)
        results[name] = summarize(seconds)
    return results


# ---- hand-off and wakeups -------------------------------------------------------------------
def zookeeper_connection_limit(lab: Lab) -> int:
    """maxClientCnxns of the first node (``conf``): connections it accepts from one
    address, 0 for no limit. Every contender here connects from 127.0.0.1."""
    match = re.search(r"^maxClientCnxns=(\d+)", lab.zookeeper.nodes[0].four_letter("conf"), re.MULTILINE)
    return int(match.group(1)) if match else 0


def measure_handoff(lab: Lab, label: str, n: int, releases: int, run_id: str, budget: float = 120.0) -> dict[str, Any]:
    """N contenders on one lock: one holds, N - 1 wait (each its own session and thread).
    Release ``releases`` times, each once the waiters have settled (every one that woke
    waits again: ZooKeeper's watch count, or the etcd waiters' events), and count who
    woke for each release (``wakeups_per_release``): ``labkit.harness.handoff``.
    ``budget``: seconds for each step. Raises BenchTimeout when a step does not happen."""
    result: dict[str, Any] = {"scenario": label, "n": n, "handoffs": 0, "wakeups": []}
    if n < 2:
        result["note"] = "one contender: nothing to hand off"
        return result
    zookeeper = label.startswith("zookeeper")
    if zookeeper:
        limit = zookeeper_connection_limit(lab)
        if limit and n + 2 > limit:  # the probes (mntr) need a connection too
            result["note"] = (f"skipped: ZooKeeper accepts {limit} connections per address (maxClientCnxns) "
                              f"and N={n} sessions all come from 127.0.0.1; set maxClientCnxns=0")
            return result
    recipe = HANDOFF_SCENARIOS[label]
    name = f"/bench-{run_id}/{label.replace(' ', '-')}-{n}"
    # python-etcd3's Lock lease is never refreshed: it must outlive the scenario
    make = lock_factory(recipe, connections_of(lab), name.strip("/") if recipe == "etcd3-lock" else name,
                        ttl=300 if recipe == "etcd3-lock" else 60)
    settled = server_watches(lab.zookeeper) if zookeeper else watching_again
    try:
        run = hand_off(make, n - 1, settled, releases=min(releases, n - 1), timeout=budget)
    except TimeoutError as error:
        raise BenchTimeout(str(error), hint="the machine may be overloaded (try --quick), or another program used "
                                            "this lab meanwhile (run without --attach: the bench starts its own)") from None
    result["wakeups"] = run.wakeups
    result["handoffs"] = len(run.releases)
    latency = summarize(run.latencies)
    result["handoff_p50_ms"], result["handoff_p99_ms"] = latency["p50_ms"], latency["p99_ms"]
    result["first_release_wakeups"] = result["wakeups"][0]
    result["mean_wakeups"] = round(statistics.mean(result["wakeups"]), 2)
    if label == "zookeeper predecessor":   # beside Curator's (bench_peers.curator_handoff_lines)
        result["breakdown_p50_ms"] = bench_peers.handoff_parts(run)
    return result


# ---- targets, report, command line ---------------------------------------------------------
def ratios(uncontended: dict[str, dict[str, Any]]) -> dict[str, float]:
    pairs = {"zookeeper / raw ops": ("zookeeper", "zookeeper raw ops"),
             "zookeeper / kazoo Lock": ("zookeeper", "kazoo Lock"),
             "etcd / raw ops": ("etcd", "etcd raw ops"),
             "etcd / python-etcd3 Lock": ("etcd", "python-etcd3 Lock")}
    return {label: round(uncontended[ours]["p50_ms"] / uncontended[other]["p50_ms"], 3)
            for label, (ours, other) in pairs.items() if ours in uncontended and other in uncontended}


def recipe_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of the recipes (their p50 against the raw operations and the reference
    locks, wakeups per release at the largest N), each with what was measured and whether
    it was met."""
    found = []
    for label, limit in (("zookeeper / raw ops", 1.1), ("zookeeper / kazoo Lock", 1.0),
                         ("etcd / raw ops", 1.1), ("etcd / python-etcd3 Lock", 1.0)):
        if label in results["ratios"]:
            measured = results["ratios"][label]
            met = measured <= limit if limit > 1 else measured < limit
            found.append({"target": f"p50 {label} {'<=' if limit > 1 else '<'} {limit}",
                          "measured": measured, "met": met})
    largest: dict[str, int] = {}
    for row in results["handoff"]:
        if row["handoffs"]:
            largest[row["scenario"]] = max(largest.get(row["scenario"], 0), row["n"])
    for row in results["handoff"]:
        if row["n"] != largest.get(row["scenario"]):
            continue
        herd = row["scenario"] in ("zookeeper parent", "etcd python-etcd3 Lock")
        if herd:
            found.append({"target": f"{row['scenario']}, N={row['n']}: first release wakes N-1 = {row['n'] - 1}",
                          "measured": row["first_release_wakeups"],
                          "met": row["first_release_wakeups"] == row["n"] - 1})
        else:
            found.append({"target": f"{row['scenario']}, N={row['n']}: exactly 1 wakeup per release",
                          "measured": row["wakeups"], "met": set(row["wakeups"]) == {1}})
    return found


def run(lab: Lab, iterations: int = 500, waiter_counts: tuple[int, ...] = (1, 10, 50, 100, 200),
        releases: int = 10, etcdctl_iterations: int = 20, peers: bool = True) -> dict[str, Any]:
    """Everything, on ``lab``; returns the dict that ``--json`` writes. ``peers``: the libraries
    of ``bench_peers`` too (Curator's hand-off among them)."""
    run_id, load = uuid.uuid4().hex[:8], [round(value, 2) for value in os.getloadavg()]
    uncontended = measure_uncontended(lab, iterations, run_id, peers=peers)
    if etcdctl_iterations:
        uncontended.update(measure_etcdctl(lab, etcdctl_iterations, run_id))
    results: dict[str, Any] = {"iterations": iterations, "waiter_counts": list(waiter_counts),
                               "uncontended": uncontended, "ratios": ratios(uncontended) | bench_peers.peer_ratios(uncontended),
                               "handoff": []}
    for label in HANDOFF_SCENARIOS:
        for n in waiter_counts:
            results["handoff"].append(measure_handoff(lab, label, n, releases, run_id))
    if peers and max(waiter_counts) > 1:   # Curator's hand-off at the largest N, beside ZooKeeperLock's
        results["curator_handoff"] = bench_peers.curator_handoffs(lab, max(waiter_counts), releases, run_id,
                                                                  jvm_warm_up=max(50, iterations))
    results["load_average"] = {"start": load, "end": [round(value, 2) for value in os.getloadavg()]}
    results["targets"] = (recipe_targets(results) + bench_peers.peer_targets(results["ratios"])
                          + bench_peers.curator_handoff_targets(results))
    return results


VERDICTS = {True: "PASS", False: "MISS", None: "reported"}   # reported: a number without a target


def report(results: dict[str, Any]) -> str:
    lines = [f"uncontended acquire + release ({results['iterations']} iterations)",
             f"  {'method':<24}{'p50 ms':>10}{'p99 ms':>10}"]
    lines += [f"  {name:<24}{row['p50_ms']:>10.3f}{row['p99_ms']:>10.3f}" for name, row in results["uncontended"].items()]
    if "etcdctl lock" in results["uncontended"]:
        lines.append("  (etcdctl lock starts a process per acquisition: compare with 'etcdctl process start')")
    lines += ["", "ratios of p50"] + [f"  {label:<34}{value:>8.3f}" for label, value in results["ratios"].items()]
    lines += ["", "where Curator's time goes"] + bench_peers.where_curator_time_goes(results["uncontended"])
    lines += ["", "hand-off: N contenders (1 holder, N-1 waiters), wakeups counted per release",
              f"  {'scenario':<26}{'N':>5}{'hand-offs':>11}{'p50 ms':>9}{'p99 ms':>9}{'1st wakes':>11}{'mean':>7}"]
    for row in results["handoff"]:
        if not row["handoffs"]:
            lines.append(f"  {row['scenario']:<26}{row['n']:>5}  {row.get('note', '')}")
            continue
        lines.append(f"  {row['scenario']:<26}{row['n']:>5}{row['handoffs']:>11}{row['handoff_p50_ms']:>9.2f}"
                     f"{row['handoff_p99_ms']:>9.2f}{row['first_release_wakeups']:>11}{row['mean_wakeups']:>7}")
    if "curator_handoff" in results:
        lines += ["", "Curator's hand-off inside one warmed JVM, next to ZooKeeperLock's (same run, same server)"]
        lines += bench_peers.curator_handoff_lines(results)
    if "auth_cost" in results:
        lines += ["", "the price of a private lab (same run, taking turns; p50 / p99 ms)",
                  f"  {'':<22}{'open':>16}{'private':>16}{'p50 +':>9}"]
        for measured, rows in results["auth_cost"].items():
            for name, row in rows.items():
                lines.append(f"  {name + ' ' + measured:<22}{row['open_p50_ms']:>8.3f}/{row['open_p99_ms']:<7.3f}"
                             f"{row['private_p50_ms']:>8.3f}/{row['private_p99_ms']:<7.3f}"
                             f"{row['private_p50_ms'] - row['open_p50_ms']:>+9.3f}")
    lines += ["", "targets"] + [f"  {VERDICTS[t['met']]}  {t['target']}  (measured {t['measured']})"
                                for t in results["targets"]]
    return "\n".join(lines)
