"""A ResourceLog (labkit/record/resource_log.py) written by threads that hold a real lock of the
session lab's ZooKeeper, taken with ``with lock:`` (labkit/locks/contract.py, HeldInside):
the log keeps every write in the order it ran and the checker judges it; ``with`` releases
on the way out, also when the body raises."""
from __future__ import annotations

import threading

import pytest

from labkit.locks.contract import HeldInside
from labkit.locks.kazoo_reference import KazooReferenceLock
from labkit.record.checker import check_mutual_exclusion
from labkit.record.history import History
from labkit.record.resource_log import ResourceLog

from helpers import DEADLINE


@pytest.fixture
def clients(lab):
    made = []

    def make():
        made.append(lab.zookeeper.client())
        return made[-1]
    yield make
    for client in made:
        client.stop()
        client.close()


def test_writes_under_a_real_lock_are_logged_in_order_and_judged_exclusive(clients, unique_name):
    history, log, rounds = History(), ResourceLog(), 3
    locks = [KazooReferenceLock(clients(), unique_name, identifier=f"c{number}", on_event=history.sink(f"c{number}"))
             for number in range(3)]
    assert all(isinstance(lock, HeldInside) for lock in locks)

    def contend(lock):
        for round_number in range(rounds):
            with lock:
                assert log.write(lock.identifier, lock.token, f"round {round_number}") is True

    threads = [threading.Thread(target=contend, args=(lock,)) for lock in locks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    writes = log.writes()
    assert len(writes) == len(locks) * rounds and all(write["accepted"] for write in writes)
    assert [write["time"] for write in writes] == sorted(write["time"] for write in writes)
    assert len(history.events(kind="acquired")) == len(history.events(kind="released")) == len(writes)
    verdict = check_mutual_exclusion(writes, history)
    assert verdict.ok, verdict.explain()
    log.reset()
    assert log.writes() == [] and writes != []     # writes() was a copy


def test_with_releases_the_lock_when_the_body_raises(clients, unique_name):
    lock = KazooReferenceLock(clients(), unique_name, identifier="raiser")
    with pytest.raises(RuntimeError, match="inside"):
        with lock:
            assert lock.is_held
            raise RuntimeError("inside the lock")
    assert not lock.is_held
    other = KazooReferenceLock(clients(), unique_name, identifier="next")
    other.acquire(timeout=DEADLINE)                # the node is gone: the next one gets it at once
    assert other.is_held
    other.release()
