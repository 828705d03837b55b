"""What the fault proxy costs when no fault is on: ``labkit bench --network``.

Three numbers, printed as PASS or MISS against the targets and never asserted (timing
depends on the machine):

- startup of a 3 ZooKeeper + 3 etcd + 2 Redis lab with ``network=True`` (target <= 2 s),
  the median of a few starts taking turns with the same lab without a network (printed
  beside it: the difference is what the network costs; the rest is the JVMs' and the
  election's, and a loaded machine stretches both);
- the latency one proxied hop adds: Redis PING through a client's own link vs direct, on
  the same lab (target: added p50 <= 0.1 ms);
- a lock op (acquire + release) on a 3-node ensemble, every link proxied (peers and the
  client) vs a lab without a network (target: p50 ratio <= 1.25), for ZooKeeper and etcd.

Methods take turns in a shuffled order, so that a burst of load hits them alike. What can
fail: a lab that cannot start (see ``labkit.up``), a server that stops answering.
"""
from __future__ import annotations

import logging
import random
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from labkit.locks.registry import connections_of, make_lock
from labkit.servers.lab import up
from labkit.stats import percentile, take_turns

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

TARGETS = {"startup_s": 2.0, "added_per_hop_ms": 0.1, "lock_ratio": 1.25}


def _p50s_ms(methods: dict[str, Callable[[], Any]], iterations: int) -> dict[str, float]:
    """p50 in ms of each method, taking turns (``labkit.stats.take_turns``)."""
    return {name: round(1000 * percentile(seconds, 0.5), 3)
            for name, seconds in take_turns(methods, iterations, order=random.Random()).items()}


def _lock_ops(lab: Lab, via: str | None, run_id: str) -> tuple[dict[str, Callable[[], None]], list]:
    """A ZooKeeper and an etcd lock op through ``via``'s links (direct when None): the
    registry's recipes on connections of their own."""
    connections = connections_of(lab, via)
    handles = {label: make_lock(recipe, connections, f"/bench-network/{run_id}", "bench", ttl=10)
               for label, recipe in (("zookeeper lock op", "zookeeper"), ("etcd lock op", "etcd"))}
    ops = {label: (lambda lock=handle.lock: (lock.acquire(), lock.release())) for label, handle in handles.items()}
    return ops, [handle.close for handle in handles.values()]


def _close(closers: list) -> None:
    for close in closers:
        close()


LAB = {"zookeeper": 3, "etcd": 3, "redis": True, "replica": True, "quiet": True}


def _startup_seconds(network: bool) -> float:
    """Seconds until ``up`` returns a ready lab (stopping it is not counted)."""
    began = time.monotonic()
    with up(**LAB, network=network):
        return time.monotonic() - began


def run(iterations: int = 200, startups: int = 3) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    results: dict[str, Any] = {"iterations": iterations, "startups": startups}
    starts: dict[str, list[float]] = {"network": [], "direct": []}
    shuffle = random.Random()
    for _ in range(startups):   # in turns, like take_turns, but timing only up() (not the stop)
        for name in shuffle.sample(list(starts), 2):
            starts[name].append(_startup_seconds(name == "network"))
    results["startup_samples_s"] = {name: [round(seconds, 2) for seconds in samples] for name, samples in starts.items()}
    results["startup_s"] = round(percentile(starts["network"], 0.5), 2)
    results["startup_direct_s"] = round(percentile(starts["direct"], 0.5), 2)
    with up(**LAB, network=True) as lab:
        direct, proxied = lab.redis.client(), lab.redis.client(via="bench-client")
        try:
            ping = _p50s_ms({"direct": direct.ping, "proxied": proxied.ping}, iterations * 5)
        finally:
            direct.close()
            proxied.close()
        results["ping_ms"] = ping
        results["added_per_hop_ms"] = round(ping["proxied"] - ping["direct"], 3)
        methods, closers = _lock_ops(lab, "bench-client", run_id)
        try:
            results["proxied_ms"] = _p50s_ms(methods, iterations)
        finally:
            _close(closers)
    with up(**LAB) as lab:
        methods, closers = _lock_ops(lab, None, run_id)
        try:
            results["direct_ms"] = _p50s_ms(methods, iterations)
        finally:
            _close(closers)
    results["lock_ratio"] = {name: round(results["proxied_ms"][name] / results["direct_ms"][name], 3)
                             for name in results["direct_ms"]}
    return results


def network_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    found = [{"target": f"startup of a 3+3+2 lab with network=True <= {TARGETS['startup_s']} s",
              "measured": results["startup_s"], "met": results["startup_s"] <= TARGETS["startup_s"]},
             {"target": f"added p50 per proxied hop <= {TARGETS['added_per_hop_ms']} ms",
              "measured": results["added_per_hop_ms"],
              "met": results["added_per_hop_ms"] <= TARGETS["added_per_hop_ms"]}]
    for name, ratio in results["lock_ratio"].items():
        found.append({"target": f"{name}, 3 nodes, every link proxied / direct <= {TARGETS['lock_ratio']}",
                      "measured": ratio, "met": ratio <= TARGETS["lock_ratio"]})
    return found


def report(results: dict[str, Any]) -> str:
    lines = [f"network proxy ({results['iterations']} iterations)",
             f"  startup, 3 ZooKeeper + 3 etcd + 2 Redis (median of {results['startups']}): "
             f"{results['startup_s']:.2f} s with network=True, {results['startup_direct_s']:.2f} s without "
             f"(the network: {results['startup_s'] - results['startup_direct_s']:+.2f} s; "
             f"samples {results['startup_samples_s']})",
             f"  Redis PING p50: direct {results['ping_ms']['direct']:.3f} ms, "
             f"through one proxy {results['ping_ms']['proxied']:.3f} ms",
             f"  {'lock op (acquire + release)':<30}{'direct ms':>10}{'proxied ms':>12}{'ratio':>8}"]
    for name, ratio in results["lock_ratio"].items():
        lines.append(f"  {name:<30}{results['direct_ms'][name]:>10.3f}{results['proxied_ms'][name]:>12.3f}{ratio:>8.3f}")
    lines += ["", "targets"] + [f"  {'PASS' if t['met'] else 'MISS'}  {t['target']}  (measured {t['measured']})"
                                for t in network_targets(results)]
    return "\n".join(lines)


def main(iterations: int = 200) -> int:
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    print(report(run(iterations)))
    return 0
