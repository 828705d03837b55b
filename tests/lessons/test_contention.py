"""Contenders that race for a lock (labkit/lessons/contention.py, ``race``), on real ZooKeeper
locks of the session lab, each on a session of its own: every contender gets the lock once
and releases it, and no two hold it at once (counted by the contenders); a contender's error
comes out of race; a contender that cannot get the lock ends the race with its LockTimeout, and
one that overruns its timeout with a TimeoutError, instead of hanging it. Who gets in first is up to the
server, so nothing here asserts an order."""
from __future__ import annotations

import time

import pytest

from labkit.lessons.contention import GRACE, race
from labkit.locks.errors import LockTimeout
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


def test_a_contender_that_cannot_get_the_lock_ends_the_race_with_its_own_timeout(sessions, unique_name):
    # The race waits GRACE s past the contender's own timeout: with waits of the same length the
    # lock's LockTimeout and the race's TimeoutError came out in either order (soak, session 16).
    holder = ZooKeeperLock(sessions[0], unique_name, identifier="holder")
    assert holder.acquire(timeout=10)
    try:
        with pytest.raises(LockTimeout, match="gave up waiting for lock"):
            race([Taken(ZooKeeperLock(sessions[1], unique_name, identifier="late"))], work=0.01, timeout=1.0)
    finally:
        holder.release()


class Stuck:
    """A lock that does not keep to its timeout."""

    def acquire(self, timeout):
        time.sleep(2 * timeout + GRACE + 1.0)

    def release(self):
        pass


def test_a_contender_that_overruns_its_timeout_ends_the_race_with_a_timeout_error():
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="had not finished"):
        race([Stuck()], work=0.0, timeout=0.1)
    assert time.monotonic() - began >= 0.2 + GRACE   # not before the grace was over
