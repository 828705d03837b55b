"""Errors that teach: each says what happened and what to do next."""
from __future__ import annotations


def with_log_tail(message: str, log_tail: str) -> str:
    """``message`` followed by a server's last log lines, indented (none: the message alone)."""
    if not log_tail:
        return message
    return f"{message}\n  last log lines:\n" + "\n".join("    " + line for line in log_tail.splitlines())


class LabError(Exception):
    """Base of every labkit error. ``hint`` is the next thing to try."""

    def __init__(self, message: str, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(message if not hint else f"{message}\n  hint: {hint}")


class LockError(Exception):
    """Base of the lock recipes' errors (``labkit.locks.errors`` re-exports it): the lock could
    not be taken or kept, as opposed to a mistake in how it was asked for."""


class ServerNotFound(LabError):
    """A server binary (or Java, for ZooKeeper) is not installed where labkit looks."""


class InvalidClusterSize(LabError):
    """An ensemble size labkit refuses (even sizes, zero, too large)."""


class PortBusy(LabError):
    """A port that a node must listen on is already taken."""


class NodeStartError(LabError):
    """A server did not become ready before its deadline; carries its last log lines."""

    def __init__(self, message: str, hint: str | None = None, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(with_log_tail(message, log_tail), hint)


class WaitTimedOut(LabError, TimeoutError):
    """Something awaited with a deadline (``labkit.timing.wait_until``) did not happen in
    time. A TimeoutError too, so ``except TimeoutError`` still catches it; carries the last
    log lines of the server concerned when the caller has them."""

    def __init__(self, message: str, hint: str | None = None, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(with_log_tail(message, log_tail), hint)


class UnknownNode(LabError):
    """A node name that is not part of this lab."""


class UnknownService(LabError):
    """A service this lab does not run (``lab.service(name)``)."""


class NoLeader(LabError):
    """An ensemble has no leader (yet, or any more: it may have lost its quorum)."""


class DockerUnavailable(LabError):
    """The Docker backend was asked for but no engine answers."""


class NoLabRunning(LabError):
    """``attach()`` found no lab started by ``labkit up``."""


class ClockUnavailable(LabError):
    """A node whose wall clock cannot be stepped: started without clocks=True, a Go server
    (etcd), or a machine without Linux or a C compiler for the clock shim."""


class InvalidClockChange(LabError):
    """A clock step or rate that makes no sense (not a finite number, a rate <= 0)."""


class LessonNotFound(LabError):
    """A notebook named for read aloud is neither beside the running notebook nor in the
    course's notebooks folder."""
