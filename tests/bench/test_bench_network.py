"""What the fault proxy costs (labkit/bench/network.py, ``labkit bench --network``), without
its long run (six lab starts of 3 + 3 + 2 servers): the targets are met at and under their
bounds and missed above, one per lock; the report prints PASS or MISS for each and the
network's share of the startup with its sign; each method is timed as often as asked, taking
turns; and the lock ops, on the session lab's real ZooKeeper and etcd, acquire and release
(the same lock can be taken again, by someone else too) until their connections are closed.
The targets are printed, never asserted: no test here times anything."""
from __future__ import annotations

import uuid

import pytest

from labkit.bench.network import TARGETS, _lock_ops, _p50s_ms, network_targets, report
from labkit.locks.registry import connections_of, make_lock


def results(startup=1.5, added=0.05, ratios=None):
    ratios = ratios or {"zookeeper lock op": 1.1, "etcd lock op": 1.3}
    direct = {name: 2.0 for name in ratios}
    return {"iterations": 200, "startups": 3, "startup_s": startup, "startup_direct_s": 1.2,
            "startup_samples_s": {"network": [startup], "direct": [1.2]}, "ping_ms": {"direct": 0.1, "proxied": 0.1 + added},
            "added_per_hop_ms": added, "direct_ms": direct,
            "proxied_ms": {name: direct[name] * ratio for name, ratio in ratios.items()}, "lock_ratio": ratios}


@pytest.mark.no_servers
def test_a_target_is_met_at_and_under_its_bound_and_missed_above():
    found = network_targets(results(startup=TARGETS["startup_s"], added=TARGETS["added_per_hop_ms"] + 0.001,
                                    ratios={"zookeeper lock op": TARGETS["lock_ratio"], "etcd lock op": 2.0}))
    assert [target["met"] for target in found] == [True, False, True, False]
    assert [target["measured"] for target in found] == [TARGETS["startup_s"], TARGETS["added_per_hop_ms"] + 0.001,
                                                        TARGETS["lock_ratio"], 2.0]
    assert found[2]["target"].startswith("zookeeper lock op") and found[3]["target"].startswith("etcd lock op")


@pytest.mark.no_servers
def test_the_report_says_pass_or_miss_for_each_target_and_the_networks_share():
    text = report(results())
    lines = text.splitlines()
    targets = lines[lines.index("targets") + 1:]
    assert [line.split()[0] for line in targets] == ["PASS", "PASS", "PASS", "MISS"]
    assert "(the network: +0.30 s;" in text and "1.50 s with network=True, 1.20 s without" in text
    assert any(line.split()[-1] == "1.300" and line.strip().startswith("etcd lock op") for line in lines)
    assert "(the network: -0.20 s;" in report(results(startup=1.0))


@pytest.mark.no_servers
def test_each_method_is_timed_as_often_as_asked():
    calls = {"a": 0, "b": 0}

    def count(name):
        calls[name] += 1

    p50s = _p50s_ms({"a": lambda: count("a"), "b": lambda: count("b")}, 25)
    assert calls == {"a": 25, "b": 25} and set(p50s) == {"a", "b"} and all(ms >= 0 for ms in p50s.values())


def test_the_lock_ops_take_and_give_back_the_lock_on_real_servers(lab):
    run_id = uuid.uuid4().hex[:8]
    ops, closers = _lock_ops(lab, None, run_id)
    assert sorted(ops) == ["etcd lock op", "zookeeper lock op"]
    try:
        for op in ops.values():
            op()
            op()          # released: the same lock again
        for label, recipe in (("zookeeper lock op", "zookeeper"), ("etcd lock op", "etcd")):
            other = make_lock(recipe, connections_of(lab), f"/bench-network/{run_id}", "another", ttl=10)
            try:
                assert other.lock.acquire(timeout=10), f"{label} left the lock held"
                other.lock.release()
            finally:
                other.close()
    finally:
        for close in closers:
            close()
