"""Exercise (lesson 04): the protected store checks the fencing token itself.

The learner writes the store's side of fencing, on Redis, in the layout of
``labkit.record.fencing.FencedStore`` (the value at ``NAME:value``, the highest token
accepted so far at ``NAME:highest-token``):

    def fenced_put(client, name, token, value) -> bool   # True if the write was accepted

A write is accepted if its token is at least the highest accepted so far (a holder may
write more than once); a lower token is refused and leaves the value alone.
``check_fenced_write(fenced_put, lab)`` runs it with tokens from a real ZooKeeper lock:

1. c1 holds the lock (token t1) and stalls; the server expires its session, c2 gets the
   lock (token t2 > t1) and writes; c1 wakes and writes late: refused?
2. c2 writes twice with its token: both accepted?
3. the race: c1 writes with t1, and between its read of the highest token and its write
   c2 writes with t2 (through the real FencedStore). A check in Python followed by a SET
   overwrites c2's value; one Lua script cannot be split.

What can fail: ``ExerciseError`` if ``fenced_put`` is not callable; kazoo and redis-py
connection errors if the lab's servers cannot be reached.
"""
from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Callable

from labkit.faults import expire_session
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.practice.exercises.racing import RacingRedis
from labkit.practice.exercises.report import Report, learner_function
from labkit.record.fencing import FencedStore

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

PROPERTIES = ("refuses the late write", "accepts the holder's writes", "atomic check-and-write")


def check_fenced_write(fenced_put: Callable, lab: Lab) -> Report:
    """Run ``fenced_put(client, name, token, value)`` with real lock tokens and judge it."""
    learner_function(fenced_put, hint="pass fenced_put(client, name, token, value) -> bool")
    report = Report("fenced write exercise", properties=PROPERTIES)
    name = f"exercise:fenced:{uuid.uuid4().hex[:8]}"
    learner = RacingRedis(host=lab.redis.host, port=lab.redis.port, socket_timeout=5.0, **lab.redis.auth)
    store = FencedStore(lab.redis.client(), name)     # how the checker reads and how c2 writes in the race
    try:
        t1, t2 = _two_tokens_across_an_expiry(lab, name)
        report.scenarios.append(f"c1 (token {t1}) stalls, its session expires, c2 (token {t2}) writes, c1 writes late")
        _late_write(report, fenced_put, learner, store, t1, t2)
        report.scenarios.append("c2 writes twice with its token")
        _holder_writes_twice(report, fenced_put, learner, store, t2)
        report.scenarios.append("c2 writes between c1's read of the highest token and c1's write")
        _race(report, fenced_put, learner, store, t1, t2)
    finally:
        store.reset()
        store.client.close()
        learner.close()
    report.stop_clock()
    return report


def _two_tokens_across_an_expiry(lab: Lab, name: str) -> tuple[int, int]:
    """Tokens of two real holders: c1's session is expired by the server, then c2 gets the lock."""
    path = f"/exercises/{name.replace(':', '-')}"
    first, second = lab.zookeeper.client(), lab.zookeeper.client()
    try:
        t1 = ZooKeeperLock(first, path, "c1").acquire(timeout=10)
        session_id, password = first.client_id
        expire_session(lab.zookeeper.hosts, session_id, password)
        lock = ZooKeeperLock(second, path, "c2")
        t2 = lock.acquire(timeout=10)
        lock.release()
        return t1, t2
    finally:
        for client in (first, second):
            client.stop()
            client.close()


def _put(report: Report, prop: str, fenced_put: Callable, *args: Any) -> bool | None:
    try:
        return bool(fenced_put(*args))
    except Exception as error:
        report.judge(prop, False, f"fenced_put raised {type(error).__name__}: {error}", "raised")
        return None


def _late_write(report: Report, fenced_put: Callable, client: Any, store: FencedStore, t1: int, t2: int) -> None:
    store.reset()
    prop = "refuses the late write"
    if _put(report, prop, fenced_put, client, store.name, t1, "c1 before its stall") is None:
        return
    if _put(report, prop, fenced_put, client, store.name, t2, "c2's write") is None:
        return
    accepted = _put(report, prop, fenced_put, client, store.name, t1, "c1's late write")
    if accepted is None:
        return
    value = store.value()
    if value == "c2's write" and not accepted:
        report.judge(prop, True, f"c1's late write with token {t1} was refused; c2's value stands")
    elif value == "c2's write":
        report.judge(prop, False, "the value is right but fenced_put returned True for the refused write: "
                     "return whether the store accepted it", "wrong answer")
    else:
        report.judge(prop, False, f"c1's late write (token {t1}) overwrote c2's (token {t2}): the store "
                     f"never compared the token with the highest it had accepted; the value is now {value!r}",
                     "no token check")


def _holder_writes_twice(report: Report, fenced_put: Callable, client: Any, store: FencedStore, t2: int) -> None:
    store.reset()
    prop = "accepts the holder's writes"
    answers = [_put(report, prop, fenced_put, client, store.name, t2, f"c2 write {number}") for number in (1, 2)]
    if None in answers:
        return
    value = store.value()
    if answers == [True, True] and value == "c2 write 2":
        report.judge(prop, True, "both writes with the same token were accepted")
    else:
        report.judge(prop, False, f"a holder's second write with the same token {t2} was refused (the value is "
                     f"{value!r}): refuse only tokens LOWER than the highest, not equal ones", "refuses equal token")


def _race(report: Report, fenced_put: Callable, client: Any, store: FencedStore, t1: int, t2: int) -> None:
    store.reset()
    prop = "atomic check-and-write"
    client.after_next_get(f"{store.name}:highest-token", lambda: store.write("c2", t2, "c2's write"))
    accepted = _put(report, prop, fenced_put, client, store.name, t1, "c1's write")
    if accepted is None:
        return
    value, highest = store.value(), store.highest_token()
    if f"{store.name}:highest-token" not in client.raced:
        report.judge(prop, True, "fenced_put never read the highest token from the client: the compare ran on "
                     "the server, in one step (if it ran at all: see the late write)")
    elif value == "c2's write" and highest == t2:
        report.judge(prop, True, "the check and the write could not be split: c2's newer write stands")
    else:
        report.judge(prop, False, f"check, then write: after c1 read the highest token, c2 wrote with {t2}; c1's "
                     f"write with {t1} then overwrote it (value {value!r}, highest token {highest}). Do the "
                     "compare and both SETs in one Lua script", "check then write")
