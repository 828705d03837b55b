"""The scale benchmark in miniature (N = 20 over 2 worker processes), so that the
multi-process harness cannot rot: exact wakeup counts, the server's counters, the JSON and
the plots, and nothing left behind. Timing is the machine's business: no assert on it."""
import json
import math
import os
import re
import subprocess
import sys

import pytest

from labkit.bench import scale as bench_scale
from labkit.bench.scale.crowd_handoff import HANDOFF_SCENARIOS
from labkit.clients.crowd import Crowd, CrowdError, running
from labkit.locks.errors import LockTimeout
from labkit.locks.registry import connections_of, etcd_client_for, etcd_mutex_on

N = 20
NUMBER = r"(\d+(?:\.\d+)?)"
HERDS = ("zookeeper parent", "etcd python-etcd3 Lock")


@pytest.fixture(scope="module")
def tiny_run(lab):
    return bench_scale.run(lab, **bench_scale.SCALE_SETTINGS["tiny"])


def worker_pids() -> set[int]:
    """Every crowd worker process of this test session still running."""
    listing = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())], capture_output=True, text=True)
    return {int(line.split()[0]) for line in listing.stdout.splitlines() if "labkit.clients.crowd_worker" in line}


@pytest.mark.slow
def test_wakeups_per_release_are_exact_over_worker_processes(tiny_run):
    rows = {row["scenario"]: row for row in tiny_run["handoff"]}
    assert set(rows) == set(HANDOFF_SCENARIOS)
    for scenario, row in rows.items():
        assert "error" not in row, row
        assert row["n"] == N and row["workers"] == 2
        if scenario in HERDS:   # every release wakes every waiter still queued
            assert row["wakeups"] == [N - 1 - number for number in range(row["handoffs"])] and row["handoffs"] == 3
        else:
            assert row["wakeups"] == [1] * 10 and row["handoffs"] == 10
        assert 0 < row["handoff_p50_ms"] <= row["handoff_p99_ms"]
        # each hand-off timed from the release's start and from its reply, on one clock
        assert row["handoff_from_reply_p50_ms"] <= row["handoff_p50_ms"]


def test_the_server_counts_the_herd(tiny_run):
    cost = {row["scenario"]: row["server_per_release"] for row in tiny_run["handoff"]}
    # a predecessor release fires one watcher; a herd release fires one per waiter
    assert cost["zookeeper predecessor"]["watchers_fired"] == 1
    assert cost["zookeeper parent"]["watchers_fired"] >= N - 3
    assert cost["zookeeper parent"]["packets_sent"] > cost["zookeeper predecessor"]["packets_sent"]
    assert cost["etcd EtcdMutex"]["watch_events"] == 1
    assert cost["etcd python-etcd3 Lock"]["watch_events"] >= N - 3
    for scenario, row in cost.items():
        # deltas of counters that only grow, over the release: never negative, never NaN (a
        # server that did not answer would read as 0, and its counter seem to go back)
        assert all(0 <= value < math.inf for value in row.values()), (scenario, row)
        if scenario.startswith("zookeeper"):
            # each fired watch is a notification packet, and the delete itself is answered
            assert row["packets_sent"] >= row["watchers_fired"] + 1, (scenario, row)
        else:
            assert row["watch_messages"] >= 1 and row["fsync_ms"] > 0, (scenario, row)   # a delete is a WAL entry


def test_each_hand_off_is_cut_into_its_parts_in_the_clients_and_at_the_server(tiny_run):
    for row in tiny_run["handoff"]:
        parts = row["breakdown_p50_ms"]
        assert set(parts) == {"release call", "release call to next holder woke", "woke to acquired"}, row["scenario"]
        # each part is the time between two stamps of one hand-off, the later caused by the
        # earlier (a reply, a watch firing, an acquire): strictly positive. The wake-up lies
        # between the release's start and the next acquire, so the two parts around it are
        # each at most their hand-off, and their p50 (a sample) at most the slowest hand-off
        # (the p99 of fewer than 100 samples, nearest rank)
        assert all(0 < value < math.inf for value in parts.values()), (row["scenario"], parts)
        assert row["handoffs"] < 100, row
        for part in ("release call to next holder woke", "woke to acquired"):
            assert parts[part] <= row["handoff_p99_ms"], (row["scenario"], part, parts, row["handoff_p99_ms"])
        assert "fsync_ms" in row["server_per_release"], row["scenario"]   # the server's own disk time
    assert "where a hand-off's time goes" in bench_scale.report(tiny_run)


