"""The harness of notebook 08 (labkit/lessons/redlock_and_clocks.py) on real servers: the
price of Redlock, a crash it survives, the three double grants, and a wall-clock step on
ZooKeeper and (refused) on etcd. Each experiment must leave the lab as it found it."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.lessons import redlock_and_clocks as lesson  # noqa: E402


@pytest.fixture(scope="module")
def clocked_lab(lab_of):
    """ZooKeeper, etcd, Redis and 5 Redlock instances, each on a clock of its own."""
    return lab_of(zookeeper=1, etcd=1, redis=True, redlock=5, clocks=True)


@pytest.fixture(autouse=True)
def lab_as_found(clocked_lab):
    """After each test: every instance running, every clock on the machine's time."""
    yield
    for node in clocked_lab.redlock.nodes:
        assert node.state == "running", f"{node.name} was left {node.state}"
        assert abs(node.clock.offset) < 0.01, f"{node.name}'s clock was left {node.clock.offset:+.3f} s off"
    assert abs(clocked_lab.zookeeper.nodes[0].clock.offset) < 0.01


def test_redlock_costs_one_set_per_instance(clocked_lab):
    price = lesson.compare_with_set_nx(clocked_lab, rounds=30)
    assert len(price.redlock_ms) == len(price.set_nx_ms) == 30
    assert (price.redlock_sets_per_acquire, price.set_nx_sets_per_acquire) == (5, 1)
    assert price.ratio > 1
    assert set(price.in_seconds()) == {"Redlock on 5", "one SET NX"}


def test_one_crashed_instance_keeps_mutual_exclusion(clocked_lab):
    crash = lesson.survive_one_crash(clocked_lab, crashed="r5", contenders=2, rounds=2)
    assert len(crash.votes) == 4 and all(3 <= len(votes) <= 4 and "r5" not in votes for votes in crash.votes)
    assert crash.verdict.ok and crash.most_inside_at_once == 1


def test_a_clock_step_on_a_majority_grants_twice(clocked_lab):
    run = lesson.clock_step_double_grant(clocked_lab, ttl_ms=10_000, work=0.05)
    assert run.holders == ["bob", "bob", "bob", "alice", "alice"]
    assert run.first_instances == ["r1", "r2", "r3", "r4", "r5"] and run.second_instances == ["r1", "r2", "r3"]
    assert 5 < run.first_validity_left < 10
    assert not run.verdict.ok and [write.client for write in run.writes] == ["alice", "bob", "alice"]
    assert [label for _, _, label in run.periods] == ["r1 r2 r3 clocks +10 s"]
    ax = lesson.plot_double_grant(run)
    assert ax.get_title() == "Redlock granted twice: clock step"


def test_a_restart_without_fsync_grants_twice(clocked_lab):
    run = lesson.restart_double_grant(clocked_lab, ttl_ms=10_000, work=0.05)
    assert run.first_instances == ["r1", "r2", "r3"] and run.second_instances == ["r3", "r4", "r5"]
    assert run.holders == ["alice", "alice", "bob", "bob", "bob"]
    assert run.first_validity_left > 5 and not run.verdict.ok


def test_a_paused_holder_writes_late_and_no_store_can_fence_it(clocked_lab):
    with pytest.raises(ValueError, match="longer than the TTL"):
        lesson.pause_double_grant(clocked_lab, ttl=1.0, pause=1.0)
    run = lesson.pause_double_grant(clocked_lab, ttl=1.0, pause=1.6)
    assert run.first_validity_left < 0  # bob acquired only after client-1's validity was over
    assert [write.client for write in run.writes] == ["client-1", "bob", "client-1"]
    assert all(write.accepted and write.token is None for write in run.writes) and not run.verdict.ok
    fenced = lesson.offer_to_a_fenced_store(clocked_lab, run.writes, run.history)
    assert [write.reason for write in fenced] == ["no fencing token"] * 3
    assert run.history.events(client="client-1", kind="lost")


def test_zookeeper_sessions_ignore_a_wall_clock_step_and_etcd_cannot_be_stepped(clocked_lab):
    step = lesson.zookeeper_session_across_step(clocked_lab, step=30.0, session_timeout=1.5, watch=2.0)
    assert 29 < step.new_node_ctime_ahead < 31
    assert step.node_alive_throughout and step.same_session
    lease = lesson.etcd_lease_countdown(clocked_lab, ttl=5, watch=1.2)
    assert "vDSO" in lease.refusal
    remaining = [value for _, value in lease.samples]
    assert all(a >= b for a, b in zip(remaining, remaining[1:])) and remaining[0] <= 5
    assert abs(lease.counted_down - lease.elapsed) <= 1.5


def test_holders_on_says_down_for_a_stopped_instance(clocked_lab):
    clocked_lab.redlock.nodes[1].kill()
    try:
        assert lesson.holders_on(clocked_lab.redlock, "lock:nobody") == ["-", "down", "-", "-", "-"]
    finally:
        clocked_lab.redlock.nodes[1].start()
        clocked_lab.redlock.nodes[1].wait_ready()
