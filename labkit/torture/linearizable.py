"""Is a lock history linearizable against a mutex with leases? A search, for this one model.

What can go wrong first: the search is exponential in the worst case (Wing & Gong), so it
has a budget of explored states; past it the verdict is "unknown", never a guess. And the
verdict is only as good as the operations fed to it: an interval that is too narrow (an
invoke stamped late, a completion stamped early) can invent a violation; too wide only
hides one. ``labkit.torture.verdict`` builds the operations from a History so that every
interval is at least as wide as the real one.

The model. The lock's state is its holder (a client and which of its holds, or nobody) and
the holds whose lease lapsed. Operations, each with the time it was invoked and the time it
completed (None: it never completed, e.g. the client was killed; it may have taken effect
at any time after its invoke, or never, as Knossos treats an indeterminate operation):

* ``acquire(p)``: legal when nobody holds, or p holds already (after a release that failed
  and did not happen, a recipe finds its own queue entry again); p holds.
* ``release(p)``: legal when p holds (nobody holds then), or when p's lease had lapsed
  (a release of a lock already lost changes nothing); otherwise illegal.
* ``lapse(p)``: the server ended p's session, lease or TTL. Either p held (that hold, for
  a TTL, which belongs to the key it was set with; any hold, for a session) and now nobody
  does, the hold being remembered as lapsed, or nothing changed: a lapse is always
  optional. Its interval is the window in which the server may have done it (after a
  pause or a kill of p began, before p heard "lost", after its TTL ran out).

The search is Wing & Gong's, with Lowe's memoization of (linearized set, state) as in
Porcupine: walk the calls in time order, linearize a call whose step is legal, and
backtrack when a completion is reached whose call is not yet linearized.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

NOBODY = None
ACTIONS = ("acquire", "release", "lapse")
DEFAULT_BUDGET = 500_000


@dataclass(frozen=True)
class Operation:
    """One operation on the lock. ``complete`` None: it never completed (indeterminate)."""

    process: str
    action: str   # one of ACTIONS
    invoke: float
    complete: float | None
    why: str = ""  # where it came from, for explanations ("pause of client-2", ...)
    hold: int | None = 0  # which of the process's holds it acquires, releases or ends (lapse: None = any)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown operation {self.action!r}; one of {', '.join(ACTIONS)}")
        if self.complete is not None and self.complete < self.invoke:
            raise ValueError(f"{self.action} of {self.process} completes ({self.complete}) before it "
                             f"is invoked ({self.invoke})")

    def describe(self, origin: float = 0.0) -> str:
        end = "never completed" if self.complete is None else f"{self.complete - origin:.3f} s"
        what = f"{self.action} by {self.process}" if self.action != "lapse" else f"lapse of {self.process}'s lease"
        return f"{what} [{self.invoke - origin:.3f} s → {end}]" + (f" ({self.why})" if self.why else "")


State = tuple  # (holder: (process, hold) or None, frozenset of lapsed (process, hold))
INITIAL: State = (NOBODY, frozenset())


def step(state: State, op: Operation) -> list[State]:
    """The states ``op`` can lead to from ``state`` (empty: illegal there)."""
    holder, lapsed = state
    mine = (op.process, op.hold)
    if op.action == "acquire":
        free = holder is NOBODY or holder[0] == op.process
        return [(mine, lapsed - {mine})] if free else []
    if op.action == "release":
        if holder == mine:
            return [(NOBODY, lapsed)]
        return [(holder, lapsed - {mine})] if mine in lapsed else []
    # a lapse: the holder's lease ends (this hold's, or any of the process's if hold is None),
    # or it did not end yet
    if holder is not NOBODY and holder[0] == op.process and op.hold in (None, holder[1]):
        return [(NOBODY, lapsed | {holder}), state]
    return [state]


@dataclass
class Linearizability:
    """``ok``: True (a legal order exists), False (none does), None (budget exhausted)."""

    ok: bool | None
    operations: int
    explored: int
    explanation: str
    stuck_at: Operation | None = None
    blocking: Operation | None = None  # the acquire still holding the lock where the search got stuck
    order: list[Operation] = field(default_factory=list)  # the longest legal prefix found


def check_mutex(operations: Iterable[Operation], budget: int = DEFAULT_BUDGET, origin: float = 0.0) -> Linearizability:
    """Search for a legal order of ``operations`` that respects their real-time intervals."""
    ops = list(operations)
    count = len(ops)
    # entries: (time, 0 = call / 1 = return, op index); calls first at equal times (more permissive)
    entries = sorted([(op.invoke, 0, i) for i, op in enumerate(ops)]
                     + [(math.inf if op.complete is None else op.complete, 1, i) for i, op in enumerate(ops)])
    # a doubly linked list over entries; slot 0 is the head sentinel
    size = len(entries) + 1
    following = list(range(1, size + 1))
    following[-1] = -1
    preceding = list(range(-1, size - 1))
    call_slot, return_slot = [0] * count, [0] * count
    for slot, (_, returns, index) in enumerate(entries, start=1):
        (return_slot if returns else call_slot)[index] = slot

    def lift(index: int) -> None:
        for slot in (call_slot[index], return_slot[index]):
            preceding_slot, following_slot = preceding[slot], following[slot]
            following[preceding_slot] = following_slot
            if following_slot != -1:
                preceding[following_slot] = preceding_slot

    def unlift(index: int) -> None:
        for slot in (return_slot[index], call_slot[index]):
            following[preceding[slot]] = slot
            if following[slot] != -1:
                preceding[following[slot]] = slot

    state, linearized = INITIAL, 0
    seen: set[tuple[int, State]] = set()
    stack: list[tuple[int, State, int]] = []  # (op index, state before, outcome taken)
    best: tuple[float, Operation | None, State, list[int]] = (-math.inf, None, INITIAL, [])
    explored = 0
    slot = following[0]

    def try_from(index: int, first_outcome: int) -> bool:
        nonlocal state, linearized, slot, explored
        outcomes = step(state, ops[index])
        for outcome in range(first_outcome, len(outcomes)):
            key = (linearized | (1 << index), outcomes[outcome])
            if key in seen:
                continue
            seen.add(key)
            explored += 1
            stack.append((index, state, outcome))
            state, linearized = outcomes[outcome], linearized | (1 << index)
            lift(index)
            slot = following[0]
            return True
        return False

    while following[0] != -1:
        if explored > budget:
            return Linearizability(None, count, explored, f"undecided: the search explored {explored} states "
                                   "without an answer; check a shorter run")
        time_of, returns, index = entries[slot - 1]
        if time_of == math.inf:
            break  # only indeterminate operations are left: they may never have happened
        if not returns:
            if not try_from(index, 0):
                slot = following[slot]
            continue
        # a completion whose call could not be linearized before it: note how far we got, backtrack
        if time_of > best[0]:
            best = (time_of, ops[index], state, [entry[0] for entry in stack])
        if not stack:
            return _violation(ops, count, explored, best, origin)
        popped, state, outcome = stack.pop()
        linearized &= ~(1 << popped)
        unlift(popped)
        if not try_from(popped, outcome + 1):  # its other outcome, else move past its call
            slot = following[call_slot[popped]]
    order = [ops[entry[0]] for entry in stack]
    return Linearizability(True, count, explored, f"linearizable: {count} operations fit a mutex with leases "
                           f"in real-time order ({explored} states explored).", order=order)


def _violation(ops: list[Operation], count: int, explored: int, best, origin: float) -> Linearizability:
    _, stuck, state, prefix = best
    order = [ops[index] for index in prefix]
    holder = state[0][0] if state[0] is not None else None
    blocking = next((op for op in reversed(order) if op.action == "acquire" and op.process == holder), None)
    if stuck is None:
        text = "not linearizable: no operation could be placed first."
    elif stuck.action == "acquire" and blocking is not None:
        text = (f"not linearizable: {stuck.describe(origin)} completed while {holder} held the lock "
                f"(since its {blocking.describe(origin)}), and no release by {holder} and no lapse of its "
                f"lease (no fault on it, no TTL run out) could have ended that hold before.")
    elif stuck.action == "release":
        text = (f"not linearizable: {stuck.describe(origin)}, but in every legal order {stuck.process} did not "
                f"hold the lock then (holder: {holder or 'nobody'}).")
    else:
        text = f"not linearizable: {stuck.describe(origin)} cannot be placed (holder then: {holder or 'nobody'})."
    return Linearizability(False, count, explored, text, stuck_at=stuck, blocking=blocking, order=order)