def test_nothing_is_left_behind(tiny_run):
    assert all(row["left_behind"] == [] for row in tiny_run["handoff"])
    assert all(row["left_behind"] == [] for row in tiny_run["throughput"]["recipes"])
    assert worker_pids() == set()


def test_throughput_sits_next_to_the_measured_limits(tiny_run):
    throughput = tiny_run["throughput"]
    assert throughput["limits"]["fdatasync"]["per_second"] > 0 and throughput["limits"]["loopback"]["per_second"] > 0
    for row in throughput["recipes"]:
        assert row["acquisitions"] > 0 and row["ratio_to_limit"] > 0


def test_report_json_and_plots(tiny_run, tmp_path):
    printed = bench_scale.report(tiny_run)
    verdicts = [line for line in printed.splitlines() if line.strip().startswith(("PASS", "MISS"))]
    assert [line.split()[0] for line in verdicts] == ["PASS" if t["met"] else "MISS" for t in tiny_run["targets"]]
    ratios = 0
    for line in verdicts:   # a ratio target's verdict is its printed ratio against its limit
        found = re.search(rf"hand-off p50 <= {NUMBER}x .*\({NUMBER} ms\)\s+\(measured {NUMBER} ms = {NUMBER}x\)", line)
        if found:
            ratios += 1
            limit, alone, p50, ratio = (float(value) for value in found.groups())
            assert 0 < alone < math.inf and 0 < p50 < math.inf, line
            # the ratio is of the unrounded p50s; the printed ones are rounded to 0.005 ms
            low, high = (p50 - 0.005) / (alone + 0.005), (p50 + 0.005) / max(alone - 0.005, 1e-9)
            assert low - 0.005 <= ratio <= high + 0.005, line
            assert line.split()[0] == ("PASS" if ratio <= limit else "MISS"), line
    assert ratios >= 2, verdicts   # at least the two predecessor recipes' hand-off targets
    wakeup_targets = [t for t in tiny_run["targets"] if "wakeup" in t["target"] or "wakes" in t["target"]]
    assert len(wakeup_targets) == 4 and all(t["met"] for t in wakeup_targets)
    # the second yardstick (each op after a quiet spell) is printed next to the targets, not as one
    assert set(tiny_run["uncontended_after_quiet"]) == set(tiny_run["uncontended"])
    assert "(not a target)" in printed
    saved = tmp_path / "scale.json"
    saved.write_text(json.dumps(tiny_run))
    figure = bench_scale.load_and_plot(saved, save=tmp_path / "scale.png")
    assert len(figure.axes) == 2 and (tmp_path / "scale.png").stat().st_size > 10_000


def test_a_worker_that_cannot_start_is_reported_and_cleaned_up(lab):
    connections = {**connections_of(lab), "etcd": "127.0.0.1:1"}   # nothing listens there
    with pytest.raises(CrowdError) as raised:
        Crowd(connections, "etcd", "/scale-test/nowhere", n=2, workers=2, start_timeout=60)
    assert "exited" in str(raised.value) or "did not" in str(raised.value)
    assert worker_pids() == set()


def test_a_crowd_closes_every_session_and_worker(lab, zk, unique_name):
    path = f"/scale-test{unique_name}"
    with Crowd(connections_of(lab), "zookeeper", path, n=6, workers=2) as crowd:
        pids = crowd.pids
        assert len(pids) == 2 and running(pids) == pids
        crowd.lock_factory()("contender-3", lambda kind, **detail: None).lock.acquire(timeout=30)
        assert len(zk.get_children(path)) == 1
        assert [event.client for event in crowd.history.events(kind="acquired")] == ["contender-3"]
    assert running(pids) == []
    assert zk.get_children(path) == []   # the holder's session was closed: its node is gone


def test_etcd_sessions_share_one_client_each_with_its_own_lease(lab, unique_name):
    # how a crowd worker holds its etcd contenders: one client, many sessions (leases)
    client = etcd_client_for(connections_of(lab), "etcd")
    try:
        first, second = (etcd_mutex_on(client, unique_name, name, ttl=10) for name in ("first", "second"))
        assert first.session()["lease_id"] != second.session()["lease_id"]
        first.lock.acquire(timeout=10)
        with pytest.raises(LockTimeout):
            second.lock.acquire(timeout=0.5)
        first.close()   # revokes the first lease only: the lock is free, the client still works
        second.lock.acquire(timeout=10)
        assert second.lock.contenders() == [second.lock.key]
        second.close()
        assert list(client.get_prefix(unique_name)) == []
    finally:
        client.close()
