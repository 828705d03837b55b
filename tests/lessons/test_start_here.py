"""The first notebook's experiments (labkit/lessons/start_here.py) on the session lab's real
ZooKeeper and etcd: a program that exits without closing leaves its ephemeral node (owned by
its session) and its leased key behind (with a session timeout and a TTL of 30 s, the bound
of "still there"), and one that fails is a CalledProcessError carrying its stderr; the
deletion watch hears both deletions, each after it was made, and refuses a node that is not
there; contenders queued one after another are served first-come on both systems, an unknown
system is refused; and the glossary's numbers are those the servers report for the two held
locks, read here on their own."""
from __future__ import annotations

import subprocess
import time

import pytest

from labkit.lessons.start_here import (DeletionWatch, contender_factory, exit_without_closing, lock_numbers,
                                       serve_in_queue_order)
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.zookeeper import ZooKeeperLock, sequence_of
from labkit.record.history import History

LONG = 30   # seconds a forgotten session and lease live: the bound of "left behind"


@pytest.fixture
def etcd(lab):
    client = lab.etcd.client()
    try:
        yield client
    finally:
        client.close()


def test_a_program_that_exits_without_closing_leaves_its_node_and_key_until_the_servers_end_them(lab, zk, etcd,
                                                                                                unique_name):
    path, key = f"{unique_name}/forgotten", f"{unique_name}/forgotten-key"
    program = exit_without_closing(lab, path, key, session_timeout=LONG, ttl=LONG)
    revoked = False
    try:
        assert program.exit_code == 0 and program.node == path and program.key == key
        assert program.began_at <= program.exited_at
        stat = zk.exists(program.node)
        assert stat is not None and stat.ephemeralOwner == program.session_id, "its session still owns the node"
        value, meta = etcd.get(program.key)
        assert value == b"a program that exits" and meta.lease_id == program.lease_id
        assert etcd.get_lease_info(program.lease_id).TTL > 0, "its lease was not revoked by the exit"
        watch = DeletionWatch(zk, etcd, program.node, program.key)
        before = time.monotonic()
        zk.delete(program.node)                   # what the server does once the session times out
        etcd.revoke_lease(program.lease_id)       # and once the lease runs out
        revoked = True
        deleted_at = watch.wait(timeout=10)
        assert set(deleted_at) == {"ZooKeeper", "etcd"} and all(at >= before for at in deleted_at.values())
        assert etcd.get(program.key)[0] is None
    finally:
        zk.delete(unique_name, recursive=True)
        if not revoked:
            etcd.revoke_lease(program.lease_id)


def test_a_program_that_fails_is_an_error_with_its_stderr(lab, zk, unique_name):
    zk.create(unique_name, ephemeral=True)    # an ephemeral node has no children: the program's create fails
    try:
        with pytest.raises(subprocess.CalledProcessError) as failed:
            exit_without_closing(lab, f"{unique_name}/child", f"{unique_name}/key", session_timeout=LONG, ttl=LONG)
        assert failed.value.returncode != 0 and "NoChildrenForEphemeralsError" in failed.value.stderr
    finally:
        zk.delete(unique_name)


def test_a_deletion_watch_refuses_a_node_that_is_not_there(zk, etcd, unique_name):
    with pytest.raises(AssertionError, match="should exist before it is watched"):
        DeletionWatch(zk, etcd, f"{unique_name}/never-made", f"{unique_name}/key")


@pytest.mark.parametrize("system", ["ZooKeeper", "etcd"])
def test_contenders_that_queue_one_after_another_are_served_in_that_order(lab, system, unique_name):
    history = History()
    make, sessions = contender_factory(lab, system, f"{unique_name}/fifo", history)
    queue = ["carol", "alice", "bob"]
    with sessions:
        serve_in_queue_order(make, "first", queue, history, system)
    assert history.acquisition_order() == [f"{system} {name}" for name in ["first", *queue]]
    assert [event.client for event in history.events(kind="created")][-3:] == [f"{system} {name}" for name in queue]


def test_an_unknown_system_is_refused(lab):
    with pytest.raises(ValueError, match="'ZooKeeper' or 'etcd'"):
        contender_factory(lab, "Redis", "/locks/x", History())


def test_the_glossarys_numbers_are_what_the_servers_report_for_the_held_locks(lab, zk, etcd, unique_name):
    session = EtcdSession(etcd, ttl=10)
    zookeeper_lock = ZooKeeperLock(zk, f"{unique_name}/numbers", identifier="holder")
    etcd_mutex = EtcdMutex(session, f"{unique_name}/numbers", identifier="holder")
    try:
        assert zookeeper_lock.acquire(timeout=10) and etcd_mutex.acquire(timeout=10)
        numbers = lock_numbers(zk, zookeeper_lock, etcd, etcd_mutex)
        node = zk.exists(f"{zookeeper_lock.path}/{zookeeper_lock.node}")
        parent = zk.exists(zookeeper_lock.path)
        _, meta = etcd.get(etcd_mutex.key)
        assert numbers["sequence"] == sequence_of(zookeeper_lock.node) and numbers["czxid"] == node.czxid
        assert (numbers["pzxid"], numbers["cversion"]) == (parent.pzxid, parent.cversion)
        assert numbers["session id"] == zk.client_id[0] and numbers["zxid"] >= node.czxid
        assert numbers["lease id"] == session.lease_id == meta.lease_id
        assert (numbers["create revision"], numbers["mod revision"]) == (meta.create_revision, meta.mod_revision)
        assert numbers["header revision"] >= numbers["mod revision"]
        session.revoke()                      # the key goes with the lease; the Mutex still names it
        with pytest.raises(ValueError, match="no longer holds the lock"):
            lock_numbers(zk, zookeeper_lock, etcd, etcd_mutex)
    finally:
        zookeeper_lock.release()
        session.close()
        zk.delete(unique_name, recursive=True)
