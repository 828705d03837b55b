"""Transactions and order in the etcd lesson (labkit/lessons/etcd_order.py), on real etcd.
On the session lab's member: with every worker reading before any writes (a barrier), the
plain get/put of a round adds one whatever the number of workers, and compare-and-swap adds
one per worker, exactly one of them without a conflict each round. On a 3-member cluster of
this module's own: the Mutex's tokens grow in acquisition order through every member; a write
that starts after another returned has the higher revision, read through a third member; the
members' views converge; with two members frozen, a member still answers a serializable read
and refuses a linearizable one, then answers again once they thaw. The plots draw what they
are given."""
from __future__ import annotations

import contextlib

import matplotlib
import pytest

from labkit.lessons.etcd_order import (cas_increment, count_with, counter_plots, member_views, plain_increment,
                                       take_turns_through_members, without_quorum, write_in_real_time_order)
from labkit.locks.etcd_session import EtcdSession
from labkit.timing import wait_until

WORKERS, ROUNDS = 3, 4


@pytest.fixture
def workers(lab):
    clients = [lab.etcd.client() for _ in range(WORKERS)]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def test_a_plain_read_modify_write_loses_all_but_one_update_a_round(workers, unique_name):
    total, attempts = count_with(plain_increment, workers, unique_name, ROUNDS)
    assert total == ROUNDS, "every worker read the same value each round, so they all wrote value + 1"
    assert attempts == [[1] * WORKERS] * ROUNDS
    workers[0].delete(unique_name)


def test_compare_and_swap_keeps_every_update_one_without_a_conflict_a_round(workers, unique_name):
    total, attempts = count_with(cas_increment, workers, unique_name, ROUNDS)
    assert total == WORKERS * ROUNDS
    for round_attempts in attempts:
        assert round_attempts.count(1) == 1, "all compared with the same revision: one wins, the others retry"
    workers[0].delete(unique_name)


@pytest.fixture(scope="module")
def cluster(lab_of):
    return lab_of(zookeeper=0, etcd=3, redis=False)


def test_order_across_the_members_of_a_cluster(cluster):
    with contextlib.ExitStack() as opened:
        def new_session(node=None):
            client = cluster.etcd.client(node=node)
            opened.callback(client.close)
            session = EtcdSession(client, ttl=5)
            opened.callback(session.close)
            return session

        acquisitions = take_turns_through_members(cluster, new_session, "/locks/order", turns=3)
        assert len(acquisitions) == 9 and {member for member, _, _ in acquisitions} == {"etcd1", "etcd2", "etcd3"}
        tokens = [token for _, token, _ in acquisitions]
        assert tokens == sorted(tokens) and len(set(tokens)) == 9, "tokens grow in acquisition order"
        assert all(header >= token for _, token, header in acquisitions)

        clients = {node.name: cluster.etcd.client(node=node) for node in cluster.etcd.nodes}
        for client in clients.values():
            opened.callback(client.close)
        rows = write_in_real_time_order(clients, "/order")
        assert len(rows) == 6 and all(row["second's revision"] > row["first's revision"] for row in rows)
        assert all(row["both read via"] not in (row["first write via"], row["second write via"]) for row in rows)

        wait_until(lambda: len(set(member_views(cluster).values())) == 1, "the members to apply the same", 30)
        [(revision, applied)] = set(member_views(cluster).values())
        assert revision >= max(row["second's revision"] for row in rows) and applied > 0

    writer = cluster.etcd.client()
    try:
        writer.put("/quorum-key", "before the freeze")
    finally:
        writer.close()
    seen = without_quorum(cluster, "/quorum-key")
    assert seen.serializable_value == "before the freeze" and seen.serializable_revision > 0
    assert seen.linearizable_error is not None, "no quorum: a linearizable read cannot be confirmed"
    assert seen.caught_up_after >= 0
    assert all(node.state == "running" for node in cluster.etcd.nodes), "every frozen member was thawed"


@pytest.mark.no_servers
def test_the_counter_plots_draw_what_they_are_given():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2)
    try:
        counter_plots(axes, 12, 4, 12, [[1, 2, 3], [1, 2, 2], [1, 3, 2], [1, 2, 3]], "three workers")
        totals, tries = axes
        assert [bar.get_height() for bar in totals.patches] == [12, 4, 12]
        assert totals.get_title() == "three workers"
        assert [bar.get_height() for bar in tries.patches] == [4, 5, 3], "4 first tries, 5 seconds, 3 thirds"
    finally:
        plt.close(figure)
