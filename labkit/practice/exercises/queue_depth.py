"""Exercise (lesson 06): how many clients wait for a ZooKeeper lock right now?

Queue depth is the first number of a lock's health: waiters, not contenders. The learner
writes

    def waiters(client, lock_path) -> int      # client: a kazoo client

``check_queue_depth(waiters, lab)`` asks it on a real ZooKeeper while real
``ZooKeeperLock`` clients queue: nobody there, a holder alone, a holder and three
waiters, then after the holder's session is expired by the server.

What can fail: ``ExerciseError`` if ``waiters`` is not callable; kazoo's errors if the
lab's ZooKeeper cannot be reached.
"""
from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable

from labkit.faults import expire_session
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.practice.exercises.report import Report, learner_function
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

PROPERTIES = ("counts waiters, not the holder", "follows the queue")


def check_queue_depth(waiters: Callable, lab: Lab, queued: int = 3) -> Report:
    """Ask ``waiters(client, lock_path)`` at each step of a real queue and judge the answers."""
    learner_function(waiters, hint="pass waiters(client, lock_path) -> int")
    report = Report("lock queue depth exercise", properties=PROPERTIES)
    path = f"/exercises/depth-{uuid.uuid4().hex[:8]}"
    observer = lab.zookeeper.client()
    clients = [lab.zookeeper.client() for _ in range(queued + 1)]
    locks = [ZooKeeperLock(client, path, f"c{number}") for number, client in enumerate(clients, 1)]
    try:
        observer.ensure_path(path)
        report.scenarios.append("nobody queues")
        if not _ask(report, waiters, observer, path, 0, "counts waiters, not the holder"):
            return report
        locks[0].acquire(timeout=10)
        report.scenarios.append("c1 holds, nobody waits")
        if not _ask(report, waiters, observer, path, 0, "counts waiters, not the holder"):
            return report
        for lock in locks[1:]:
            threading.Thread(target=_acquire_quietly, args=(lock,), daemon=True).start()
        wait_until(lambda: len(observer.get_children(path)) == queued + 1, f"{queued} waiters to queue", 10)
        report.scenarios.append(f"c1 holds, {queued} wait")
        if not _ask(report, waiters, observer, path, queued, "counts waiters, not the holder"):
            return report
        session_id, password = clients[0].client_id
        expire_session(lab.zookeeper.hosts, session_id, password)
        wait_until(lambda: any(lock.is_held for lock in locks[1:]),
                   "a waiter to take the lock after c1's session expired", 10)
        report.scenarios.append("c1's session expired: the next waiter holds")
        _ask(report, waiters, observer, path, queued - 1, "follows the queue")
    finally:
        for client in clients + [observer]:
            client.stop()
            client.close()
        report.stop_clock()
    return report


def _acquire_quietly(lock: ZooKeeperLock) -> None:
    try:
        lock.acquire(timeout=30)
    except Exception:  # the checker stops the clients while they wait; that is expected
        pass


def _ask(report: Report, waiters: Callable, client: Any, path: str, expected: int, prop: str) -> bool:
    try:
        answer = waiters(client, path)
    except Exception as error:
        report.judge(prop, False, f"waiters raised {type(error).__name__}: {error}", "raised")
        return False
    holders = len(client.get_children(path))
    if not isinstance(answer, int) or isinstance(answer, bool):
        report.judge(prop, False, f"returned {answer!r}, not a count: return how many clients wait, an int",
                     "not a number")
        return False
    if answer == expected:
        report.judge(prop, True, f"{expected} waiting, {holders} lock node(s) in the queue: right")
        return True
    hint = (" (the holder's node is not a waiter: count the children, minus one if any)"
            if answer == holders else "")
    if expected == 0 and answer < 0:
        hint = " (an empty queue has no holder to subtract)"
    report.judge(prop, False, f"said {answer}; the queue has {holders} lock node(s) and {expected} are waiting{hint}",
                 "counts the holder" if answer == holders else "wrong count")
    return False
