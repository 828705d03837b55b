"""The workload of a torture run: every client loops acquire → write "begin" → hold →
write "end" → release on the fenced store (``LockClient.run``), for as long as the run
lasts, and a client that dies rejoins.

What can go wrong, and what the workload does about it. A client killed by the nemesis
is replaced by a new process with the same name and a new session
(``LockClients.replace``). A client whose loop fails (its session expired while it
waited, its server was down) starts its loop again; the etcd child opens a new lease by
itself, kazoo a new ZooKeeper session. A paused client answers late, so its loop is
simply awaited. Nothing here decides what is correct: the verdicts read the history and
the store's record afterwards.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from labkit.clients import ClientError, ClientTimeout
from labkit.errors import LabError
from labkit.locks.errors import LockError

FOREVER = 10**9  # rounds: the loop runs until stop_loop
RETRY_PAUSE = 0.2  # seconds between two failed loops of one client, so a dead server is not hammered


class TortureWorkload:
    """Drives ``clients`` (a ``LockClients``): ``start()``, then ``stop()``. ``problems``
    counts why loops ended early (by error type), for the report."""

    def __init__(self, clients: Any, hold: float):
        self.clients = clients
        self.hold = hold
        self.names = [client.name for client in clients]
        self.stopping = threading.Event()
        self.problems: dict[str, int] = {}
        self.examples: dict[str, str] = {}  # the first message of each kind of problem
        self.rejoined = 0
        self._problems_lock = threading.Lock()
        self._threads = [threading.Thread(target=self._drive, args=(name,), name=f"torture-{name}", daemon=True)
                         for name in self.names]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _note(self, error: BaseException) -> None:
        with self._problems_lock:
            error_name = type(error).__name__
            self.problems[error_name] = self.problems.get(error_name, 0) + 1
            self.examples.setdefault(error_name, str(error).splitlines()[0] if str(error) else error_name)

    def _drive(self, name: str) -> None:
        while not self.stopping.is_set():
            client = self.clients[name]
            began = time.monotonic()
            try:
                if client.state in ("dead", "stopped"):
                    self.clients.replace(name)
                    with self._problems_lock:
                        self.rejoined += 1
                    continue
                command = client.run(FOREVER, self.hold, wait=False)
                while True:
                    try:
                        client.wait_reply(command, timeout=0.5)
                        break  # the loop ended: stop_loop was sent
                    except ClientTimeout:
                        continue  # waiting, holding or paused: its loop goes on
            except (LabError, LockError, OSError) as error:  # the loop failed; a dead client is replaced above
                self._note(error)
                if time.monotonic() - began < RETRY_PAUSE:
                    self.stopping.wait(RETRY_PAUSE)

    def stop(self, timeout: float) -> None:
        """Ask every loop to finish its round (a waiting client still gets the lock once),
        wait up to ``timeout`` seconds, then leave the rest to ``LockClients.close()``."""
        self.stopping.set()
        for name in self.names:
            client = self.clients[name]
            client.resume()
            try:
                client.send("stop_loop")
            except ClientError:
                pass  # dead: nothing to stop
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
