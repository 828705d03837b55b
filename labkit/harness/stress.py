"""Many contenders on one lock, each taking it ``rounds`` times and writing "begin" then "end"
to a store while it holds: the one stress harness behind notebook 08's crashed instance and
the tests' mutual-exclusion runs (RedisLock, Redlock). Each contender is a thread with its own
lock object (a factory makes it); a counter of who is inside, kept under a thread lock,
gives the most holders ever inside at once, and the store's log goes to the checker.

What can fail: a contender's own error (``LockTimeout`` when it cannot get the lock within
``timeout``; whatever ``on_hold`` raises) is raised again in the caller's thread, the first
one first; ``TimeoutError`` when a contender is still running after ``timeout`` + 30 s.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from labkit.record.events import EventSink
from labkit.record.fencing import FencedStore
from labkit.record.history import History


@dataclass
class Stress:
    """What ``stress`` saw: the most contenders inside at once, and what each release
    returned (True: the lock was still ours), in the order they ran."""

    history: History
    most_inside: int = 0
    releases: list[Any] = field(default_factory=list)


def stress(make: Callable[[str, EventSink], Any], names: list[str], store: FencedStore, rounds: int = 3,
           history: History | None = None, on_hold: Callable[[Any], Any] = lambda lock: None,
           close: Callable[[Any], Any] = lambda lock: lock.close(), timeout: float = 30.0,
           **acquire_options: Any) -> Stress:
    """Each of ``names`` makes its lock with ``make(name, sink)`` and, ``rounds`` times,
    acquires (``acquire(timeout=timeout, **acquire_options)``), runs ``on_hold(lock)`` (under the counter's guard), writes begin and end to
    ``store`` with no token, and releases; ``close(lock)`` when it is done. See the module
    docstring for what it raises."""
    result = Stress(history if history is not None else History())
    inside, guard = [0], threading.Lock()
    errors: list[BaseException] = []

    def contender(name: str) -> None:
        lock = make(name, result.history.sink(name))
        try:
            for round_number in range(rounds):
                lock.acquire(timeout=timeout, **acquire_options)
                with guard:
                    inside[0] += 1
                    result.most_inside = max(result.most_inside, inside[0])
                    on_hold(lock)
                store.write(name, None, f"{name} begin {round_number}")
                store.write(name, None, f"{name} end {round_number}")
                with guard:
                    inside[0] -= 1
                result.releases.append(lock.release())
        except BaseException as error:  # noqa: BLE001  (raised again in the caller's thread)
            errors.append(error)
        finally:
            close(lock)

    pool = ThreadPoolExecutor(len(names), thread_name_prefix="stress")
    turns = {pool.submit(contender, name): name for name in names}
    _, running = wait(turns, timeout=timeout + 30)
    pool.shutdown(wait=False)
    if errors:
        raise errors[0]
    if running:
        raise TimeoutError(f"contenders still running after {timeout + 30:g} s: {', '.join(turns[t] for t in running)}")
    return result
