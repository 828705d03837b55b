"""The helpers of the ZooKeeper lesson: exact wakeup counts, watches as the server lists
them, a kill right after a heartbeat, the naive lock's orphan and the sequence diagram."""
from __future__ import annotations

import threading

import matplotlib
import pytest

from labkit.record.checker import check_fifo
from labkit.clients import spawn_clients
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.lessons.zookeeper_recipe import (LosesFirstCreateReply, NaiveLock, count_zookeeper_wakeups, kill_just_after_heartbeat,
                                      packets_received, sequence_diagram, watchers_of)

from helpers import DEADLINE, wait_until

matplotlib.use("Agg")


@pytest.mark.parametrize("recipe, expected", [("predecessor", [1, 1, 1]), ("kazoo", [1, 1, 1]),
                                              ("parent", [3, 2, 1])])
def test_count_wakeups_is_exact_for_each_recipe(lab, unique_name, recipe, expected):
    history = count_zookeeper_wakeups(lab.zookeeper, unique_name, waiters=3, recipe=recipe)
    assert history.wakeups_per_release() == expected
    verdict = check_fifo(history)
    assert verdict.ok, verdict.explain()
    assert len(history.events(kind="released")) == 4


def test_count_wakeups_refuses_bad_arguments():
    with pytest.raises(ValueError, match="at least 1"):
        count_zookeeper_wakeups(None, "/nowhere", waiters=0)
    with pytest.raises(ValueError, match="not one of"):
        count_zookeeper_wakeups(None, "/nowhere", waiters=2, recipe="sibling")


def test_watch_count_and_watchers_of_see_a_data_watch_until_it_fires(lab, zk, unique_name):
    zk.create(unique_name, b"watched")
    server = lab.zookeeper.nodes[0]
    before = server.watch_count()
    fired = threading.Event()
    zk.exists(unique_name, watch=lambda event: fired.set())
    assert watchers_of(lab.zookeeper, unique_name) == {zk.client_id[0]}
    assert server.watch_count() == before + 1
    zk.delete(unique_name)
    assert fired.wait(DEADLINE)
    assert watchers_of(lab.zookeeper, unique_name) == set()   # a watch fires once, then it is gone
    assert server.watch_count() == before


def test_packets_received_counts_a_session_and_knows_no_stranger(lab, zk):
    first = packets_received(lab.zookeeper, zk.client_id[0])
    zk.exists("/")
    assert first is not None and packets_received(lab.zookeeper, zk.client_id[0]) > first
    assert packets_received(lab.zookeeper, 0x7EADBEEF) is None


@pytest.mark.slow
def test_a_holder_killed_after_a_heartbeat_blocks_the_lock_for_a_whole_session_timeout(lab, unique_name):
    timeout = 1.0
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, session_timeout=timeout) as (holder, waiter):
        holder.acquire(timeout=DEADLINE)
        waiting = waiter.send("acquire", timeout=DEADLINE)
        killed_at = kill_just_after_heartbeat(holder, lab.zookeeper)
        assert holder.wait_for_state("dead", timeout=DEADLINE) == "dead"
        waiter.wait_reply(waiting, timeout=DEADLINE)
        acquired = holder.group.history.events(client=waiter.name, kind="acquired")[0].time
        # the server heard from the holder just before the kill: it waits the whole timeout
        # (the poll that saw the heartbeat may lag it by a few milliseconds)
        assert timeout - 0.25 <= acquired - killed_at <= timeout + 2.0
        waiter.release()


def test_naive_lock_waits_behind_the_orphan_its_lost_create_left(lab, zk, unique_name):
    unlucky_client = LosesFirstCreateReply(hosts=lab.zookeeper.hosts, timeout=4.0)
    unlucky_client.start(timeout=15)
    try:
        unlucky = NaiveLock(unlucky_client, unique_name)
        assert not unlucky.acquire(timeout=0.5)               # nobody holds the lock, yet it cannot
        orphan = unlucky_client.lost_replies[0].rsplit("/", 1)[1]
        assert zk.get_children(unique_name) == [orphan]         # its own node is gone, the orphan stays
        _, stat = zk.get(f"{unique_name}/{orphan}")
        assert stat.ephemeralOwner == unlucky_client.client_id[0]
    finally:
        unlucky_client.stop()
        unlucky_client.close()
    assert zk.get_children(unique_name) == []                  # the session took the orphan with it


def test_zookeeper_lock_finds_the_node_of_its_lost_create(lab, unique_name):
    client = LosesFirstCreateReply(hosts=lab.zookeeper.hosts, timeout=4.0)
    client.start(timeout=15)
    try:
        lock = ZooKeeperLock(client, unique_name)
        lock.acquire(timeout=DEADLINE)
        assert f"{unique_name}/{lock.node}" == client.lost_replies[0]
        assert client.get_children(unique_name) == [lock.node]
        lock.release()
    finally:
        client.stop()
        client.close()


def test_naive_lock_works_when_nothing_goes_wrong(zk, lab, unique_name):
    other = lab.zookeeper.client(timeout=4.0)
    try:
        first, second = NaiveLock(zk, unique_name), NaiveLock(other, unique_name)
        assert first.acquire(timeout=5)
        outcome = []
        waiter = threading.Thread(target=lambda: outcome.append(second.acquire(timeout=DEADLINE)))
        waiter.start()
        wait_until(lambda: second.node is not None, "the second lock to queue")
        assert not outcome
        first.release()
        waiter.join(DEADLINE)
        assert outcome == [True]
        second.release()
    finally:
        other.stop()
        other.close()


def test_sequence_diagram_draws_one_arrow_per_message_in_time_order():
    steps = [(2.0, "ZooKeeper", "B", "notify"), (1.0, "A", "ZooKeeper", "create"), (3.0, "B", "B", "think")]
    ax = sequence_diagram(steps, ["A", "ZooKeeper", "B"], highlight=lambda message: message == "notify")
    messages = [text.get_text() for text in ax.texts if text.get_text() in ("create", "notify", "think")]
    assert messages == ["create", "notify", "think"]
    arrows = [child for child in ax.get_children() if type(child).__name__ == "Annotation"]
    assert len(arrows) == 2
    assert ax.get_legend() is not None and ax.get_title()


def test_sequence_diagram_names_a_lane_it_does_not_know():
    with pytest.raises(ValueError, match="Mallory"):
        sequence_diagram([(1.0, "A", "Mallory", "psst")], ["A", "ZooKeeper"])
    with pytest.raises(ValueError, match="no steps"):
        sequence_diagram([], ["A"])
