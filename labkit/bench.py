"""The benchmark: what each lock costs, and how many waiters one release wakes.

``python -m labkit.bench [--quick] [--json PATH] [--attach]`` measures on one lab (its own
``labkit.up(zookeeper=1, etcd=1, redis=True)``, or with ``--attach`` the one ``labkit up``
started), prints a table, and writes the same numbers as JSON for the notebooks:

- uncontended acquire + release latency (p50/p99) of every recipe, of the raw server
  operations our recipes are built from, and of the reference recipes (kazoo's Lock,
  python-etcd3's Lock, ``etcdctl lock``); methods take turns, one iteration each in a
  shuffled order, so that a burst of load on the machine hits them all alike;
- hand-off latency (from the holder's release call to the next holder's acquire) and
  wakeups per release, with N contenders (one holder, N - 1 waiters), each a thread with
  its own session: predecessor vs parent watch (ZooKeeper), EtcdMutex vs python-etcd3's
  Lock (etcd).

Targets are printed as PASS or MISS and never asserted: timing depends on the machine.
Wakeup counts are exact and do not depend on it. What can fail: a lab that cannot start
(see ``labkit.up``), a server that stops answering (the client libraries' errors), a
scenario that does not settle before its deadline (``BenchTimeout``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from labkit import bench_network
from labkit.errors import LabError
from labkit.servers.lab import attach, up



class BenchTimeout(LabError):
    """A benchmark scenario did not reach the state it waits for before its deadline."""


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summarize(seconds: list[float]) -> dict[str, Any]:
    milliseconds = [s * 1000 for s in seconds]
    return {"p50_ms": round(statistics.median(milliseconds), 3), "p99_ms": round(percentile(milliseconds, 0.99), 3),
            "samples": len(milliseconds)}


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise BenchTimeout(f"waited {timeout:.0f} s for {what}",
                               hint="the machine may be overloaded (try --quick), or another program used "
                                    "this lab meanwhile (run without --attach: the bench starts its own)")
        time.sleep(poll)


# ---- uncontended latency -----------------------------------------------------------------
def uncontended_methods(lab: Any, run_id: str) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """name -> (one acquire + release, cleanup). Each method gets its own connections."""
    from kazoo.recipe.lock import Lock as KazooLock

    from labkit.locks.etcd_mutex import EtcdMutex
    from labkit.locks.etcd_session import EtcdSession
    from labkit.locks.redis_lock import RedisLock
    from labkit.locks.zookeeper import ZooKeeperLock

    methods: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}

    def closing(*clients: Any) -> Callable[[], None]:
        def close() -> None:
            for client in clients:
                if hasattr(client, "stop"):
                    client.stop()
                client.close()
        return close

    redis_client = lab.redis.client()
    redis_lock = RedisLock(redis_client, f"bench-{run_id}-redis", ttl_ms=10000)
    methods["redis"] = (lambda: (redis_lock.acquire(timeout=5), redis_lock.release()), closing(redis_client))

    ours = lab.zookeeper.client()
    zookeeper_lock = ZooKeeperLock(ours, f"/bench-{run_id}/zookeeper")
    methods["zookeeper"] = (lambda: (zookeeper_lock.acquire(timeout=5), zookeeper_lock.release()), closing(ours))

    raw = lab.zookeeper.client()
    raw_path = f"/bench-{run_id}/raw"
    raw.ensure_path(raw_path)

    def raw_zookeeper_ops() -> None:
        # what the recipe needs when nobody else waits: join the queue, look at it, leave
        node = raw.create(f"{raw_path}/{uuid.uuid4().hex}-lock-", ephemeral=True, sequence=True)
        raw.get_children(raw_path)
        raw.delete(node)
    methods["zookeeper raw ops"] = (raw_zookeeper_ops, closing(raw))

    reference = lab.zookeeper.client()
    kazoo_lock = KazooLock(reference, f"/bench-{run_id}/kazoo")
    methods["kazoo Lock"] = (lambda: (kazoo_lock.acquire(timeout=5), kazoo_lock.release()), closing(reference))

    mutex_client = lab.etcd.client()
    session = EtcdSession(mutex_client, ttl=30)  # long-lived: its lease is granted once
    mutex = EtcdMutex(session, f"/bench-{run_id}/etcd")
    methods["etcd"] = (lambda: (mutex.lock(timeout=5), mutex.unlock()),
                       lambda: (session.close(), mutex_client.close()))

    raw_etcd = lab.etcd.client()
    raw_lease = raw_etcd.lease(30)
    methods["etcd raw ops"] = (_raw_etcd_ops(raw_etcd, raw_lease.id, f"/bench-{run_id}/raw-etcd/"),
                               lambda: (raw_etcd.revoke_lease(raw_lease.id), raw_etcd.close()))

    etcd3_client = lab.etcd.client()
    etcd3_lock = etcd3_client.lock(f"bench-{run_id}-etcd3", ttl=10)
    methods["python-etcd3 Lock"] = (lambda: (etcd3_lock.acquire(timeout=5), etcd3_lock.release()),
                                    closing(etcd3_client))
    return methods


def _raw_etcd_ops(client: Any, lease_id: int, prefix: str) -> Callable[[], None]:
    """The transaction EtcdMutex sends (queue my key, read the owner) and the delete."""
    from etcd3 import etcdrpc
    from etcd3.utils import prefix_range_end

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


def measure_uncontended(lab: Any, iterations: int, run_id: str) -> dict[str, dict[str, Any]]:
    methods = uncontended_methods(lab, run_id)
    samples: dict[str, list[float]] = {name: [] for name in methods}
    # One iteration of each method per round, in a new random order every round: a client
    # library's threads keep working for a moment after a call returns, and in a fixed
    # order that cost would always land on the same next method.
    order = random.Random(0)
    names = list(methods)
    try:
        for step, _ in methods.values():  # warm-up: connections, first node of each path
            for _ in range(3):
                step()
        for _ in range(iterations):
            order.shuffle(names)
            for name in names:
                started = time.perf_counter()
                methods[name][0]()
                samples[name].append(time.perf_counter() - started)
    finally:
        for _, cleanup in methods.values():
            cleanup()
    return {name: summarize(seconds) for name, seconds in samples.items()}


def measure_etcdctl(lab: Any, iterations: int, run_id: str) -> dict[str, dict[str, Any]]:
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
QUIET = 0.2  # etcd says nothing when every watcher is armed; we wait for the events to stop
Contender = tuple[Any, Callable[[], None]]  # (lock, close its session)


def zookeeper_watch_count(lab: Any) -> int:
    """Watches the ZooKeeper servers hold right now, summed over the nodes. ``mntr``'s
    zk_watch_count counts data and child watches; ``wchs`` counts only data watches."""
    import re

    from labkit.servers.zookeeper import four_letter
    total = 0
    for host_port in lab.zookeeper.hosts.split(","):
        host, port = host_port.rsplit(":", 1)
        match = re.search(r"^zk_watch_count\s+(\d+)", four_letter(host, int(port), "mntr"), re.MULTILINE)
        total += int(match.group(1)) if match else 0
    return total


def zookeeper_connection_limit(lab: Any) -> int:
    """maxClientCnxns of the first node (``conf``): connections it accepts from one
    address, 0 for no limit. Every contender here connects from 127.0.0.1."""
    import re

    from labkit.servers.zookeeper import four_letter
    host, port = lab.zookeeper.hosts.split(",")[0].rsplit(":", 1)
    match = re.search(r"^maxClientCnxns=(\d+)", four_letter(host, int(port), "conf"), re.MULTILINE)
    return int(match.group(1)) if match else 0


def handoff_scenarios(lab: Any, run_id: str) -> dict[str, tuple[Callable[..., Contender], Callable[..., Callable]]]:
    """label -> (contender factory(name, on_event), settle factory(history, baseline))."""
    from labkit.locks.etcd3_reference import Etcd3ReferenceLock
    from labkit.locks.etcd_mutex import EtcdMutex
    from labkit.locks.etcd_session import EtcdSession
    from labkit.locks.zookeeper import ZooKeeperLock

    def zookeeper(watch: str) -> Callable[..., Contender]:
        def make(path: str, name: str, on_event: Callable) -> Contender:
            client = lab.zookeeper.client()
            return (ZooKeeperLock(client, path, identifier=name, watch=watch, on_event=on_event),
                    lambda: (client.stop(), client.close()))
        return make

    def etcd_mutex(prefix: str, name: str, on_event: Callable) -> Contender:
        client = lab.etcd.client()
        session = EtcdSession(client, ttl=60)
        return EtcdMutex(session, prefix, identifier=name, on_event=on_event), lambda: (session.close(), client.close())

    def etcd3_lock(name_of_lock: str, name: str, on_event: Callable) -> Contender:
        client = lab.etcd.client()
        # its lease is never refreshed: it must outlive the scenario
        return Etcd3ReferenceLock(client, name_of_lock.strip("/"), ttl=300, identifier=name,
                                  on_event=on_event), client.close

    def exact_watch_count(history: Any, baseline: int) -> Callable[[int], None]:
        # every waiter that woke has set its next watch once the server counts one per waiter
        def settle(waiters: int) -> None:
            wait_until(lambda: zookeeper_watch_count(lab) == baseline + waiters, 60,
                       f"ZooKeeper to count {waiters} watches")
        return settle

    def quiet(history: Any, baseline: int) -> Callable[[int], None]:
        def settle(waiters: int) -> None:
            seen, since = len(history), time.monotonic()
            deadline = since + 60
            while time.monotonic() - since < QUIET:
                if time.monotonic() > deadline:
                    raise BenchTimeout("the waiters kept producing events for 60 s")
                time.sleep(0.01)
                if len(history) != seen:
                    seen, since = len(history), time.monotonic()
        return settle

    return {"zookeeper predecessor": (zookeeper("predecessor"), exact_watch_count),
            "zookeeper parent": (zookeeper("parent"), exact_watch_count),
            "etcd EtcdMutex": (etcd_mutex, quiet),
            "etcd python-etcd3 Lock": (etcd3_lock, quiet)}


def measure_handoff(lab: Any, label: str, n: int, releases: int, run_id: str, budget: float = 600.0) -> dict[str, Any]:
    """N contenders on one lock: one holds, N - 1 wait (each its own session and thread).
    Release ``releases`` times; after each hand-off wait until the waiters have settled
    (every one that woke is waiting again), then count who woke for that release."""
    from labkit.record.history import History

    result: dict[str, Any] = {"scenario": label, "n": n, "handoffs": 0, "wakeups": []}
    if n < 2:
        result["note"] = "one contender: nothing to hand off"
        return result
    if label.startswith("zookeeper"):
        limit = zookeeper_connection_limit(lab)
        if limit and n + 2 > limit:  # the probes (mntr) need a connection too
            result["note"] = (f"skipped: ZooKeeper accepts {limit} connections per address (maxClientCnxns) "
                              f"and N={n} sessions all come from 127.0.0.1; set maxClientCnxns=0")
            return result
    make, settle_factory = handoff_scenarios(lab, run_id)[label]
    path = f"/bench-{run_id}/{label.replace(' ', '-')}-{n}"
    history = History()
    baseline = zookeeper_watch_count(lab) if label.startswith("zookeeper") else 0
    settle = settle_factory(history, baseline)
    contenders: list[Contender] = []
    waiters: list[threading.Thread] = []
    release_now: dict[str, threading.Event] = {}
    closing = threading.Event()  # set at teardown: whoever holds then leaves without releasing
    try:
        for number in range(n):
            name = f"contender-{number}"
            contenders.append(make(path, name, history.sink(name)))
            release_now[name] = threading.Event()
        contenders[0][0].acquire(timeout=30)

        def take_turn(lock: Any, name: str) -> None:
            try:
                lock.acquire(timeout=budget)
            except Exception:
                return  # the teardown closed this waiter's session before its turn came
            if release_now[name].wait(budget) and not closing.is_set():
                lock.release()

        for number, (lock, _) in enumerate(contenders[1:], start=1):
            waiter = threading.Thread(target=take_turn, args=(lock, f"contender-{number}"), daemon=True)
            waiter.start()
            waiters.append(waiter)
        wait_until(lambda: len({e.client for e in history.events(kind="watch")}) >= n - 1, budget,
                   f"{n - 1} waiters to queue")
        settle(n - 1)
        windows = []
        holder = "contender-0"
        for number in range(min(releases, n - 1)):
            started = time.time()
            if number == 0:
                contenders[0][0].release()
            else:
                release_now[holder].set()
            acquired = history.wait_for("acquired", count=number + 2, timeout=budget)[number + 1]
            settle(n - 2 - number)
            windows.append((holder, started, acquired.time, time.time()))
            holder = acquired.client
    finally:
        closing.set()
        for event in release_now.values():
            event.set()
        with etcd3_watch_teardown_errors_ignored():
            close_all([close for _, close in reversed(contenders)])
            deadline = time.monotonic() + 10
            for waiter in waiters:  # each ends when its session closes under it
                waiter.join(max(0.0, deadline - time.monotonic()))
    wakes = history.events(kind="woke")
    result["wakeups"] = [len({e.client for e in wakes if start <= e.time <= end and e.client != releaser})
                         for releaser, start, _, end in windows]
    result["handoffs"] = len(windows)
    latency = summarize([acquired - start for _, start, acquired, _ in windows])
    result["handoff_p50_ms"], result["handoff_p99_ms"] = latency["p50_ms"], latency["p99_ms"]
    result["first_release_wakeups"] = result["wakeups"][0]
    result["mean_wakeups"] = round(statistics.mean(result["wakeups"]), 2)
    return result


@contextlib.contextmanager
def etcd3_watch_teardown_errors_ignored() -> Iterator[None]:
    """python3-etcd3 0.13 starts a watch thread that dies with "Channel closed" when a
    python-etcd3 Lock waiter retries on a client we are closing on purpose. Hide only
    those tracebacks, only while closing; every other thread error is still printed."""
    previous = threading.excepthook

    def hook(arguments: Any) -> None:
        name = arguments.thread.name if arguments.thread is not None else ""
        if not (name.startswith("etcd3_watch") and arguments.exc_type in (ValueError, NameError)):
            previous(arguments)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def close_all(closers: list[Callable[[], None]]) -> None:
    """Close sessions in parallel: one after another, a parent-watch herd would re-check
    the whole queue after every single close."""
    threads = [threading.Thread(target=_quietly, args=(close,), daemon=True) for close in closers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def _quietly(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception as error:  # a session already gone is what we wanted
        print(f"(closing a bench session: {error!r})", file=sys.stderr)


# ---- targets, report, command line ---------------------------------------------------------
def ratios(uncontended: dict[str, dict[str, Any]]) -> dict[str, float]:
    pairs = {"zookeeper / raw ops": ("zookeeper", "zookeeper raw ops"),
             "zookeeper / kazoo Lock": ("zookeeper", "kazoo Lock"),
             "etcd / raw ops": ("etcd", "etcd raw ops"),
             "etcd / python-etcd3 Lock": ("etcd", "python-etcd3 Lock")}
    return {label: round(uncontended[ours]["p50_ms"] / uncontended[other]["p50_ms"], 3)
            for label, (ours, other) in pairs.items() if ours in uncontended and other in uncontended}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with what was measured and whether it was met."""
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


