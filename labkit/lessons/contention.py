"""Clients that contend: ``race``, every lock's thread waits at a barrier, then all call
``acquire()`` at once: who gets in first is up to the servers, which is the point (queue
order, FIFO). (Operations timed in turns, for a latency comparison, are
``labkit.stats.take_turns``: the same yardstick as the benchmark's.)

What can fail: ``TimeoutError`` when a contender has not finished in time; a contender's own
error is re-raised.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def race(locks: list[Any], work: float = 0.05, timeout: float = 30.0) -> None:
    """One thread per lock waits at a barrier, then calls ``acquire()``; each holds the
    lock for ``work`` seconds and releases it. Returns when all are done; re-raises the
    first contender's error; TimeoutError if one has not finished within ``timeout``."""
    start_together = threading.Barrier(len(locks))

    def take_turn(lock: Any) -> None:
        start_together.wait(timeout=timeout)
        lock.acquire(timeout=timeout)
        try:
            time.sleep(work)                   # the work done under the lock (a chosen time)
        finally:
            lock.release()

    with ThreadPoolExecutor(len(locks)) as pool:
        turns = [pool.submit(take_turn, lock) for lock in locks]
        for turn in turns:
            turn.result(timeout=timeout)
