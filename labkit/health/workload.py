"""A steady workload for a dashboard: every client loops acquire → hold → release → think.

``LockClients.run`` loops without a pause, so every client is always queued and the
wait queue never moves. Real services hold a lock now and then; the think time between
rounds is what lets a dashboard show a healthy, short queue, and then the queue backing
up when a holder freezes or dies.

Each client is driven by a thread of the notebook, one command at a time. ``take_out``
lets a lesson use one client by hand (acquire, then freeze or kill it) and ``put_back``
returns it to the loop.

What can fail: a client whose process died leaves the loop quietly (``errors`` records
why); a waiter whose session or lease ended under it is counted in ``errors`` and
queues again with a new session; a release that meets a dropped connection is sent again
(``LockClient.release_through_blips``), and one that still fails is retried before the
client queues again, so a blip never leaves a node that blocks every other client;
``wait_for_rounds`` says each client's rounds, state and errors if it times out; ``take_out`` and ``stop`` raise TimeoutError if a round
does not finish in time (the lock is stuck: a holder is paused and its session lives).
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Iterable

from labkit.clients import ClientError
from labkit.errors import WaitTimedOut
from labkit.locks.errors import LockTimeout, SessionExpired
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.clients import LockClient

FAILED_ROUND_PAUSE = 0.5  # after a failed round, so a down server is not hammered


class SteadyWorkload:
    """Loops ``clients`` (a LockClients or any iterable of LockClient) until ``stop()``."""

    def __init__(self, clients: Iterable[Any], hold: float = 0.2, think: float = 0.8):
        if hold < 0 or think < 0:
            raise ValueError(f"hold and think must be zero or more seconds, got {hold!r} and {think!r}")
        self.clients = {client.name: client for client in clients}
        self.hold, self.think = hold, think
        self.rounds = {name: 0 for name in self.clients}
        self.errors: list[tuple[str, str]] = []
        self._stops: dict[str, threading.Event] = {}
        self._threads: dict[str, threading.Thread] = {}

    def start(self) -> "SteadyWorkload":
        for name in self.clients:
            self.put_back(name)
        return self

    def put_back(self, name: str) -> None:
        """(Re)start the loop of client ``name``."""
        if name in self._threads and self._threads[name].is_alive():
            return
        stop = self._stops[name] = threading.Event()
        thread = threading.Thread(target=self._loop, args=(self.clients[name], stop), name=f"workload-{name}",
                                  daemon=True)
        self._threads[name] = thread
        thread.start()

    def take_out(self, name: str, timeout: float = 30.0) -> Any:
        """End the loop of client ``name`` after its current round and return the client,
        idle, for the lesson to drive by hand."""
        self._end([name], timeout)
        return self.clients[name]

    def stop(self, timeout: float = 30.0) -> None:
        """End every loop after its current round."""
        self._end(list(self._threads), timeout)

    def _end(self, names: list[str], timeout: float) -> None:
        for name in names:
            if name in self._stops:
                self._stops[name].set()
        deadline = time.monotonic() + timeout
        for name in names:
            thread = self._threads.get(name)
            if thread is None:
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise TimeoutError(f"{name} did not finish its round within {timeout:.0f} s (state "
                                   f"{self.clients[name].state}): the lock may be stuck behind a paused holder")

    def wait_for_rounds(self, rounds: int, timeout: float = 60.0) -> float:
        """Block until every client in the loop has done ``rounds`` rounds; the seconds it
        took. WaitTimedOut says each client's rounds and state and the last errors."""
        def not_there() -> WaitTimedOut:
            states = ", ".join(f"{name} {self.rounds[name]} ({client.state})" for name, client in self.clients.items())
            errors = "; ".join(f"{name}: {error}" for name, error in self.errors[-4:]) or "none"
            return WaitTimedOut(f"waited {timeout:.0f} s for {rounds} rounds of every client; rounds so far: "
                                f"{states}; last errors: {errors}",
                                hint="a client stuck 'waiting' queues behind a holder that does not let go "
                                     "(labkit status shows the servers)")
        return wait_until(lambda: min(self.rounds.values()) >= rounds, f"{rounds} rounds of every client",
                          timeout, poll=0.05, error=not_there)

    def _loop(self, client: LockClient, stop: threading.Event) -> None:
        holds = False   # a release that failed leaves the node ours: let go before queueing again
        while not stop.is_set():
            try:
                if holds:
                    client.release_through_blips()
                holds = True                  # from the request on, a node may be ours (a reply too late)
                client.acquire(timeout=None)
                stop.wait(self.hold)          # the work done under the lock
                client.release_through_blips()   # a ZooKeeper blip on a loaded machine is not the lesson here
                holds = False
                self.rounds[client.name] += 1
            except (SessionExpired, LockTimeout, ClientError) as error:
                if client.state in ("dead", "stopped"):
                    self.errors.append((client.name, "its process is gone"))
                    return
                if isinstance(error, (SessionExpired, LockTimeout)):
                    holds = False             # the session took the node with it, or the timeout did
                self.errors.append((client.name, f"{type(error).__name__}: {error}"))
                stop.wait(FAILED_ROUND_PAUSE)
                continue
            stop.wait(self.think)
        if holds:   # taken out or stopped after a failed round: hand the client back idle
            try:
                client.release_through_blips()
            except (SessionExpired, ClientError) as error:
                self.errors.append((client.name, f"{type(error).__name__} at the end: {error}"))

    def __enter__(self) -> "SteadyWorkload":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
