"""The contenders an exercise checker directs (labkit/practice/exercises/contention.py), on a
ticket lock of plain Python threads standing in for the learner's code: contenders joined one
at a time queue in the order of their names and ``drain`` serves them in that order, settling
the waiters before each release; every holder writes before it says "holding", so a broken
lock's two holders interleave in the resource's record; a learner's acquire or release that
raises is kept as the error of a contender that gave up; a lock that never answers, or a
crashed holder's, leaves the waiters reported stuck after ``patience`` (a bound that can only
be reached: nothing would wake them). The checkers on real servers: test_exercises.py and
test_practice_exercises.py. Pure logic: no server."""
from __future__ import annotations

import threading
import time

import pytest

from labkit.practice.exercises.contention import (CRASHED, GAVE_UP, HOLDING, RELEASED, WAITING, Contender, Resource,
                                                  drain, join_all, nobody_ever_held, queue_in_turn)
from labkit.timing import became_true

pytestmark = pytest.mark.no_servers

PATIENCE = 10.0


class TicketLock:
    """A FIFO lock: each acquire takes the next ticket and waits for it to be served."""

    def __init__(self):
        self.condition = threading.Condition()
        self.next_ticket = self.serving = 0
        self.waiting: set[str] = set()

    def acquire(self, name):
        with self.condition:
            ticket, self.next_ticket = self.next_ticket, self.next_ticket + 1
            self.waiting.add(name)
            self.condition.wait_for(lambda: self.serving == ticket)
            self.waiting.discard(name)
        return ticket, f"ticket-{ticket}"

    def release(self, node):
        with self.condition:
            self.serving += 1
            self.condition.notify_all()


def contenders_on(lock, resource, count, acquire=None, release=None):
    return [Contender(name, acquire or (lambda name=name: lock.acquire(name)), release or lock.release, resource)
            for name in (f"c{number}" for number in range(1, count + 1))]


def record(resource):
    return [(write["client"], write["token"], write["value"]) for write in resource.writes()]


def test_contenders_queue_in_name_order_and_drain_serves_them_so():
    lock, resource = TicketLock(), Resource()
    contenders = contenders_on(lock, resource, 3)
    queue_in_turn(contenders, lambda contender: contender.name in lock.waiting, PATIENCE)
    assert [c.state for c in contenders] == [HOLDING, WAITING, WAITING]
    settled = []
    assert drain(contenders, lambda waiters: settled.append([c.name for c in waiters]), PATIENCE) == []
    assert settled == [["c2", "c3"], ["c3"], []], "the waiters are settled before each release"
    assert [c.state for c in contenders] == [RELEASED] * 3 and [c.token for c in contenders] == [0, 1, 2]
    assert record(resource) == [("c1", 0, "first write"), ("c1", 0, "last write"), ("c2", 1, "first write"),
                                ("c2", 1, "last write"), ("c3", 2, "first write"), ("c3", 2, "last write")]
    assert not nobody_ever_held(contenders)


def test_two_holders_of_a_broken_lock_interleave_in_the_record():
    resource = Resource()
    contenders = contenders_on(None, resource, 2, acquire=lambda: (None, "no-node"), release=lambda node: None)
    queue_in_turn(contenders, lambda contender: False, PATIENCE)
    assert [c.state for c in contenders] == [HOLDING, HOLDING]
    assert drain(contenders, lambda waiters: None, PATIENCE) == []
    assert record(resource) == [("c1", None, "first write"), ("c2", None, "first write"),
                                ("c1", None, "last write"), ("c2", None, "last write")]


def test_a_learners_acquire_or_release_that_raises_is_kept_and_the_rest_is_served():
    lock, resource = TicketLock(), Resource()

    def broken_acquire():
        raise KeyError("no such node")

    def broken_release(node):
        raise RuntimeError(f"cannot delete {node}")

    [first] = contenders_on(lock, resource, 1, release=broken_release)
    [second] = contenders_on(lock, resource, 1, acquire=broken_acquire)
    second.name = "c2"
    queue_in_turn([first, second], lambda contender: contender.name in lock.waiting, PATIENCE)
    assert second.state == GAVE_UP and isinstance(second.error, KeyError) and second.acquired_at is None
    assert drain([first, second], lambda waiters: None, PATIENCE) == []
    assert first.state == GAVE_UP and str(first.error) == "cannot delete ticket-0"
    assert record(resource) == [("c1", 0, "first write"), ("c1", 0, "last write")], "it wrote, then failed to release"
    join_all([first, second])
    assert nobody_ever_held([second]) and not nobody_ever_held([first, second])


def test_a_lock_that_never_answers_is_stuck_after_patience_and_later_joins_wait_a_tenth():
    answered, resource = threading.Event(), Resource()

    def hangs():
        answered.wait()
        raise TimeoutError("the test gave up on it")

    contenders = contenders_on(None, resource, 3, acquire=hangs, release=lambda node: None)
    patience = 0.4
    started = time.monotonic()
    queue_in_turn(contenders, lambda contender: False, patience)
    assert time.monotonic() - started >= patience + 2 * patience / 10
    assert drain(contenders, lambda waiters: None, patience) == ["c1", "c2", "c3"]
    assert nobody_ever_held(contenders) and resource.writes() == []
    answered.set()
    join_all(contenders, PATIENCE)
    assert [c.state for c in contenders] == [GAVE_UP] * 3


def test_a_crashed_holder_writes_and_releases_nothing_and_its_waiter_is_stuck():
    lock, resource = TicketLock(), Resource()
    holder, waiter = contenders_on(lock, resource, 2)
    queue_in_turn([holder, waiter], lambda contender: contender.name in lock.waiting, PATIENCE)
    holder.crash()
    assert became_true(lambda: holder.state == CRASHED, PATIENCE)
    assert drain([holder, waiter], lambda waiters: None, 0.3) == ["c2"]
    assert record(resource) == [("c1", 0, "first write")] and waiter.state == WAITING
    lock.release("ticket-0")          # what the server does once the dead holder's session ends
    assert drain([holder, waiter], lambda waiters: None, PATIENCE) == []
    assert waiter.state == RELEASED and record(resource)[1:] == [("c2", 1, "first write"), ("c2", 1, "last write")]


def test_a_contender_crashed_while_it_waited_never_writes():
    lock, resource = TicketLock(), Resource()
    holder, waiter = contenders_on(lock, resource, 2)
    queue_in_turn([holder, waiter], lambda contender: contender.name in lock.waiting, PATIENCE)
    waiter.crash()
    assert drain([holder, waiter], lambda waiters: None, PATIENCE) == []
    assert became_true(lambda: waiter.state == CRASHED, PATIENCE)
    assert [write["client"] for write in resource.writes()] == ["c1", "c1"]
    assert waiter.acquired_at is not None, "it got the lock, as a dead process's session can"
