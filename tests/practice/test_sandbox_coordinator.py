"""The sandbox's server side (labkit/practice/sandbox_coordinator.py), the part of ZooKeeper
the lock recipe touches, held in memory: names that count every child ever created, a
cversion that counts creates and deletes, children in sequence order whatever their prefix,
one-shot watches (one per client and node) whose notifications queue in the order they
fired, and a closed session taking its nodes and its watches with it. ZooKeeper's own answers
to the same questions: tests/practice/test_zookeeper_sequence.py. Pure logic: no server."""
from __future__ import annotations

import pytest

from labkit.practice.sandbox_coordinator import PARENT, Coordinator, Notification, Release

pytestmark = pytest.mark.no_servers


def test_the_suffix_counts_every_child_ever_created_and_the_cversion_deletes_too():
    zk = Coordinator()
    first, second = zk.create_sequential("s1"), zk.create_sequential("s2")
    assert (first, second) == ("lock-0000000000", "lock-0000000001")
    zk.delete(first)
    assert zk.create_sequential("s3") == "lock-0000000002", "a delete leaves no gap to fill"
    assert zk.cversion == 4 and zk.creations == 3   # 3 creates + 1 delete; 3 names handed out
    assert zk.parent == PARENT and zk.owner_of == {"lock-0000000001": "s2", "lock-0000000002": "s3"}


def test_children_sort_by_their_sequence_whatever_their_prefix():
    zk = Coordinator()
    names = [zk.create_sequential("s1", prefix="zz-"), zk.create_sequential("s2", prefix="aa-"),
             zk.create_sequential("s3", prefix="mm-")]
    assert zk.children() == names == ["zz-0000000000", "aa-0000000001", "mm-0000000002"]
    assert sorted(names) != names, "by name the order would differ"


def test_a_node_watch_fires_once_and_one_client_holds_one_watch_per_node():
    zk = Coordinator()
    holder = zk.create_sequential("holder")
    zk.watch_node(holder, "waiter")
    zk.watch_node(holder, "waiter")            # the same client and path: still one watch
    release = Release("holder", holder, "released")
    zk.delete(holder, release)
    assert list(zk.pending) == [Notification("waiter", holder, holder, "deleted", release)]
    assert holder not in zk.node_watchers, "a fired watch is gone"


def test_a_parent_watch_fires_on_the_next_change_only():
    zk = Coordinator()
    zk.watch_parent("herd-1")
    zk.watch_parent("herd-2")
    zk.watch_parent("herd-1")
    made = zk.create_sequential("s1")
    zk.create_sequential("s2")               # nobody watches any more: one-shot
    assert [(n.client, n.watched, n.node, n.change) for n in zk.pending] == [
        ("herd-1", "parent", made, "created"), ("herd-2", "parent", made, "created")]
    assert zk.parent_watchers == []


def test_notifications_wait_in_the_order_they_fired():
    zk = Coordinator()
    a, b = zk.create_sequential("a"), zk.create_sequential("b")
    zk.watch_node(a, "b")
    zk.watch_parent("c")
    zk.delete(a)
    # the node watch fires before the parent's change, as the delete happens
    assert [(n.client, n.watched) for n in zk.pending] == [("b", a), ("c", "parent")]
    zk.watch_node(b, "c")
    zk.delete(b)
    assert [(n.client, n.watched) for n in zk.pending] == [("b", a), ("c", "parent"), ("c", b)]


def test_a_closed_session_takes_its_nodes_and_its_watches_with_it():
    zk = Coordinator()
    holder, waiter = zk.create_sequential("holder"), zk.create_sequential("waiter")
    zk.watch_node(holder, "waiter")
    zk.watch_parent("waiter")
    zk.watch_node(waiter, "third")
    expired = Release("waiter", waiter, "session expired")
    zk.close_session("waiter", expired)
    assert zk.children() == [holder]
    assert zk.node_watchers == {holder: []} and zk.parent_watchers == [], "the closed session watches nothing"
    assert list(zk.pending) == [Notification("third", waiter, waiter, "deleted", expired)]
    zk.delete(holder)
    assert len(zk.pending) == 1, "the closed session's watch on the holder never fires"
