"""Exercise (lesson 01): a Redis unlock that deletes the key only if it is still mine.

The learner writes

    def unlock(client, name, my_value) -> None     # client: a redis-py client

for a lock taken with ``SET name my_value NX PX ttl``. ``check_redis_unlock(unlock, lab)``
runs it on the lab's real Redis in three situations:

1. I hold the lock: my key must be gone afterwards.
2. Another client holds it (my lock expired long ago): its key must survive.
3. The race: I hold the lock, and between my GET and my DEL the key expires (for real, on
   the server) and another client takes the lock. A GET-then-DEL unlock deletes the other
   client's lock; a compare-and-delete in one Lua script cannot, because it never leaves
   a window between the check and the delete.

What can fail: ``ExerciseError`` if ``unlock`` is not callable; redis-py's connection
errors if the lab's Redis cannot be reached. The learner's own exceptions are reported.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable

from labkit.practice.exercises.racing import RacingRedis
from labkit.practice.exercises.report import Report, learner_function
from labkit.timing import wait_until

PROPERTIES = ("releases my lock", "leaves another holder's lock alone", "atomic check-and-delete")
TTL_MS = 10_000


def check_redis_unlock(unlock: Callable, lab: Any) -> Report:
    """Run ``unlock(client, name, my_value)`` in the three situations and judge each property."""
    learner_function(unlock, hint="pass unlock(client, name, my_value), which deletes name only if it holds my_value")
    report = Report("Redis unlock exercise", properties=PROPERTIES)
    name = f"exercise:unlock:{uuid.uuid4().hex[:8]}"
    mine, theirs = "c1:" + uuid.uuid4().hex, "c2:" + uuid.uuid4().hex
    learner = RacingRedis(host=lab.redis.host, port=lab.redis.port, socket_timeout=5.0, **lab.redis.auth)
    other = lab.redis.client()
    try:
        report.scenarios.append("c1 holds the lock and unlocks")
        other.set(name, mine, px=TTL_MS)
        if _run(report, "releases my lock", unlock, learner, name, mine):
            left = other.get(name)
            report.judge("releases my lock", left is None,
                         "my key is gone after my unlock" if left is None else
                         "my key is still there after my unlock: did the comparison fail? (GET returns bytes, "
                         "my_value is a str; or the Lua script compares the wrong argument)", "keeps my lock")

        report.scenarios.append("c2 holds the lock (c1's expired long ago), c1 unlocks")
        other.set(name, theirs, px=TTL_MS)
        if _run(report, "leaves another holder's lock alone", unlock, learner, name, mine):
            left = other.get(name)
            report.judge("leaves another holder's lock alone", left == theirs.encode(),
                         "c2's key survived c1's unlock" if left == theirs.encode() else
                         "c1's unlock deleted c2's lock: the DEL does not check that the value is still mine",
                         "no ownership check")

        report.scenarios.append("c1 holds; between c1's GET and its delete the key expires and c2 takes the lock")
        other.set(name, mine, px=TTL_MS)
        learner.after_next_get(name, lambda: _expire_and_take(other, name, theirs))
        if _run(report, "atomic check-and-delete", unlock, learner, name, mine):
            left = other.get(name)
            if name not in learner.raced:
                report.judge("atomic check-and-delete", True, "the unlock never read the key from the client: the "
                             "compare and the delete ran on the server in one step, with no window to slip into")
            elif left == theirs.encode():
                report.judge("atomic check-and-delete", True, "c2's lock survived the race")
            else:
                report.judge("atomic check-and-delete", False,
                             "GET then DEL: after c1's GET said 'mine', the key expired on the server and c2 took "
                             "the lock; c1's DEL then deleted c2's lock. Do the compare and the delete in one "
                             "Lua script (EVAL), which Redis runs atomically", "GET then DEL")
    finally:
        other.delete(name)
        learner.close()
        other.close()
    report.stop_clock()
    return report


def _run(report: Report, prop: str, unlock: Callable, client: Any, name: str, value: str) -> bool:
    try:
        unlock(client, name, value)
        return True
    except Exception as error:  # the learner's bug is reported, not raised
        report.judge(prop, False, f"unlock raised {type(error).__name__}: {error}", "raised")
        return False


def _expire_and_take(other: Any, name: str, value: str) -> None:
    """What the world did in the window: my key expires on the server, c2 takes the lock."""
    other.pexpire(name, 1)
    wait_until(lambda: not other.exists(name), timeout=5.0, what=f"the key {name} to expire on the server")
    if not other.set(name, value, nx=True, px=TTL_MS):
        raise RuntimeError(f"c2 could not take {name} after it expired")
