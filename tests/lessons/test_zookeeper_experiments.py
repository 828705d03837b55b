"""The many-client experiments of the ZooKeeper lesson (labkit/lessons/zookeeper_experiments.py)
on the session lab's real ZooKeeper: one release wakes one predecessor watcher and every
parent watcher, and the server counts the packets it sent for it; ZooKeeperLock and kazoo's
Lock (as labkit wraps it) sharing one path are never held by two at once, each holder owning
the lowest node; a middle waiter whose session is closed gets SessionExpired, the waiter behind
it re-checks and keeps waiting, and the others are served; mntr_number reads one of mntr's
numbers or says it is not there; the plots draw what they are given."""
from __future__ import annotations

import matplotlib
import pytest

from labkit.lessons.zookeeper_experiments import (herd_cost, middle_waiter_dies, mntr_number, queue_order_plot,
                                                  share_one_path, wakeup_plots)
from labkit.locks.kazoo_reference import KazooReferenceLock
from labkit.locks.zookeeper import ZooKeeperLock

WAITERS = 3


@pytest.mark.parametrize("watch, woken", [("predecessor", 1), ("parent", WAITERS)])
def test_one_release_wakes_one_predecessor_watcher_and_every_parent_watcher(lab, unique_name, watch, woken):
    cost = herd_cost(lab.zookeeper, unique_name, WAITERS, watch=watch)
    assert (cost.watch, cost.waiters, cost.woken) == (watch, WAITERS, woken)
    assert cost.packets_sent >= woken, "at least one notification a woken waiter"
    assert cost.seconds >= 0


def test_locks_of_two_implementations_on_one_path_never_hold_together(lab, zk, unique_name):
    clients = [lab.zookeeper.client() for _ in range(3)]
    try:
        locks = {"ZooKeeperLock 1": ZooKeeperLock(clients[0], unique_name, identifier="one"),
                 "ZooKeeperLock 2": ZooKeeperLock(clients[1], unique_name, identifier="two"),
                 "kazoo's Lock": KazooReferenceLock(clients[2], unique_name, identifier="kazoo")}
        holds, most_inside = share_one_path(locks, zk, unique_name, rounds=2, work=0.01)
        assert most_inside == 1
        assert sorted(label for label, _, _ in holds) == sorted(list(locks) * 2)
        assert all(lowest for _, _, lowest in holds), holds
        sequences = [sequence for _, sequence, _ in holds]
        assert sequences == sorted(sequences), "the lowest node holds: sequence numbers are served in order"
    finally:
        for client in clients:
            client.stop()
            client.close()
        zk.delete(unique_name, recursive=True)


@pytest.mark.slow   # four client processes: ~10 s on the shared 2-core machine
def test_a_middle_waiter_whose_session_is_closed_leaves_the_queue_and_the_rest_are_served(lab, zk, unique_name):
    run = middle_waiter_dies(lab, zk, unique_name, session_timeout=4.0, work=0.05)
    assert run.middle_outcome.startswith("SessionExpired")
    node = {name: path.rsplit("/", 1)[1] for name, path in run.node_of.items()}
    assert run.queue_after_expiry == [node["client-1"], node["client-2"], node["client-4"]]
    assert run.states_after_expiry["client-4"] == "waiting" and run.states_after_expiry["client-1"] == "holding"
    assert run.history.acquisition_order() == ["client-1", "client-2", "client-4"]
    zk.delete(unique_name, recursive=True)


def test_mntr_number_reads_one_number_or_says_it_is_not_there(lab):
    node = lab.zookeeper.nodes[0]
    assert mntr_number(node, "zk_packets_sent") > 0
    with pytest.raises(ValueError, match="without zk_no_such_number"):
        mntr_number(node, "zk_no_such_number")


@pytest.mark.no_servers
def test_the_plots_draw_what_they_are_given():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (order, mean, first) = plt.subplots(1, 3)
    try:
        queue_order_plot(order, ["a", "b", "c"], ["a", "c", "b"])
        measured, diagonal = order.get_lines()
        assert list(measured.get_ydata()) == [1, 3, 2] and list(diagonal.get_xdata()) == [1, 3]
        labels = ["predecessor", "parent", "kazoo"]
        wakeups = {(label, n): ([1] * n if label != "parent" else list(range(n, 0, -1))) for label in labels for n in (2, 4)}
        wakeup_plots((mean, first), wakeups, (2, 4), labels)
        lines = {line.get_label(): list(line.get_ydata()) for line in first.get_lines()}
        assert lines == {"predecessor": [1, 1], "parent": [2, 4], "kazoo": [1, 1]}
        assert mean.get_lines()[2].get_linestyle() == "--"
    finally:
        plt.close(figure)
