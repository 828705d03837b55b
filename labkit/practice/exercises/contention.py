"""Contenders that take one lock in turn, directed by a checker, and the resource they write to.

Each contender is a thread with its own session: it acquires with the learner's code,
writes to the resource, holds until the checker lets it go, writes again and releases.
The checker decides when each holder lets go, so every run follows the same script and
a fault lands at a chosen moment; nothing depends on a lucky race.

What can fail: the learner's code can hang, raise or return too early. A hang is bounded
by ``patience`` (the contender is then reported stuck); an exception is kept in
``Contender.error``; an early return shows up as two holders in the resource's record.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from labkit.timing import became_true

WAITING, HOLDING, RELEASED, GAVE_UP, CRASHED = "waiting", "holding", "released", "gave up", "crashed"
HOLD_LIMIT = 120.0  # a holder the checker forgot lets go after this long, so no thread lives for ever


class Resource:
    """The protected resource. Its record lists every write in the order it ran them,
    which is what mutual exclusion is judged from (``labkit.record.checker``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._writes: list[dict[str, Any]] = []

    def write(self, client: str, token: int | None, value: str) -> None:
        with self._lock:
            self._writes.append({"time": time.time(), "client": client, "token": token,
                                 "accepted": True, "value": value})

    def writes(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._writes)


class Contender:
    """One lock client in its own thread.

    ``acquire()`` returns (token, node) or raises; ``release(node)`` lets go. Both wrap the
    learner's code. ``state`` is one of waiting, holding, released, gave up, crashed.
    """

    def __init__(self, name: str, acquire: Callable[[], tuple[int | None, str]],
                 release: Callable[[str], None], resource: Resource):
        self.name = name
        self.state = WAITING
        self.error: BaseException | None = None
        self.token: int | None = None
        self.node: str | None = None
        self.acquired_at: float | None = None
        self._acquire = acquire
        self._release = release
        self._resource = resource
        self._go = threading.Event()
        self._crashed = False
        self._thread = threading.Thread(target=self._run, name=f"exercise-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def let_go(self) -> None:
        """Tell the holder to finish its work and release."""
        self._go.set()

    def crash(self) -> None:
        """From now on this client does nothing more: no write, no release (a dead process)."""
        self._crashed = True
        self._go.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.token, self.node = self._acquire()
        except BaseException as error:  # the learner's code may raise anything: keep it for the report
            self.error = error
            self.state = GAVE_UP
            return
        self.acquired_at = time.monotonic()
        if self._crashed:
            self.state = CRASHED
            return
        # write before saying "holding": the checker lets the oldest holder go only once every
        # holder has written, so two holders' writes always interleave in the record
        self._resource.write(self.name, self.token, "first write")
        self.state = HOLDING
        self._go.wait(HOLD_LIMIT)
        if self._crashed:
            self.state = CRASHED
            return
        self._resource.write(self.name, self.token, "last write")
        try:
            self._release(self.node)
        except BaseException as error:
            self.error = error
            self.state = GAVE_UP
            return
        self.state = RELEASED


def join_queue(contender: Contender, settled: Callable[[Contender], bool], patience: float) -> bool:
    """Start ``contender`` and wait until it holds, has given up, or is ``settled`` (waits
    on a watch). Joining one at a time makes the queue order the order of the names."""
    contender.start()
    return became_true(lambda: contender.state != WAITING or settled(contender), patience)


def join_all(contenders: list[Contender], timeout: float = 2.0) -> None:
    """Wait for the contenders' threads to end, ``timeout`` seconds for all of them together.
    A thread blocked in the learner's code on something no session close can end stays
    behind; it is a daemon, so it cannot keep Python from exiting."""
    deadline = time.monotonic() + timeout
    for contender in contenders:
        contender.join(max(0.0, deadline - time.monotonic()))


def nobody_ever_held(contenders: list[Contender]) -> bool:
    return all(contender.acquired_at is None for contender in contenders)


def queue_in_turn(contenders: list[Contender], settled: Callable[[Contender], bool], patience: float) -> None:
    """``join_queue`` each in turn. Once a join runs out of patience (the learner's code
    neither holds nor waits on a watch), the rest get a tenth of it: a broken lock should
    fail in seconds, not in minutes."""
    wait = patience
    for contender in contenders:
        if not join_queue(contender, settled, wait):
            wait = patience / 10


def drain(contenders: list[Contender], settle: Callable[[list[Contender]], None],
          patience: float) -> list[str]:
    """Let each holder go in turn (the oldest hold first) until nobody waits or holds.
    Before each release the waiters are ``settle``d (their watches armed again), so each
    release's wake-ups are counted whole. Returns the names of the clients still waiting
    when no one held the lock for ``patience`` seconds: stuck (empty if none)."""
    while True:
        live = [c for c in contenders if c.state in (WAITING, HOLDING)]
        if not live:
            return []
        holders = sorted((c for c in live if c.state == HOLDING), key=lambda c: c.acquired_at)
        if not holders:
            if not became_true(lambda: any(c.state != WAITING for c in live), patience):
                return [c.name for c in live]
            continue
        settle([c for c in live if c.state == WAITING])
        holder = holders[0]
        holder.let_go()
        if not became_true(lambda: holder.state != HOLDING, patience):
            return [holder.name]
