"""``labkit bench --processes`` in miniature (N = 4 contender processes per row, on 3 ZooKeeper
+ 3 etcd), so that the six-way hand-off cannot rot: every row is there, every hand-off is
positive and in order, the wakeups are counted at the server and nothing is left running.
Timing is the machine's business: the targets are judged by a pure function, tested here
with numbers, never with the run's."""
import os
import subprocess

import pytest

import labkit
from labkit.bench import processes as bench_processes
from labkit.bench.processes.targets import (CURATOR, ETCD_MUTEX, GO_MUTEX, HANDOFF_ROWS, KAZOO, PYTHON_ETCD3,
                                            TARGET_VERDICTS, ZOOKEEPER_LOCK, missed_breakdown, process_targets,
                                            report)

N = 4


def row(label, handoff_ms, wakeups=None, parts=None):
    return {"row": label, "n": N, "handoffs": len(handoff_ms), "handoff_ms": handoff_ms,
            "wakeups": wakeups or [1] * len(handoff_ms), "breakdown_p50_ms": parts or {"release call": 0.5}}


def rows_with(zookeeper=2.0, kazoo=2.0, curator=2.0, etcd=2.0, go=2.0, zookeeper_wakeups=None, etcd_wakeups=None):
    """Rows whose every hand-off takes the given ms (so the p50 is that number)."""
    return {ZOOKEEPER_LOCK: row(ZOOKEEPER_LOCK, [zookeeper] * 3, zookeeper_wakeups), KAZOO: row(KAZOO, [kazoo] * 3),
            CURATOR: row(CURATOR, [curator] * 3), ETCD_MUTEX: row(ETCD_MUTEX, [etcd] * 3, etcd_wakeups),
            PYTHON_ETCD3: row(PYTHON_ETCD3, [3.0] * 3, [3, 2, 1]), GO_MUTEX: row(GO_MUTEX, [go] * 3)}


def verdicts(rows):
    return {target["target"]: target["met"] for target in process_targets(rows)}


@pytest.mark.no_servers
@pytest.mark.parametrize("zookeeper, curator, met", [(2.4, 2.0, True), (2.41, 2.0, False), (1.0, 2.0, True)])
def test_zookeeper_lock_may_take_up_to_1_2_times_curators_hand_off(zookeeper, curator, met):
    found = verdicts(rows_with(zookeeper=zookeeper, curator=curator, kazoo=10.0))
    assert found[f"hand-off p50: {ZOOKEEPER_LOCK} <= 1.2 x {CURATOR}"] is met


@pytest.mark.no_servers
@pytest.mark.parametrize("zookeeper, kazoo, met", [(2.0, 2.0, True), (2.02, 2.0, False), (1.5, 2.0, True)])
def test_zookeeper_lock_may_take_no_longer_than_kazoos_hand_off(zookeeper, kazoo, met):
    found = verdicts(rows_with(zookeeper=zookeeper, kazoo=kazoo, curator=10.0))
    assert found[f"hand-off p50: {ZOOKEEPER_LOCK} <= 1.0 x {KAZOO}"] is met


@pytest.mark.no_servers
@pytest.mark.parametrize("etcd, go, met", [(3.6, 3.0, True), (3.7, 3.0, False)])
def test_etcd_mutex_may_take_up_to_1_2_times_gos_hand_off(etcd, go, met):
    assert verdicts(rows_with(etcd=etcd, go=go))[f"hand-off p50: {ETCD_MUTEX} <= 1.2 x {GO_MUTEX}"] is met


@pytest.mark.no_servers
@pytest.mark.parametrize("wakeups, met", [([1, 1, 1], True), ([1, 2, 1], False), ([1, 0, 1], False)])
def test_labkits_recipes_must_wake_exactly_one_waiter_per_release(wakeups, met):
    found = verdicts(rows_with(zookeeper_wakeups=wakeups, etcd_wakeups=wakeups))
    assert found[f"{ZOOKEEPER_LOCK}: exactly 1 wakeup per release (at the server)"] is met
    assert found[f"{ETCD_MUTEX}: exactly 1 wakeup per release (at the server)"] is met


@pytest.mark.no_servers
@pytest.mark.parametrize("raw, baseline, met", [(10.0, 5.0, True), (10.0, 5.01, None)])
def test_the_go_target_is_not_judged_when_its_baseline_is_over_half_the_raw_hand_off(raw, baseline, met):
    rows = rows_with(etcd=2.0)
    rows[GO_MUTEX].update(raw_handoff_ms=[raw] * 3, baseline_ms=[baseline] * 9, baseline_p50_ms=baseline,
                          handoff_ms=[round(raw - baseline, 3)] * 3)
    target = next(t for t in process_targets(rows) if t["target"].endswith(GO_MUTEX))
    assert target["met"] is met
    assert (met is None) == target["measured"].startswith("not judged")


