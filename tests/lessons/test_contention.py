"""Contenders that race for a lock (labkit/lessons/contention.py, ``race``), on real ZooKeeper
locks of the session lab, each on a session of its own: every contender gets the lock once
and releases it, and no two hold it at once (counted by the contenders); a contender's error
comes out of race; and a contender that cannot get the lock ends the race with a TimeoutError
instead of hanging it. Who gets in first is up to the
server, so nothing here asserts an order."""
from __future__ import annotations

import pytest

from labkit.lessons.contention import race
from labkit.locks.zookeeper import ZooKeeperLock


@pytest.fixture
def sessions(lab):
    clients = [lab.zookeeper.client() for _ in range(3)]
    try:
        yield clients
    finally:
        for client in clients:
            client.stop()
            client.close()


class Counted:
    """A real lock, counting who is inside: after its acquire returns, until it calls release
    (the recipe deletes its node inside release, so the next acquire returns after that)."""

    inside, most, entered = 0, 0, []

    def __init__(self, lock, name):
        self.lock, self.name = lock, name

    def acquire(self, timeout):
        assert self.lock.acquire(timeout=timeout)
        Counted.inside += 1
        Counted.most = max(Counted.most, Counted.inside)
        Counted.entered.append(self.name)

    def release(self):
        Counted.inside -= 1
        self.lock.release()


def test_every_contender_gets_the_lock_once_and_never_two_at_once(sessions, zk, unique_name, monkeypatch):
    monkeypatch.setattr(Counted, "entered", [])
    locks = [ZooKeeperLock(client, unique_name, identifier=f"racer-{number}") for number, client in enumerate(sessions)]
    race([Counted(lock, f"racer-{number}") for number, lock in enumerate(locks)], work=0.05)
    assert sorted(Counted.entered) == ["racer-0", "racer-1", "racer-2"]
    assert Counted.most == 1 and Counted.inside == 0
    assert not any(lock.is_held for lock in locks) and zk.get_children(unique_name) == []
    zk.delete(unique_name, recursive=True)


class Broken:
    def acquire(self, timeout):
        raise ConnectionError("the server went away")

    def release(self):
        raise AssertionError("never acquired: never released")


class Taken:
    def __init__(self, lock):
        self.lock = lock

    def acquire(self, timeout):
        if not self.lock.acquire(timeout=timeout):
            raise TimeoutError("did not get the lock")

    def release(self):
        self.lock.release()


def test_a_contenders_error_comes_out_of_the_race(sessions, unique_name):
    with pytest.raises(ConnectionError, match="went away"):
        race([ZooKeeperLock(sessions[0], unique_name), Broken()], work=0.01, timeout=10)


def test_a_contender_that_cannot_get_the_lock_ends_the_race_with_a_timeout(sessions, unique_name):
    holder = ZooKeeperLock(sessions[0], unique_name, identifier="holder")
    assert holder.acquire(timeout=10)
    try:
        with pytest.raises(TimeoutError):
            race([Taken(ZooKeeperLock(sessions[1], unique_name, identifier="late"))], work=0.01, timeout=1.0)
    finally:
        holder.release()
