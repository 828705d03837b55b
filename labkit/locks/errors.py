"""Errors raised by the lock recipes."""
from __future__ import annotations


class LockError(Exception):
    """Base of the recipe errors."""


class LockTimeout(LockError):
    """acquire(timeout=...) gave up. Names the lock and how long it waited."""

    def __init__(self, name: str, waited: float):
        self.name = name
        self.waited = waited
        super().__init__(f"gave up waiting for lock {name!r} after {waited:.2f} s; "
                         "someone else still holds it or the queue ahead of you is long")


class SessionExpired(LockError):
    """The session (ZooKeeper) or lease (etcd) behind the lock is gone: the lock is lost.
    Stop writing to the protected resource; start a new session to try again."""


class Locked(LockError):
    """try_lock found the lock held by someone else."""
