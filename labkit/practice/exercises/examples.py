"""Solutions for the exercises: one right answer each, and the classic mistakes.

The notebook shows the right ones as templates to edit; the wrong ones show what the
checker catches. Each wrong solution differs from the right one in one place, marked
"MISTAKE".
"""
from __future__ import annotations

import threading

from labkit.locks.errors import SessionExpired


# ---- ZooKeeper: acquire(client, lock_path) -> my_node, release(client, my_node) ---------------
def zookeeper_acquire(client, lock_path):
    """The recipe: ephemeral sequential node; lowest holds; else watch the predecessor, re-check."""
    my_node = client.create(f"{lock_path}/lock-", ephemeral=True, sequence=True, makepath=True)
    my_name = my_node.rsplit("/", 1)[1]
    while True:
        queue = sorted(client.get_children(lock_path), key=lambda name: name[-10:])
        if my_name not in queue:          # the server deleted it: my session expired
            raise SessionExpired(f"{my_node} is gone: my session expired; start a new session")
        position = queue.index(my_name)
        if position == 0:
            return my_node
        woke = threading.Event()
        if client.exists(f"{lock_path}/{queue[position - 1]}", watch=lambda event: woke.set()):
            woke.wait()
        # back to the top: re-check, because the predecessor may have died without holding


def zookeeper_release(client, my_node):
    client.delete(my_node)


def parent_watch_acquire(client, lock_path):
    my_node = client.create(f"{lock_path}/lock-", ephemeral=True, sequence=True, makepath=True)
    my_name = my_node.rsplit("/", 1)[1]
    while True:
        queue = sorted(client.get_children(lock_path), key=lambda name: name[-10:])
        if my_name not in queue:
            raise SessionExpired(f"{my_node} is gone: my session expired; start a new session")
        if queue[0] == my_name:
            return my_node
        woke = threading.Event()
        client.get_children(lock_path, watch=lambda event: woke.set())   # MISTAKE: watches the parent
        woke.wait()


def no_recheck_acquire(client, lock_path):
    my_node = client.create(f"{lock_path}/lock-", ephemeral=True, sequence=True, makepath=True)
    my_name = my_node.rsplit("/", 1)[1]
    queue = sorted(client.get_children(lock_path), key=lambda name: name[-10:])
    position = queue.index(my_name)
    if position == 0:
        return my_node
    woke = threading.Event()
    if client.exists(f"{lock_path}/{queue[position - 1]}", watch=lambda event: woke.set()):
        woke.wait()
    return my_node                        # MISTAKE: "my predecessor is gone, so it is my turn"


def not_ephemeral_acquire(client, lock_path):
    my_node = client.create(f"{lock_path}/lock-", ephemeral=False, sequence=True,   # MISTAKE: outlives the session
                            makepath=True)
    my_name = my_node.rsplit("/", 1)[1]
    while True:
        queue = sorted(client.get_children(lock_path), key=lambda name: name[-10:])
        if my_name not in queue:
            raise SessionExpired(f"{my_node} is gone")
        position = queue.index(my_name)
        if position == 0:
            return my_node
        woke = threading.Event()
        if client.exists(f"{lock_path}/{queue[position - 1]}", watch=lambda event: woke.set()):
            woke.wait()


ZOOKEEPER_RIGHT = (zookeeper_acquire, zookeeper_release)
ZOOKEEPER_WRONG = {
    "parent watch": (parent_watch_acquire, zookeeper_release),
    "no re-check": (no_recheck_acquire, zookeeper_release),
    "not ephemeral": (not_ephemeral_acquire, zookeeper_release),
}


# ---- etcd: wait_for_turn(etcd, prefix, my_revision) ------------------------------------------
def etcd_wait_for_turn(etcd, prefix, my_revision):
    """Go's waitDeletes: wait on the youngest key older than mine; when it goes, look again."""
    while True:
        ahead = [entry for entry in etcd.queue(prefix) if entry.create_revision < my_revision]
        if not ahead:
            return                        # nobody older than me is left: my turn
        etcd.wait_for_delete(ahead[-1].key)
        # back to the top: the key that went may have been a waiter that left, not the holder


def etcd_watch_the_holder(etcd, prefix, my_revision):
    while True:
        ahead = [entry for entry in etcd.queue(prefix) if entry.create_revision < my_revision]
        if not ahead:
            return
        etcd.wait_for_delete(ahead[0].key)   # MISTAKE: everyone watches the holder's key: a herd


def etcd_no_recheck(etcd, prefix, my_revision):
    ahead = [entry for entry in etcd.queue(prefix) if entry.create_revision < my_revision]
    if ahead:
        etcd.wait_for_delete(ahead[-1].key)
    # MISTAKE: returns without looking again


ETCD_RIGHT = etcd_wait_for_turn
ETCD_WRONG = {"watch the holder": etcd_watch_the_holder, "no re-check": etcd_no_recheck}
