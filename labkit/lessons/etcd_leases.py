"""Experiments of the etcd lesson (notebook 03) that take more than a few lines.

* ``wait_until`` (``labkit.timing``'s): poll a real condition with a deadline, instead of
  sleeping a guess.
* ``mutex_contenders`` / ``etcd3_lock_contenders``: factories of locks on one name, each
  with its own connection (and, for the Mutex, its own session and lease): the
  registry's ``lock_factory``.
* ``count_etcd_wakeups``: one holder and N waiters hand the lock on, one release at a time,
  so that each release is met by every waiter still waiting; the History it returns
  gives ``wakeups_per_release()`` exactly, whatever the machine's speed.
* ``lease_ids``: the leases the cluster knows (``etcdctl lease list``).

What can fail: ``TimeoutError`` (naming what was awaited) when a waiter does not queue,
acquire or watch again before the deadline; python-etcd3's connection errors when etcd
does not answer; ``subprocess.CalledProcessError`` when etcdctl fails.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from labkit.harness.handoff import hand_off, watching_again
from labkit.locks.registry import LockFactory, connection_of, lock_factory
from labkit.record.history import History
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.services.etcd import EtcdService

# wait_until is labkit.timing's: the lesson's notebooks import it from here
__all__ = ["count_etcd_wakeups", "etcd3_lock_contenders", "lease_ids", "mutex_contenders", "wait_until"]


def mutex_contenders(etcd: EtcdService, prefix: str, ttl: int = 30) -> LockFactory:
    """EtcdMutex contenders on ``prefix`` (``etcd`` is ``lab.etcd``): each its own client,
    session and lease; closing one revokes its lease."""
    return lock_factory("etcd", {"etcd": connection_of(etcd)}, prefix, ttl=ttl)


def etcd3_lock_contenders(etcd: EtcdService, name: str, ttl: int = 60) -> LockFactory:
    """python-etcd3 Lock contenders on ``name``, each its own client. ``ttl`` must outlast
    the experiment: nothing refreshes these leases."""
    return lock_factory("etcd3-lock", {"etcd": connection_of(etcd)}, name, ttl=ttl)


def count_etcd_wakeups(make_contender: LockFactory, waiters: int, timeout: float = 30.0) -> History:
    """``contender-0`` takes the lock, ``waiters`` more queue (one thread each), then the
    lock is handed on ``waiters`` times (``labkit.harness.handoff``). Each holder releases
    only once every waiter still waiting watches again, so that every release meets all
    of them.

    Returns the History; ``history.wakeups_per_release()`` is the count per release.
    Raises TimeoutError if a step does not happen within ``timeout`` seconds; every
    connection is closed on the way out, also on failure.
    """
    return hand_off(make_contender, waiters, watching_again, timeout=timeout).history


def lease_ids(etcd: EtcdService) -> set[int]:
    """The ids of the leases the cluster holds now (``etcdctl lease list``)."""
    listing = etcd.etcdctl("lease", "list").stdout
    found = re.search(r"found (\d+) leases", listing)
    if found is None:
        raise ValueError(f"etcdctl lease list printed no count: {listing[:200]!r}")
    ids = {int(line, 16) for line in listing.split()[3:]}
    if len(ids) != int(found.group(1)):
        raise ValueError(f"etcdctl lease list announced {found.group(1)} leases and listed {len(ids)}")
    return ids
