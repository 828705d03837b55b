"""Clients that contend, in the two ways several lessons need.

* ``race``: every lock's thread waits at a barrier, then all call ``acquire()`` at once: who
  gets in first is up to the servers, which is the point (queue order, FIFO).
* ``timed_rounds``: several operations take turns, one call each per round, timed, so that
  a burst of load on the machine slows them all alike (latency comparisons).

What can fail: ``TimeoutError`` when a contender has not finished in time; a contender's or
an operation's own error is re-raised.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable


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


def timed_rounds(operations: dict[str, Callable[[], Any]], samples: int, warmup: int = 5) -> dict[str, list[float]]:
    """Run every operation once per round, in turn, ``warmup + samples`` rounds; return the
    seconds each of the last ``samples`` calls took, per operation name. The first rounds
    open connections and warm caches: they are not counted."""
    seconds: dict[str, list[float]] = {name: [] for name in operations}
    for round_number in range(warmup + samples):
        for name, operation in operations.items():
            started = time.perf_counter()
            operation()
            if round_number >= warmup:
                seconds[name].append(time.perf_counter() - started)
    return seconds
