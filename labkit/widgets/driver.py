"""What each of the panel's clients does on its own: queue for the lock, hold it for a
while writing to the store once a second, release it, queue again.

The loop runs in a thread of the notebook and sends one command at a time to its client
process. It never blocks for long: every reply is awaited in short slices so that
closing the panel stops it at once, even while its client waits for the lock or is
paused. A paused holder keeps its place in the loop: the write it was asked for runs the
moment it resumes, with the token it still believes in. That is the write a fenced store
must reject.

What can fail: the client process dies (the loop ends and ``note`` says so), its session
or lease ends while it waits (the client opens a new one and queues again), a server is
down (the error is reported through ``on_error`` and the loop retries after a second).
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from labkit.clients import ClientError, ClientTimeout
from labkit.locks.errors import LockTimeout, SessionExpired

if TYPE_CHECKING:
    from labkit.clients import LockClient

WRITE_INTERVAL = 1.0   # seconds between the holder's writes to the store
RETRY_DELAY = 1.0      # after a failed command, so a down server does not flood the log
REQUEUE_DELAY = 0.3    # after a release, so the timeline shows a gap between two holds
REPLY_SLICE = 0.25


class PanelClosing(Exception):
    """The panel is closing: the loop must end now."""


class ClientDriver:
    """The acquire / hold and write / release loop of one client, in a daemon thread."""

    def __init__(self, client: LockClient, stopping: threading.Event, hold_seconds: Callable[[], float],
                 writes: bool, on_error: Callable[[str, str], None]):
        self.client = client
        self.stopping = stopping
        self.hold_seconds = hold_seconds
        self.writes = writes
        self.on_error = on_error
        self.note = ""  # why this client stopped taking part, shown next to its state
        self.thread = threading.Thread(target=self._run, name=f"panel-{client.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _call(self, op: str, **args: Any) -> Any:
        command_id = self.client.send(op, **args)
        while True:
            try:
                return self.client.wait_reply(command_id, REPLY_SLICE)
            except ClientTimeout:
                if self.stopping.is_set():
                    raise PanelClosing from None

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                if self.client.state in ("dead", "stopped"):
                    self.note = "its process is gone"
                    return
                if not self._acquire():
                    continue
                self._hold()
                self._release()
                self.stopping.wait(REQUEUE_DELAY)
        except PanelClosing:
            return
        except ClientError as error:  # the process died between two commands
            if not self.stopping.is_set():
                self.note = "its process is gone"
                if self.client.state not in ("dead", "stopped"):
                    self.on_error(self.client.name, str(error))

    def _acquire(self) -> bool:
        try:
            self._call("acquire", timeout=None)
            return True
        except SessionExpired as error:
            # a waiter's session ended under it: its client opens a new one at the next try
            self.on_error(self.client.name, f"{error} (it queues again with a new session)")
        except (LockTimeout, ClientError) as error:
            if self.client.state in ("dead", "stopped"):
                raise
            self.on_error(self.client.name, f"acquire failed: {error}")
        self.stopping.wait(RETRY_DELAY)
        return False

    def _hold(self) -> None:
        started = time.monotonic()
        step = 0
        while time.monotonic() - started < self.hold_seconds():   # the hold's work (a write a second), not a wait
            if self.client.state == "lost":
                return  # it knows it lost the lock: a careful worker stops here
            if self.writes:
                try:
                    self._call("write", value=f"{self.client.name} step {step}")
                except ClientError as error:
                    if self.client.state in ("dead", "stopped"):
                        raise
                    self.on_error(self.client.name, f"write failed: {error}")
            step += 1
            if self.stopping.wait(WRITE_INTERVAL):
                raise PanelClosing

    def _release(self) -> None:
        try:
            self._call("release")
        except ClientError as error:
            if self.client.state in ("dead", "stopped"):
                raise
            self.on_error(self.client.name, f"release failed: {error}")
            self.stopping.wait(RETRY_DELAY)
