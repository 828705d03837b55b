"""Exercise (lesson 08): how long may a Redlock holder act after winning its majority?

The holder sent ``SET NX PX ttl`` to every instance; it took ``elapsed_ms`` (counted on
its monotonic clock from before the first SET to after the last reply). Each instance
expires the key by its own clock, and those clocks run at slightly different rates. The
published algorithm subtracts a drift allowance: validity = ttl − elapsed − (1 % of ttl
+ 2 ms), counted from the end of the acquire, so it ends at start + ttl − drift.

    def validity_ms(ttl_ms, elapsed_ms) -> float      # <= 0 means: not held, release

``check_redlock_validity(validity_ms, lab)`` asks it a few cases, then for real: the
lab's Redlock instances run clocks 0.9 % fast (labkit's clock shim: inside the
algorithm's allowance), a majority is won with real ``SET NX PX``, and each instance's
own remaining time (PTTL, converted to real time) says when the key really dies. The
holder's validity must end before that on a majority. ``ttl − elapsed`` without the
drift outlives the key: for 0.9 % of the TTL, less the spread of the acquire's SETs and
PTTL round trips, the holder acts while another client can win the same majority. The
real run's TTL is 600 s (nothing waits for it: PTTL is read), so that is 5.4 s: with 10 s
(89 ms) a run at load 28 missed the mistake, with 60 s one at load 40 did.

What can fail: ``ExerciseError`` if ``validity_ms`` is not callable, or if the lab has no
Redlock instances or was started without ``clocks=True``; redis-py's connection errors.
"""
from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Callable

from labkit.locks.redlock import instance_clients
from labkit.practice.exercises.report import ExerciseError, Report, learner_function

if TYPE_CHECKING:
    from labkit.servers.lab import Lab
    from labkit.servers.services.redis import RedlockService

PROPERTIES = ("subtracts the elapsed time", "allows for clock drift", "ends before the keys expire")
FAST_CLOCK = 1.009   # 0.9 % fast: within the algorithm's 1 % allowance

# (ttl_ms, elapsed_ms)
CASES = [(10_000, 30.0), (5_000, 4.0), (2_000, 2_500.0)]


def drift_ms(ttl_ms: float) -> float:
    """The published allowance: 1 % of the TTL plus 2 ms (Redis expires keys to 1 ms)."""
    return ttl_ms * 0.01 + 2


def check_redlock_validity(validity_ms: Callable, lab: Lab, ttl_ms: int = 600_000) -> Report:
    """Judge ``validity_ms`` on the cases, then on the lab's Redlock instances with fast clocks."""
    learner_function(validity_ms, hint="pass validity_ms(ttl_ms, elapsed_ms) -> float")
    redlock = getattr(lab, "redlock", None)
    if redlock is None or not redlock.nodes or not getattr(lab, "clocks", False):
        raise ExerciseError("this exercise needs Redlock instances whose clocks labkit can change",
                            hint="start the lab with labkit.up(redlock=3, clocks=True)")
    report = Report("Redlock validity exercise", properties=PROPERTIES)
    report.scenarios.append("three cases by pure logic")
    if _cases(report, validity_ms):
        report.scenarios.append(f"{len(redlock.nodes)} instances whose clocks run {FAST_CLOCK - 1:.1%} fast; "
                                f"a real majority with a TTL of {ttl_ms} ms")
        _fast_clocks(report, validity_ms, redlock, ttl_ms)
    report.stop_clock()
    return report


def _cases(report: Report, validity_ms: Callable) -> bool:
    """Judge the cases, stopping at the first wrong one; False only if ``validity_ms`` raised."""
    for ttl, elapsed in CASES:
        try:
            answer = float(validity_ms(ttl, elapsed))
        except Exception as error:
            report.judge("subtracts the elapsed time", False,
                         f"validity_ms raised {type(error).__name__}: {error}", "raised")
            return False
        right = ttl - elapsed - drift_ms(ttl)
        case = f"ttl {ttl} ms, {elapsed:g} ms spent acquiring"
        if right <= 0 and answer > 0:
            report.judge("subtracts the elapsed time", False, f"{case}: you say {answer:g} ms, but acquiring took "
                         "longer than the TTL: the keys may all be gone; the lock is not held", "ignores elapsed")
            return True
        if answer > ttl - elapsed + 1e-6:
            report.judge("subtracts the elapsed time", False, f"{case}: you say {answer:g} ms; the first key was "
                         f"set {elapsed:g} ms ago, so at most {ttl - elapsed:g} ms are left", "ignores elapsed")
            return True
        if answer > right + 1e-6:
            report.judge("allows for clock drift", False,
                         f"{case}: you say {answer:g} ms = ttl - elapsed, without the drift allowance of "
                         f"{drift_ms(ttl):g} ms: an instance whose clock runs fast expires the key sooner. "
                         f"Say at most {right:g}", "no drift")
            return True
        if right > 0 and answer < right * 0.9:
            report.judge("allows for clock drift", False, f"{case}: you say {answer:g} ms, far less than "
                         f"{right:g}: safe, but the holder wastes most of its lock", "too short")
            return True
    report.judge("subtracts the elapsed time", True, "every answer counts the time spent acquiring")
    report.judge("allows for clock drift", True, "every answer keeps the drift allowance")
    return True


def _fast_clocks(report: Report, validity_ms: Callable, redlock: RedlockService, ttl_ms: int) -> None:
    name = f"exercise:redlock:{uuid.uuid4().hex[:8]}"
    clients = instance_clients(redlock.endpoints, timeout_ms=min(ttl_ms / 20, 3_000))
    quorum = len(clients) // 2 + 1
    try:
        for node in redlock.nodes:
            node.clock.rate(FAST_CLOCK)
        begun = time.monotonic()
        votes = sum(bool(client.set(name, "holder", nx=True, px=ttl_ms)) for client in clients)
        ended = time.monotonic()
        elapsed_ms = (ended - begun) * 1000
        if votes < quorum:
            report.judge("ends before the keys expire", False, f"only {votes} instances said yes", "no majority")
            return
        ends = ended + float(validity_ms(ttl_ms, elapsed_ms)) / 1000   # counted from the end of the acquire
        key_dies = []   # the latest each key can die, in this machine's time: an upper bound
        for client in clients:
            remaining = client.pttl(name)
            replied = time.monotonic()
            key_dies.append(replied + (remaining + 1) / 1000 / FAST_CLOCK)
        majority_dies = sorted(key_dies, reverse=True)[quorum - 1]
        lead_ms = (majority_dies - ends) * 1000
        report.judge("ends before the keys expire", lead_ms > 0,
                     f"your validity ends at least {lead_ms:.0f} ms before a majority of keys expire"
                     if lead_ms > 0 else
                     f"your validity ends {-lead_ms:.0f} ms AFTER a majority of the keys expired on their own "
                     f"(fast) clocks: for that long another client can win the majority while you still act",
                     None if lead_ms > 0 else "outlives the keys")
    except Exception as error:
        report.judge("ends before the keys expire", False, f"the run failed: {type(error).__name__}: {error}", "raised")
    finally:
        for node in redlock.nodes:
            node.clock.reset()
        for client in clients:
            client.delete(name)
            client.close()
