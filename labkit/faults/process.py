"""Faults that act on a process: freeze it (a long pause), let it run again, kill it.

Every fault here is real. ``pause`` sends SIGSTOP and, from a timer thread, SIGCONT:
the process stops executing exactly as it would in a long garbage-collection pause, while
its sessions keep ticking on the server. Nothing is simulated in the client.

A target is a process id, a lock client (``labkit.clients.LockClient``, seen here as the
``ClientProcess`` protocol) or a server node (``lab.node("zk1")``). Give ``history=`` to record the fault as a ``fault`` event, so that
timelines show when it happened.

What can fail: a target that is already gone (``ProcessLookupError`` is raised for a pid
that does not exist; nodes and clients raise their own errors).
"""
from __future__ import annotations

import os
import signal
import threading
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from labkit.servers.runners.process import wait_for_process_state

if TYPE_CHECKING:
    from labkit.record.history import History
    from labkit.servers.services.node import Node


@runtime_checkable
class ClientProcess(Protocol):
    """A lock client process, which carries out its own faults and records them in its
    group's history: ``labkit.clients.LockClient`` is one (clients stand above faults, so
    faults name what they need instead of importing it). A server node pauses, resumes and
    is killed too, but takes no commands and has no session to expire: that tells them apart."""

    name: str

    def command(self, op: str, reply_timeout: float = ..., **args: Any) -> Any: ...
    def expire_session(self, timeout: float = ...) -> None: ...
    def pause(self, seconds: float) -> threading.Timer: ...
    def resume(self) -> None: ...
    def kill(self) -> None: ...


Target: TypeAlias = "int | ClientProcess | Node"  # a process id, a lock client process or a server node


def describe(target: Target) -> str:
    """The name a fault event uses for its target."""
    if isinstance(target, int):
        return f"pid {target}"
    return str(getattr(target, "name", target))


def record_fault(history: History | None, target: Target, what: str, **detail: Any) -> None:
    """Append a ``fault`` event for ``target`` to ``history`` (nothing if history is None)."""
    if history is not None:
        history.record_fault(what, describe(target), **detail)


def freeze_process(pid: int) -> None:
    """SIGSTOP: the process stops running until ``thaw_process``; the kernel keeps its
    sockets open, so servers see a silent peer, not a closed connection. Returns once the
    kernel reports the process stopped (the signal is asynchronous)."""
    os.kill(pid, signal.SIGSTOP)
    wait_for_process_state(pid, lambda state: state != "running")


def thaw_process(pid: int) -> bool:
    """SIGCONT. Returns False (instead of raising) when the process is gone by now, so a
    resume timer firing after a kill is harmless."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return False
    return True


def pause(target: Target, seconds: float, history: History | None = None) -> threading.Timer:
    """Freeze ``target`` now and let it run again after ``seconds``.

    Returns the started resume timer; ``timer.cancel()`` plus ``resume(target)`` ends the
    pause early. A node is paused with its own ``pause()`` / ``resume()`` (which also works
    for containers); a lock client records the fault itself.
    """
    if seconds <= 0:
        raise ValueError(f"pause needs a positive number of seconds, got {seconds!r}")
    if isinstance(target, ClientProcess):
        return target.pause(seconds)
    if isinstance(target, int):
        freeze_process(target)
        timer = threading.Timer(seconds, thaw_process, args=(target,))
    else:
        target.pause()
        timer = threading.Timer(seconds, target.resume)
    timer.daemon = True
    timer.start()
    record_fault(history, target, "pause", seconds=seconds)
    return timer


def resume(target: Target, history: History | None = None) -> None:
    """End a pause now (SIGCONT / ``node.resume()``)."""
    if isinstance(target, ClientProcess):
        target.resume()
        return
    if isinstance(target, int):
        thaw_process(target)
    else:
        target.resume()
    record_fault(history, target, "resume")


def kill(target: Target, history: History | None = None) -> None:
    """SIGKILL: no cleanup runs, no session is closed; the server notices only when the
    session times out (ZooKeeper) or the lease expires (etcd) or the TTL runs out (Redis)."""
    if isinstance(target, ClientProcess):
        target.kill()
        return
    if isinstance(target, int):
        os.kill(target, signal.SIGKILL)
    else:
        target.kill()
    record_fault(history, target, "kill")