@pytest.mark.no_servers
def test_a_row_not_measured_leaves_its_targets_unjudged():
    rows = rows_with()
    rows[CURATOR] = {"row": CURATOR, "n": N, "handoffs": 0, "handoff_ms": [], "note": "Curator cannot run here"}
    targets = {target["target"]: target for target in process_targets(rows)}
    curator = targets[f"hand-off p50: {ZOOKEEPER_LOCK} <= 1.2 x {CURATOR}"]
    assert curator["met"] is None and curator["measured"] == "Curator cannot run here"
    assert targets[f"hand-off p50: {ZOOKEEPER_LOCK} <= 1.0 x {KAZOO}"]["met"] is True


@pytest.mark.no_servers
def test_the_breakdown_is_printed_for_the_targets_that_miss_and_only_those():
    rows = rows_with(zookeeper=3.0, kazoo=2.0, curator=2.9)
    rows[ZOOKEEPER_LOCK]["breakdown_p50_ms"] = {"release call": 1.25, "woke to acquired": 0.75}
    lines = missed_breakdown(rows, process_targets(rows))
    assert lines[0].startswith(f"  MISS hand-off p50: {ZOOKEEPER_LOCK} <= 1.0 x {KAZOO}")
    assert any("release call 1.25, woke to acquired 0.75" in line for line in lines)
    assert not any(CURATOR in line for line in lines)   # 3.0 <= 1.2 x 2.9: met, no breakdown
    assert missed_breakdown(rows_with(), process_targets(rows_with())) == []


@pytest.fixture(scope="module")
def tiny_run():
    with labkit.up(zookeeper=3, etcd=3, quiet=True) as lab:
        lines = []
        results = bench_processes.run(lab, N, say=lines.append, seed=7)
        yield results, lines


@pytest.mark.slow
@pytest.mark.curator("the Curator row of labkit bench --processes")
def test_every_row_hands_the_lock_on_in_order(tiny_run):
    results, _ = tiny_run
    assert set(results["rows"]) == set(HANDOFF_ROWS)
    for label, measured in results["rows"].items():
        assert measured["n"] == N and measured["handoffs"] == N - 1, label
        spans = measured["spans"]
        for began, started in spans:   # the next holder starts after the holder began to let go
            assert started > began, (label, spans)
        for (_, started), (next_began, _) in zip(spans, spans[1:]):   # and holds before it lets go in turn
            assert next_began > started, (label, spans)
        assert len(measured["wakeups"]) == N - 1, label
    text = report(results)
    for label in HANDOFF_ROWS:
        assert label in text
    # each target judged from the rows it names (the pure function tested above) and each
    # printed verdict its target's (PASS, MISS, or ---- where Go's baseline swamps its hand-off)
    assert results["targets"] == process_targets(results["rows"])
    printed = text.split("\ntargets\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert printed == [f"  {TARGET_VERDICTS[t['met']]:<5} {t['target']}  (measured {t['measured']})"
                       for t in results["targets"]]


@pytest.mark.slow
@pytest.mark.curator("the Curator row of labkit bench --processes")
def test_the_server_counts_one_wakeup_per_release_for_the_predecessor_watches(tiny_run):
    results, _ = tiny_run
    for label in (ZOOKEEPER_LOCK, KAZOO, CURATOR, ETCD_MUTEX, GO_MUTEX):
        assert results["rows"][label]["wakeups"] == [1] * (N - 1), label
    # python-etcd3's waiters all watch the holder's key: its first release wakes every one
    assert results["rows"][PYTHON_ETCD3]["wakeups"][0] >= N - 1


@pytest.mark.slow
@pytest.mark.curator("the Curator row of labkit bench --processes")
def test_the_go_row_subtracts_a_baseline_measured_in_turns(tiny_run):
    go = tiny_run[0]["rows"][GO_MUTEX]
    assert len(go["baseline_ms"]) == 3 * (N - 1) and all(sample > 0 for sample in go["baseline_ms"])
    assert all(raw > 0 for raw in go["raw_handoff_ms"])
    assert [round(raw - go["baseline_p50_ms"], 3) for raw in go["raw_handoff_ms"]] == go["handoff_ms"]


@pytest.mark.slow
@pytest.mark.curator("the Curator row of labkit bench --processes")
def test_progress_is_shown_while_the_processes_start_and_nothing_is_left_running(tiny_run):
    _, lines = tiny_run
    assert any(f"{CURATOR}: {N}/{N} JVMs up" in line for line in lines)
    assert any(f"{ZOOKEEPER_LOCK}: {N}/{N} processes up" in line for line in lines)
    assert any(f"{GO_MUTEX}: {N}/{N} processes queued" in line for line in lines)
    children = subprocess.run(["ps", "-o", "args=", "--ppid", str(os.getpid())], capture_output=True, text=True).stdout
    assert not [line for line in children.splitlines()
                if "crowd_worker" in line or "CuratorPeer" in line or " lock " in line], children
