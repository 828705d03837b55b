"""Waiting for something to become true, with a deadline: the one ``wait_until`` of labkit.

Readiness in this lab is probed, never slept: poll a real condition often, and give up
after a deadline with an error that names what was awaited.
"""
from __future__ import annotations

import time
from typing import Any, Callable


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 10.0, poll: float = 0.01) -> float:
    """Poll ``condition()`` every ``poll`` seconds until it is true; return the seconds it
    took. Raises TimeoutError naming ``what`` was awaited if it is still false after
    ``timeout`` seconds."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"waited {timeout:.1f} s for {what}; it did not happen "
                               "(is the machine overloaded, or a server down?)")
        time.sleep(poll)
    return time.monotonic() - started


def wait_for_value(read: Callable[[], Any], what: str, timeout: float = 10.0, poll: float = 0.01) -> Any:
    """``wait_until`` for a reading: poll ``read()`` until it returns something true, and
    return that value. Raises TimeoutError like ``wait_until``."""
    seen: list[Any] = [None]

    def ready() -> Any:
        seen[0] = read()
        return seen[0]

    wait_until(ready, what, timeout, poll)
    return seen[0]


def became_true(condition: Callable[[], Any], timeout: float, poll: float = 0.005) -> bool:
    """``wait_until`` for callers that go on after a timeout: True as soon as
    ``condition()`` holds, False if it still does not after ``timeout`` seconds."""
    try:
        wait_until(condition, "the condition", timeout, poll)
    except TimeoutError:
        return False
    return True
