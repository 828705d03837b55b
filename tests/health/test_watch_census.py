"""What a ZooKeeper server counts while clients queue for a lock (labkit/health/watch_census.py),
on a ZooKeeper of this module's own (its mntr and wchc count only these clients) with real
client processes: with the predecessor recipe each waiter's session watches exactly the node
ahead of its own, a different one each, mntr counts one watch and one ephemeral node a
contender, and the lock is then handed to every waiter; with the parent recipe mntr counts
one child watch a waiter, wchc lists none of them, and the first release wakes them all; the
plot draws a bar for each row of each census. Lesson 06 runs the same on its lab."""
from __future__ import annotations

import matplotlib
import pytest

from labkit.clients import spawn_clients
from labkit.health.watch_census import ROWS, parent_watch_census, predecessor_watch_census, watch_census_plot

CLIENTS = 4
SESSION_TIMEOUT = 4.0


@pytest.fixture(scope="module")
def census_lab(lab_of):
    return lab_of(zookeeper=1, etcd=0, redis=False)


@pytest.mark.slow   # 4 client processes: 8-9 s on the shared 2-core machine
def test_each_predecessor_waiter_watches_the_node_ahead_of_its_own(census_lab):
    lock = "/locks/census-predecessor"
    observer = census_lab.zookeeper.client()
    try:
        with spawn_clients(census_lab, "zookeeper", n=CLIENTS, name=lock, session_timeout=SESSION_TIMEOUT) as group:
            census = predecessor_watch_census(census_lab, list(group), group.history, observer, lock)
            waiters = [client.name for client in group][1:]
            assert sorted(census.watched) == sorted(waiters) == sorted(census.predecessor)
            for waiter in waiters:
                assert census.watched[waiter] == [census.predecessor[waiter]], census
            assert len(set(census.predecessor.values())) == CLIENTS - 1
            assert len(census.contenders) == CLIENTS and census.predecessor[waiters[0]].startswith(lock + "/")
            assert int(census.mntr["zk_watch_count"]) == CLIENTS - 1
            assert int(census.mntr["zk_ephemerals_count"]) == CLIENTS
            assert census.counts() == dict(zip(ROWS, (CLIENTS - 1, CLIENTS - 1, CLIENTS - 1, 0)))
            assert sorted(group.history.acquisition_order()) == sorted(client.name for client in group), \
                "the lock was handed to every waiter"
    finally:
        observer.stop()
        observer.close()


@pytest.mark.slow
def test_parent_waiters_hold_child_watches_wchc_does_not_list_and_one_release_wakes_all(census_lab):
    herd = parent_watch_census(census_lab, clients=CLIENTS, session_timeout=SESSION_TIMEOUT)
    assert herd.waiters == CLIENTS - 1
    assert herd.kinds == {"data": 0, "child": CLIENTS - 1} and herd.listed == 0
    assert herd.woken_by_first_release == CLIENTS - 1
    assert herd.counts() == dict(zip(ROWS, (CLIENTS - 1, CLIENTS - 1, 0, CLIENTS - 1)))


@pytest.mark.no_servers
def test_the_plot_has_a_bar_for_each_row_of_each_census():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    censuses = {"predecessor watch": dict(zip(ROWS, (3, 3, 3, 0))), "parent watch": dict(zip(ROWS, (5, 5, 0, 5)))}
    figure = watch_census_plot(censuses)
    try:
        [ax] = figure.axes
        heights = [[bar.get_height() for bar in container] for container in ax.containers]
        assert heights == [[3, 3, 3, 0], [5, 5, 0, 5]]
        assert [label.get_text() for label in ax.get_xticklabels()] == list(ROWS)
        assert ax.get_title().startswith("5 waiters") and [t.get_text() for t in ax.get_legend().get_texts()] == list(censuses)
    finally:
        plt.close(figure)
