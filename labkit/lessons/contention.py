"""Clients that contend: ``race``, every lock's thread waits at a barrier, then all call
``acquire()`` at once: who gets in first is up to the servers, which is the point (queue
order, FIFO). (Operations timed in turns, for a latency comparison, are
``labkit.stats.take_turns``: the same yardstick as the benchmark's.)

What can fail: a contender's own error is re-raised, its LockTimeout too when it could not get
the lock within ``timeout``; ``TimeoutError`` when a contender has not finished ``GRACE`` s after
it should have (a lock that ignores its timeout).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any


GRACE = 2.0   # s a contender may overrun its turn before race() stops waiting for it


def race(locks: list[Any], work: float = 0.05, timeout: float = 30.0) -> None:
    """One thread per lock waits at a barrier, then calls ``acquire(timeout=timeout)``; each
    holds the lock for ``work`` seconds and releases it. Returns when all are done; re-raises
    the first contender's error (a LockTimeout from one that did not get the lock in time);
    TimeoutError if one has not finished ``GRACE`` s after its barrier and acquire could have
    taken, a lock that does not keep to its timeout. The grace is what makes the contender's
    own timeout the one that comes out: two waits of the same length would race each other."""
    start_together = threading.Barrier(len(locks))
    finish_by = time.monotonic() + 2 * timeout + work + GRACE   # the barrier's wait, then the acquire's

    def take_turn(lock: Any) -> None:
        start_together.wait(timeout=timeout)
        lock.acquire(timeout=timeout)
        try:
            time.sleep(work)                   # the work done under the lock (a chosen time)
        finally:
            lock.release()

    with ThreadPoolExecutor(len(locks)) as pool:
        turns = [pool.submit(take_turn, lock) for lock in locks]
        for lock, turn in zip(locks, turns):
            try:
                turn.result(timeout=max(0.0, finish_by - time.monotonic()))
            except FutureTimeout:    # not the builtin TimeoutError before Python 3.11
                raise TimeoutError(f"a contender ({lock!r}) had not finished {GRACE:g} s after its acquire's "
                                   f"timeout of {timeout:g} s: does its acquire() keep to its timeout?") from None
