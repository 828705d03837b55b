"""One scenario of an exercise: what every run holds and does, whichever server it uses.

A run (``ZooKeeperRun``, ``EtcdRun``) starts contenders c1, c2, ... on ``path`` one at a
time, records their events in ``history`` and their writes in ``resource``, lets each
holder go in turn (``drain``) and answers the diagnosis' questions
(``labkit.practice.exercises.diagnosis``). A subclass says what a queue entry is called,
how to make a contender, when a waiter counts as queued, how to settle the waiters
before a release, and what woke a waiter last.

What can fail: a learner's code that hangs, raises or returns early (see ``contention``);
a run whose contenders neither hold nor wait within ``patience`` is reported stuck.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.practice.exercises.contention import WAITING, Contender, Resource, drain, queue_in_turn
from labkit.record.history import History
from labkit.timing import became_true

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


class ExerciseRun:
    """The state every scenario shares; subclasses fill in the words and the hooks."""

    entry = "entry"            # what a queue entry is called: "node", "key"
    session_lost = "session ended"
    entries_die = "entries die with the session"

    def __init__(self, lab: Lab, path: str, title: str, patience: float):
        self.lab, self.path, self.title, self.patience = lab, path, title, patience
        self.history = History()
        self.resource = Resource()
        self.contenders: list[Contender] = []
        self.acquired_while_not_lowest: dict[str, str] = {}   # client -> whose entry was lowest then
        self.expired: set[str] = set()                        # clients whose session the checker ended
        self.stuck: list[str] = []

    # ---- hooks ------------------------------------------------------------------------------
    def new_contender(self, name: str) -> Contender:
        """Make contender ``name`` on the learner's recipe and add it to ``contenders``."""
        raise NotImplementedError

    def queued(self, contender: Contender) -> bool:
        """True once ``contender`` waits in the queue (on a watch)."""
        raise NotImplementedError

    def settle(self, waiters: list[Contender]) -> None:
        """Return once every waiter has handled what woke it and waits again."""
        raise NotImplementedError

    def last_woken_by(self, name: str) -> str | None:
        """The entry whose change last woke ``name`` (None if no watch of it fired)."""
        raise NotImplementedError

    def owner_of(self, entry: str | None) -> str:
        raise NotImplementedError

    def end_session(self, name: str) -> None:
        """The server ends ``name``'s session or lease now: its queue entry goes with it."""
        raise NotImplementedError

    def has_left(self, name: str) -> bool:
        """True once ``name``, whose session ended, no longer waits on its old entry."""
        return self.contender(name).state != WAITING

    # ---- the script's steps ---------------------------------------------------------------------
    def queue_up(self, count: int) -> None:
        """Start ``count`` contenders one at a time, each joining once the one before it
        holds the lock or waits on a watch, so the queue order is c1, c2, ..."""
        joining = [self.new_contender(f"c{number}") for number in range(len(self.contenders) + 1,
                                                                   len(self.contenders) + count + 1)]
        queue_in_turn(joining, self.queued, self.patience)

    def contender(self, name: str) -> Contender:
        return next(c for c in self.contenders if c.name == name)

    def drain(self) -> None:
        self.stuck += drain(self.contenders, self.settle, self.patience)

    # ---- what the diagnosis asks --------------------------------------------------------------
    def woken_by_owner(self, name: str) -> str | None:
        """Whose entry's change last woke ``name`` (None if no watch of it fired)."""
        woken_by = self.last_woken_by(name)
        return None if woken_by is None else self.owner_of(woken_by)


# ---- scripts every exercise plays ----------------------------------------------------------------
def queue_and_drain(run: ExerciseRun, clients: int) -> None:
    """``clients`` queue one by one, then each holder lets go in turn."""
    run.queue_up(clients)
    run.drain()


def middle_waiter_leaves(run: ExerciseRun) -> None:
    """c1 holds, c2, c3, c4 wait; c2's session ends while c1 holds: c3 wakes, must re-check
    and keep waiting (c1 still holds); then everyone left is served."""
    run.queue_up(4)
    run.end_session("c2")
    run.settle([c for c in run.contenders if c.name in ("c3", "c4")])
    became_true(lambda: run.has_left("c2"), run.patience)
    run.drain()
