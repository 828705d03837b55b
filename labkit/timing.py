"""Waiting for something to become true, with a deadline: the one ``wait_until`` of labkit.

Readiness in this lab is probed, never slept: poll a real condition often, and give up
after a deadline with an error that names what was awaited. A caller that knows more than
"it did not happen" (a server's last log lines, what to try next) hands ``wait_until`` the
error to raise, so no module needs a deadline loop of its own (tests/suite/test_wait_loops.py
counts the ones left, each with its reason).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Union

from labkit.errors import WaitTimedOut

# What to raise at the deadline: an exception, or a function that makes one then (so that
# it can read the server's last log lines at the moment of the timeout, not before).
TimeoutErrorSource = Union[BaseException, Callable[[], BaseException]]


def timed_out(what: str, timeout: float, error: TimeoutErrorSource | None = None) -> BaseException:
    """The exception a wait for ``what`` raises after ``timeout`` seconds: ``error`` (or
    what ``error()`` returns), else a WaitTimedOut (a LabError and a TimeoutError) that
    names what was awaited."""
    if error is None:
        return WaitTimedOut(f"waited {timeout:.1f} s for {what}; it did not happen",
                            hint="is the machine overloaded, or a server down? (labkit status)")
    return error if isinstance(error, BaseException) else error()


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 10.0, poll: float = 0.01,
               error: TimeoutErrorSource | None = None, max_poll: float | None = None) -> float:
    """Poll ``condition()`` every ``poll`` seconds until it is true; return the seconds it
    took. If it is still false after ``timeout`` seconds, raise ``error`` (a LabError that
    carries a hint and the server's last log lines, or a function returning one, called at
    the deadline); without ``error``, a WaitTimedOut (a TimeoutError) naming ``what``. Whatever
    ``condition()`` raises is raised at once. With ``max_poll``, the pause grows by half at
    each poll up to ``max_poll``: a quick answer is seen quickly, and a slow starter (a JVM)
    is not probed fifty times a second while it boots."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise timed_out(what, timeout, error)
        time.sleep(poll)
        if max_poll is not None:
            poll = min(poll * 1.5, max_poll)
    return time.monotonic() - started


def wait_for_value(read: Callable[[], Any], what: str, timeout: float = 10.0, poll: float = 0.01,
                   error: TimeoutErrorSource | None = None, max_poll: float | None = None) -> Any:
    """``wait_until`` for a reading: poll ``read()`` until it returns something true, and
    return that value. Raises like ``wait_until``."""
    seen: list[Any] = [None]

    def ready() -> Any:
        seen[0] = read()
        return seen[0]

    wait_until(ready, what, timeout, poll, error, max_poll)
    return seen[0]


def became_true(condition: Callable[[], Any], timeout: float, poll: float = 0.005) -> bool:
    """``wait_until`` for callers that go on after a timeout: True as soon as
    ``condition()`` holds, False if it still does not after ``timeout`` seconds."""
    try:
        wait_until(condition, "the condition", timeout, poll)
    except TimeoutError:
        return False
    return True


def seconds_until(operation: Callable[[], Any], since: float, what: str = "the operation to succeed",
                  timeout: float = 30.0, poll: float = 0.01) -> float:
    """Retry ``operation()`` until it neither raises nor returns False; return the seconds
    from ``since`` (a ``time.monotonic()`` value, e.g. the moment of a crash or of a
    grant) to that success. Either kind of "not yet" is what is measured: a write that
    fails while a cluster elects a leader, a node that still exists. An operation that can
    block must give up by itself (a timeout of its own). Raises TimeoutError naming
    ``what`` and the last failure if it never succeeds within ``timeout``."""
    failure: list[Any] = [None]

    def succeeded() -> bool:
        try:
            failure[0] = "it returned False" if operation() is False else None
        except Exception as error:  # every failure means "not yet"
            failure[0] = error
        return failure[0] is None

    wait_until(succeeded, what, timeout, poll,
               error=lambda: TimeoutError(f"{what}: still failing after {timeout:.0f} s: {failure[0]!r}"))
    return time.monotonic() - since
