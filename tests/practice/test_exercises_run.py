"""One scenario of an exercise (labkit/practice/exercises/run.py), played on an ExerciseRun
whose hooks are a ticket lock of plain Python threads (a waiter whose session ends gives up,
and its ticket is skipped): queue_up names the contenders c1, c2, ... on from those already
there and queues them in that order; drain serves them so and adds the stuck ones to the
run's; woken_by_owner names whose entry woke a waiter; middle_waiter_leaves ends c2's session
while c1 holds, and the others are still served in order. The real runs (ZooKeeper, etcd):
test_exercises.py. Pure logic: no server."""
from __future__ import annotations

import threading

import pytest

from labkit.practice.exercises.contention import GAVE_UP, HOLDING, RELEASED, WAITING, Contender
from labkit.practice.exercises.run import ExerciseRun, middle_waiter_leaves, queue_and_drain
from labkit.timing import wait_until

pytestmark = pytest.mark.no_servers

PATIENCE = 10.0


class SessionEnded(Exception):
    pass


class TicketRun(ExerciseRun):
    """A run on a FIFO ticket lock: each contender takes the next ticket; a release or an
    ended session changes an entry and wakes every waiter, which re-checks its turn."""

    entry = "ticket"

    def __init__(self, patience=PATIENCE, hangs=False):
        super().__init__(lab=None, path="/tickets", title="tickets", patience=patience)
        self.condition = threading.Condition()
        self.tickets: dict[str, int] = {}      # name -> its ticket
        self.done: set[int] = set()            # tickets released or whose session ended
        self.waiting: set[str] = set()
        self.woken_by: dict[str, str] = {}     # name -> the entry whose change last woke it
        self.changed: str | None = None
        self.hangs = hangs

    def _serving(self) -> int:
        return min((ticket for ticket in self.tickets.values() if ticket not in self.done), default=-1)

    def new_contender(self, name):
        def acquire():
            with self.condition:
                ticket = self.tickets[name] = len(self.tickets)
                self.waiting.add(name)
                while self.hangs or self._serving() != ticket:
                    self.condition.wait()
                    if self.changed is not None:
                        self.woken_by[name] = self.changed
                    if ticket in self.done:
                        self.waiting.discard(name)
                        raise SessionEnded(f"{name}'s session ended")
                self.waiting.discard(name)
            self.history.sink(name)("acquired", token=ticket)
            return ticket, f"ticket-{ticket}"

        def release(node):
            self.history.sink(name)("released")
            self._change(int(node.rsplit("-", 1)[1]))

        contender = Contender(name, acquire, release, self.resource)
        self.contenders.append(contender)
        return contender

    def _change(self, ticket):
        with self.condition:
            self.done.add(ticket)
            self.changed = f"ticket-{ticket}"
            self.condition.notify_all()

    def queued(self, contender):
        with self.condition:
            return contender.name in self.waiting

    def settle(self, waiters):
        pass   # a woken waiter re-checks under the condition's lock: nothing is in flight

    def last_woken_by(self, name):
        return self.woken_by.get(name)

    def owner_of(self, entry):
        number = int(entry.rsplit("-", 1)[1])
        return next(name for name, ticket in self.tickets.items() if ticket == number)

    def end_session(self, name):
        self.expired.add(name)
        self._change(self.tickets[name])

    def close(self):
        for contender in self.contenders:
            contender.crash()
        self.hangs = False
        for name in list(self.tickets):
            self._change(self.tickets[name])


def states(run):
    return {contender.name: contender.state for contender in run.contenders}


def test_queue_and_drain_serves_the_contenders_in_the_order_they_queued():
    run = TicketRun()
    try:
        queue_and_drain(run, 4)
        assert states(run) == dict.fromkeys(["c1", "c2", "c3", "c4"], RELEASED) and run.stuck == []
        assert run.history.acquisition_order() == ["c1", "c2", "c3", "c4"]
        assert [run.contender(name).token for name in ("c1", "c4")] == [0, 3]
        assert run.woken_by_owner("c4") == "c3" and run.woken_by_owner("c1") is None, "c1 never waited"
    finally:
        run.close()


def test_queue_up_names_the_newcomers_after_those_already_there():
    run = TicketRun()
    try:
        run.queue_up(2)
        run.queue_up(2)
        assert [contender.name for contender in run.contenders] == ["c1", "c2", "c3", "c4"]
        assert states(run) == {"c1": HOLDING, "c2": WAITING, "c3": WAITING, "c4": WAITING}
        assert [run.tickets[name] for name in ("c1", "c2", "c3", "c4")] == [0, 1, 2, 3], "queued in name order"
        run.drain()
        assert run.history.acquisition_order() == ["c1", "c2", "c3", "c4"]
    finally:
        run.close()


def test_a_middle_waiter_leaves_and_the_one_behind_it_was_woken_by_its_entry():
    run = TicketRun()
    try:
        run.queue_up(4)
        run.end_session("c2")
        run.contender("c2").join(PATIENCE)
        assert run.has_left("c2") and run.contender("c2").state == GAVE_UP
        assert isinstance(run.contender("c2").error, SessionEnded)
        # c3 woke when c2's entry went (its thread may run a moment later), and went on waiting
        wait_until(lambda: run.woken_by_owner("c3") == "c2", "c3 woken by c2's entry", PATIENCE)
        assert states(run)["c3"] == WAITING and states(run)["c1"] == HOLDING
        run.drain()
        assert run.history.acquisition_order() == ["c1", "c3", "c4"] and run.woken_by_owner("c3") == "c1"
    finally:
        run.close()


def test_middle_waiter_leaves_plays_the_whole_script():
    run = TicketRun()
    try:
        middle_waiter_leaves(run)
        assert states(run) == {"c1": RELEASED, "c2": GAVE_UP, "c3": RELEASED, "c4": RELEASED}
        assert run.expired == {"c2"} and run.stuck == []
        assert [write["client"] for write in run.resource.writes()] == ["c1", "c1", "c3", "c3", "c4", "c4"]
    finally:
        run.close()


def test_waiters_nothing_serves_are_added_to_the_runs_stuck():
    run = TicketRun(patience=0.3, hangs=True)
    try:
        run.queue_up(2)
        run.drain()
        assert run.stuck == ["c1", "c2"] and run.history.acquisition_order() == []
        run.drain()
        assert run.stuck == ["c1", "c2", "c1", "c2"], "each drain adds the clients it found stuck"
    finally:
        run.close()
