"""Interop on a real etcd: EtcdMutex and Go's Mutex (``etcdctl lock``) exclude each other, and
python-etcd3's Lock (Etcd3ReferenceLock) excludes, fences with the create revision and wakes
every waiter on each release. The fixtures and helpers are test_etcd_mutex's."""
from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from labkit.locks.errors import Locked, LockTimeout
from labkit.locks.etcd3_reference import Etcd3ReferenceLock
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.record.history import History
from labkit.servers.runners.discovery import find_etcdctl

from helpers import DEADLINE, Inside, wait_until
from test_etcd_mutex import etcd, new_session, queue_waiters, stack, unique  # noqa: F401  (fixtures)

# python3-etcd3 0.13's watch thread ends with NameError (a missing `six` import) whenever a
# client that watched is closed. It is its bug, not ours: keep it out of the report.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception in thread etcd3_watch:pytest.PytestUnhandledThreadExceptionWarning")


# -- interop with Go's Mutex (etcdctl lock) --------------------------------------------
@contextlib.contextmanager
def etcdctl_lock(etcd, name: str):
    """``etcdctl lock NAME`` in the background: it prints its key once it holds the lock and
    unlocks when interrupted. Yields a queue that receives its output lines."""
    argv = [find_etcdctl(), "--endpoints", ",".join(etcd.endpoints), "lock", name]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=etcd.etcdctl_environment())
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.strip()) for line in process.stdout], daemon=True)
    reader.start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # etcdctl unlocks and revokes on SIGINT
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=5)


def test_our_mutex_waits_while_etcdctl_holds(etcd, stack):
    name = unique("etcdctl-holds")
    mutex = EtcdMutex(new_session(stack, etcd), name)
    with etcdctl_lock(etcd, name) as (process, lines):
        go_key = lines.get(timeout=DEADLINE)
        assert go_key.startswith(f"{name}/"), f"etcdctl printed {go_key!r}, not its lock key"
        with pytest.raises(Locked):
            mutex.try_lock()
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(mutex.lock, DEADLINE)
            wait_until(lambda: len(mutex.contenders()) == 2, "our key queues behind etcdctl's")
            assert mutex.contenders() == [go_key, mutex.key] and not future.done()
            process.send_signal(signal.SIGINT)
            assert future.result(timeout=DEADLINE) == mutex.token
        process.wait(timeout=DEADLINE)
    assert mutex.contenders() == [mutex.key]
    mutex.unlock()


def test_etcdctl_waits_while_our_mutex_holds(etcd, stack):
    name = unique("ours-holds")
    mutex = EtcdMutex(new_session(stack, etcd), name)
    mutex.lock()
    with etcdctl_lock(etcd, name) as (process, lines):
        wait_until(lambda: len(mutex.contenders()) == 2, "etcdctl's key queues behind ours")
        with pytest.raises(queue.Empty):
            lines.get(timeout=1.0)  # etcdctl must not claim the lock while we hold it
        assert process.poll() is None
        mutex.unlock()
        assert lines.get(timeout=DEADLINE).startswith(f"{name}/")


# -- python-etcd3's Lock, the reference -----------------------------------------------
def test_reference_lock_excludes_and_gives_the_create_revision_as_token(etcd, stack):
    name, clients = unique("reference"), 5
    inside = Inside()
    locks = []
    for index in range(clients):
        client = etcd.client(timeout=10)
        stack.callback(client.close)
        locks.append(Etcd3ReferenceLock(client, name, ttl=30, identifier=f"c{index}"))

    def work(lock: Etcd3ReferenceLock) -> None:
        token = lock.acquire(timeout=DEADLINE)
        with inside:
            _, metadata = lock.client.get(lock.key)
            assert metadata.create_revision == token
        lock.release()

    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(work, lock) for lock in locks]:
            future.result(timeout=DEADLINE * 2)
    assert inside.most == 1


def test_reference_lock_wakes_every_waiter_on_each_release(etcd, stack):
    history, name, count = History(), unique("herd"), 5

    def factory(identifier):
        client = etcd.client(timeout=10)
        stack.callback(client.close)
        return Etcd3ReferenceLock(client, name, ttl=30, identifier=identifier, on_event=history.sink(identifier))

    holder, waiters, futures = queue_waiters(stack, etcd, history, factory, count, "the lock key")
    holder.release()
    waiting = list(waiters)
    for released in range(1, count + 1):
        wait_until(lambda: any(w.token is not None for w in waiting), "a waiter holds")
        winner = next(w for w in waiting if w.token is not None)
        waiting.remove(winner)
        # Release only once every loser has woken for this release (the winner can hold
        # before the others' wake-ups arrive) and watches again, so each release meets them all.
        wait_until(lambda: all(len(history.events(w.identifier, "woke")) == released
                               and len(history.events(w.identifier, "watch")) == released + 1
                               for w in waiting), "the other waiters woke and watch again")
        winner.release()
    for future in futures:
        future.result(timeout=DEADLINE)
    releases = len(history.events(kind="released"))
    wakeups = len(history.events(kind="woke"))
    assert releases == count + 1
    # The first release alone wakes all five waiters; in all, a release wakes every
    # waiter still waiting: 5 + 4 + 3 + 2 + 1.
    assert wakeups == count * (count + 1) // 2, f"{wakeups} wakeups for {releases} releases"


def test_reference_lock_timeout(etcd, stack):
    name = unique("reference-timeout")
    client = etcd.client(timeout=10)
    stack.callback(client.close)
    holder = Etcd3ReferenceLock(client, name, ttl=30)
    other = Etcd3ReferenceLock(client, name, ttl=30)
    holder.acquire()
    with pytest.raises(LockTimeout):
        other.acquire(timeout=0.3)
    assert holder.is_held and not other.is_held
    holder.release()
    assert not holder.is_held