def run(lab: Any, iterations: int = 500, waiter_counts: tuple[int, ...] = (1, 10, 50, 100, 200),
        releases: int = 10, etcdctl_iterations: int = 20) -> dict[str, Any]:
    """Everything, on ``lab``; returns the dict that ``--json`` writes."""
    run_id = uuid.uuid4().hex[:8]
    uncontended = measure_uncontended(lab, iterations, run_id)
    if etcdctl_iterations:
        uncontended.update(measure_etcdctl(lab, etcdctl_iterations, run_id))
    results: dict[str, Any] = {"iterations": iterations, "waiter_counts": list(waiter_counts),
                               "uncontended": uncontended, "ratios": ratios(uncontended), "handoff": []}
    for label in ("zookeeper predecessor", "zookeeper parent", "etcd EtcdMutex", "etcd python-etcd3 Lock"):
        for n in waiter_counts:
            results["handoff"].append(measure_handoff(lab, label, n, releases, run_id))
    results["targets"] = targets(results)
    return results


def report(results: dict[str, Any]) -> str:
    lines = [f"uncontended acquire + release ({results['iterations']} iterations)",
             f"  {'method':<24}{'p50 ms':>10}{'p99 ms':>10}"]
    lines += [f"  {name:<24}{row['p50_ms']:>10.3f}{row['p99_ms']:>10.3f}" for name, row in results["uncontended"].items()]
    if "etcdctl lock" in results["uncontended"]:
        lines.append("  (etcdctl lock starts a process per acquisition: compare with 'etcdctl process start')")
    lines += ["", "ratios of p50"] + [f"  {label:<28}{value:>8.3f}" for label, value in results["ratios"].items()]
    lines += ["", "hand-off: N contenders (1 holder, N-1 waiters), wakeups counted per release",
              f"  {'scenario':<26}{'N':>5}{'hand-offs':>11}{'p50 ms':>9}{'p99 ms':>9}{'1st wakes':>11}{'mean':>7}"]
    for row in results["handoff"]:
        if not row["handoffs"]:
            lines.append(f"  {row['scenario']:<26}{row['n']:>5}  {row.get('note', '')}")
            continue
        lines.append(f"  {row['scenario']:<26}{row['n']:>5}{row['handoffs']:>11}{row['handoff_p50_ms']:>9.2f}"
                     f"{row['handoff_p99_ms']:>9.2f}{row['first_release_wakeups']:>11}{row['mean_wakeups']:>7}")
    lines += ["", "targets"] + [f"  {'PASS' if t['met'] else 'MISS'}  {t['target']}  (measured {t['measured']})"
                                for t in results["targets"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations, N = 1, 10, 50")
    parser.add_argument("--tiny", action="store_true", help="a smoke run for tests: N <= 5, a few iterations")
    parser.add_argument("--attach", action="store_true", help="use the lab `labkit up` started")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--network", action="store_true",
                        help="only what the network fault proxy costs (labkit/bench_network.py)")
    options = parser.parse_args(argv)
    if options.network:
        return bench_network.main(iterations=20 if options.tiny else 50 if options.quick else 200)
    # kazoo warns about every connection the teardown closes on purpose
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    if options.tiny:
        settings = {"iterations": 10, "waiter_counts": (1, 3, 5), "releases": 4, "etcdctl_iterations": 2}
    elif options.quick:
        settings = {"iterations": 200, "waiter_counts": (1, 10, 50), "releases": 5, "etcdctl_iterations": 10}
    else:
        settings = {}
    lab = attach() if options.attach else up(zookeeper=1, etcd=1, redis=True, quiet=True)
    try:
        results = run(lab, **settings)
    finally:
        if not options.attach:
            lab.down()
    print(report(results))
    if options.json:
        with open(options.json, "w") as output:
            json.dump(results, output, indent=2)
        print(f"\nwrote {options.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
