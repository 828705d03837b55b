"""Errors raised by the lock recipes."""
from __future__ import annotations

from labkit.errors import LabError, LockError  # noqa: F401  (LockError: the base, re-exported)


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


class InvalidSemaphoreSize(LabError, ValueError):
    """A counting semaphore asked for fewer than one holder (or a limit that is no whole number)."""


class PathInUse(LabError, LockError):
    """A lock path (ZooKeeper) or key prefix (etcd) already used by a recipe of another kind:
    a semaphore on a mutex's path, a mutex on a semaphore's, or a semaphore with another limit."""


def check_semaphore_size(limit: object, where: str) -> int:
    """``limit`` as an int if it is a whole number of at least 1; else InvalidSemaphoreSize."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidSemaphoreSize(
            f"a semaphore on {where!r} needs a whole number of holders of at least 1, not {limit!r}",
            hint="1 makes it a mutex; pass how many clients may hold it at once, e.g. limit=3")
    return limit


class InvalidElectionName(LabError, ValueError):
    """An election name that cannot be a key (etcd) or a node path (ZooKeeper)."""


class InvalidLeaseDurations(LabError, ValueError):
    """Lease-election durations that break leaseDuration > renewDeadline > 1.2 x retryPeriod > 0 (client-go's checks)."""


class NotLeader(LockError):
    """proclaim() by a candidate that is not (or no longer) the leader (Go's ErrElectionNotLeader)."""


class NoElectedLeader(LockError):
    """leader() on an election nobody campaigns in (Go's ErrElectionNoLeader)."""


class CuratorUnavailable(LabError):
    """Java, javac or a Curator/ZooKeeper jar is not installed (labkit.locks.curator)."""


class CuratorPeerError(LabError):
    """The Curator peer process failed, died or did not answer in time."""


class CuratorLockGone(CuratorPeerError):
    """Curator's node was gone right after its acquire: the session expired in between."""


GONE_HINT = "the machine stalled past the session timeout, or the session is too short: acquire again"
