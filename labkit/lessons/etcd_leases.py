"""Experiments of the etcd lesson (notebook 03) that take more than a few lines.

* ``wait_until``: poll a real condition with a deadline, instead of sleeping a guess.
* ``mutex_contenders`` / ``etcd3_lock_contenders``: factories of locks on one name, each
  with its own connection (and, for the Mutex, its own session and lease).
* ``count_wakeups``: one holder and N waiters hand the lock on, one release at a time,
  so that each release is met by every waiter still waiting; the History it returns
  gives ``wakeups_per_release()`` exactly, whatever the machine's speed.
* ``lease_ids``: the leases the cluster knows (``etcdctl lease list``).

What can fail: ``TimeoutError`` (naming what was awaited) when a waiter does not queue,
acquire or watch again before the deadline; python-etcd3's connection errors when etcd
does not answer; ``subprocess.CalledProcessError`` when etcdctl fails.
"""
from __future__ import annotations

import re
import threading
from typing import Any, Callable

from labkit.record.events import EventSink
from labkit.timing import wait_until
from labkit.record.history import History

# A lock with the recipe contract (docs/RECIPES.md) and what closes its connections.
Contender = tuple[Any, Callable[[], None]]
ContenderFactory = Callable[[str, EventSink], Contender]


def mutex_contenders(etcd: Any, prefix: str, ttl: int = 30) -> ContenderFactory:
    """EtcdMutex contenders on ``prefix`` (``etcd`` is ``lab.etcd``): each its own client,
    session and lease; closing one revokes its lease."""
    from labkit.locks.etcd_mutex import EtcdMutex
    from labkit.locks.etcd_session import EtcdSession

    def make(name: str, on_event: EventSink) -> Contender:
        client = etcd.client()
        session = EtcdSession(client, ttl=ttl)
        return EtcdMutex(session, prefix, identifier=name, on_event=on_event), \
            lambda: (session.close(), client.close())
    return make


def etcd3_lock_contenders(etcd: Any, name: str, ttl: int = 60) -> ContenderFactory:
    """python-etcd3 Lock contenders on ``name``, each its own client. ``ttl`` must outlast
    the experiment: nothing refreshes these leases."""
    from labkit.locks.etcd3_reference import Etcd3ReferenceLock

    def make(identifier: str, on_event: EventSink) -> Contender:
        client = etcd.client()
        return Etcd3ReferenceLock(client, name, ttl=ttl, identifier=identifier, on_event=on_event), client.close
    return make


def _watching_again(history: History, names: list[str]) -> bool:
    # A waiter that woke and lost the race watches again: one more "watch" than "woke".
    return all(len(history.events(client=name, kind="watch")) == len(history.events(client=name, kind="woke")) + 1
               for name in names)


def count_wakeups(make_contender: ContenderFactory, waiters: int, timeout: float = 30.0) -> History:
    """``contender-0`` takes the lock, ``waiters`` more queue (one thread each), then the
    lock is handed on ``waiters`` times. Each holder releases only once every waiter
    still waiting watches again, so that every release meets all of them.

    Returns the History; ``history.wakeups_per_release()`` is the count per release.
    Raises TimeoutError if a step does not happen within ``timeout`` seconds; every
    connection is closed on the way out, also on failure.
    """
    if waiters < 1:
        raise ValueError(f"waiters must be at least 1, got {waiters}")
    history = History()
    names = [f"contender-{number}" for number in range(waiters + 1)]
    contenders: list[Contender] = []
    release_now = {name: threading.Event() for name in names}
    errors: list[BaseException] = []

    def take_turn(lock: Any, name: str) -> None:
        try:
            lock.acquire(timeout=timeout)
            if release_now[name].wait(timeout):
                lock.release()
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    def check(condition: Callable[[], bool], what: str) -> None:
        wait_until(lambda: errors or condition(), what, timeout)
        if errors:
            raise errors[0]

    try:
        for name in names:
            contenders.append(make_contender(name, history.sink(name)))
        contenders[0][0].acquire(timeout=timeout)
        threads = [threading.Thread(target=take_turn, args=(lock, name), daemon=True)
                   for name, (lock, _) in zip(names[1:], contenders[1:])]
        for thread in threads:
            thread.start()
        check(lambda: _watching_again(history, names[1:]), f"{waiters} waiters to watch")
        contenders[0][0].release()
        for handed_on in range(1, waiters + 1):
            check(lambda: len(history.events(kind="acquired")) > handed_on, f"hand-off number {handed_on}")
            holder = history.events(kind="acquired")[-1].client
            still_waiting = [name for name in names if not history.events(client=name, kind="acquired")]
            check(lambda: _watching_again(history, still_waiting), "the other waiters to watch again")
            release_now[holder].set()
        check(lambda: len(history.events(kind="released")) == waiters + 1, "the last release")
        for thread in threads:
            thread.join(timeout)
    finally:
        for name in names:
            release_now[name].set()
        for _, close in reversed(contenders):
            close()
    return history


def lease_ids(etcd: Any) -> set[int]:
    """The ids of the leases the cluster holds now (``etcdctl lease list``)."""
    listing = etcd.etcdctl("lease", "list").stdout
    found = re.search(r"found (\d+) leases", listing)
    if found is None:
        raise ValueError(f"etcdctl lease list printed no count: {listing[:200]!r}")
    ids = {int(line, 16) for line in listing.split()[3:]}
    if len(ids) != int(found.group(1)):
        raise ValueError(f"etcdctl lease list announced {found.group(1)} leases and listed {len(ids)}")
    return ids
