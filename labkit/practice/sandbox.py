"""The ZooKeeper lock recipe on an in-memory model: no server, no threads, no clock.

What goes wrong here is what goes wrong on a real ensemble, slowed down so you can watch
it: a waiter that watches the parent is woken by every change (a herd), and a waiter that
trusts a watch without re-checking can take the lock while an earlier node still holds it
(two holders). Nothing is delivered until you call ``step()`` or ``run()``; notifications
wait in a queue, in the order the coordinator fired them, so every run is the same.

The coordinator (the server's side: nodes, sessions, one-shot watches) is in
``sandbox_coordinator.py``; this module holds the clients, their strategies and ``evaluate``.

A *strategy* decides what a client does each time it looks at the queue: any function
``strategy(view) -> str``. ``view.my_node`` is my node, ``view.children`` all children
sorted by sequence, ``view.woken_by`` the node whose change woke me (None on the first
look). Return ``"hold"`` to take the lock, the name of another child to watch that node
(an exists-watch: it fires when the node is deleted), or ``"parent"`` to watch the parent
(a children-watch: it fires when any child is created or deleted). A strategy that
returns anything else raises ``StrategyError``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from labkit.errors import LabError
from labkit.record import history
from labkit.record.events import Event
from labkit.practice.sandbox_coordinator import Coordinator, Release

class StrategyError(LabError):
    """A strategy returned something the recipe cannot act on."""


class MutualExclusionViolated(LabError):
    """Two clients held the lock at the same time."""


class Stuck(LabError):
    """Clients are waiting, nobody holds the lock, and no notification will ever come."""


@dataclass(frozen=True)
class View:
    """What a client sees when it looks: the input of a strategy."""

    my_node: str
    children: tuple[str, ...]
    woken_by: str | None = None

    @property
    def predecessor(self) -> str | None:
        """The largest node below mine, or None when mine is the lowest."""
        index = self.children.index(self.my_node)
        return self.children[index - 1] if index else None


def watch_predecessor(view: View) -> str:
    """The recipe: the lowest holds; everyone else watches the node just below theirs.
    Because it looks again on every wake-up, a vanished waiter is not mistaken for a release."""
    return "hold" if view.predecessor is None else view.predecessor


def watch_parent(view: View) -> str:
    """Safe but wasteful: every waiter watches the parent, so every change wakes them all."""
    return "hold" if view.predecessor is None else "parent"


def watch_lowest(view: View) -> str:
    """Also a herd: every waiter watches the holder's node, so its deletion wakes them all."""
    return "hold" if view.predecessor is None else view.children[0]


def skip_recheck(view: View) -> str:
    """Broken: after a wake-up it assumes the deleted node was the holder and takes the lock."""
    return "hold" if view.woken_by is not None else watch_predecessor(view)


STRATEGIES: dict[str, Callable[[View], str]] = {
    "predecessor": watch_predecessor, "parent": watch_parent,
    "lowest": watch_lowest, "no-recheck": skip_recheck,
}


@dataclass
class Client:
    """One lock client; its session has the same name."""

    name: str
    strategy: Callable[[View], str]
    node: str = ""
    state: str = "waiting"          # waiting, holding, released, expired
    watching: str = ""              # how the trace names what it watches


class Sandbox:
    """Clients taking one lock on a Coordinator; ``sim.trace()`` tells what happened."""

    def __init__(self, strategy: str | Callable[[View], str] = "predecessor"):
        self.coordinator = Coordinator()
        self.strategy = _resolve(strategy)
        self.clients: dict[str, Client] = {}
        self.releases: list[Release] = []
        self.violations: list[tuple[int, tuple[str, ...]]] = []   # (step, holders) whenever > 1
        self.steps = 0
        self._order: list[str] = []
        self._trace: list[str] = []
        # the recipe's events, as a real run records them (one tick of time each), so that
        # wakeups are counted by the one definition, labkit.record.history.wakeups_per_release
        self.events: list[Event] = []

    # --- what a learner does ---------------------------------------------------------
    def add_clients(self, count: int, strategy: str | Callable[[View], str] | None = None) -> list[str]:
        """Start ``count`` clients, one after another; each creates its node and looks once."""
        chosen = self.strategy if strategy is None else _resolve(strategy)
        added = []
        for _ in range(count):
            client = Client(f"c{len(self.clients) + 1}", chosen)
            self.clients[client.name] = client
            client.node = self.coordinator.create_sequential(client.name)
            self._look(client, f"{client.name} created {client.node}", woken_by=None)
            added.append(client.name)
        return added

    def release(self, name: str) -> None:
        """The holder deletes its node. Raises LabError if ``name`` does not hold the lock."""
        client = self._client(name)
        if client.state != "holding":
            raise LabError(f"{name} does not hold the lock (it is {client.state})",
                           hint=f"release a holder: {', '.join(self.holders()) or 'nobody holds it now'}")
        node = client.node
        self._leave(client, "released")
        self._tick(f"{name} released: deleted {node}")

    def expire(self, name: str) -> None:
        """The client's session dies: its ephemeral node and its watches vanish."""
        client = self._client(name)
        if client.state in ("released", "expired"):
            raise LabError(f"{name} has already left ({client.state})", hint="expire a live client")
        node, was_holding = client.node, client.state == "holding"
        self._leave(client, "expired")
        self._tick(f"{name}'s session expired: {node} deleted" + (" (it held the lock)" if was_holding else ""))

    def step(self) -> bool:
        """Deliver one notification. Returns False when none is pending."""
        if not self.coordinator.pending:
            return False
        note = self.coordinator.pending.popleft()
        client = self.clients[note.client]
        if client.state != "waiting":
            self._tick(f"notification for {client.name} ignored: it is {client.state}")
            return True
        self._record("woke", client.name, target=note.node)
        what = (f"{client.watching} {note.node} deleted" if note.watched != "parent"
                else f"children of {self.coordinator.parent} changed ({note.node} {note.change})")
        self._look(client, f"{client.name} woke: {what}", woken_by=note.node)
        return True

    def run(self, max_steps: int = 100_000) -> int:
        """Deliver notifications until none is pending; returns how many were delivered."""
        for delivered in range(max_steps + 1):
            if not self.step():
                return delivered
        raise LabError(f"still delivering after {max_steps} notifications",
                       hint="a strategy that keeps re-watching something that keeps changing loops; check it")

    def drain(self) -> list[str]:
        """Release whoever holds, run, repeat until every client has left; returns the order."""
        self.run()
        while self.holders():
            for name in self.holders():
                self.release(name)
            self.run()
        waiting = self.waiting()
        if waiting:
            raise Stuck(f"{', '.join(waiting)} wait, nobody holds the lock and no notification is pending",
                        hint="a waiter watches a node that will never be deleted; check what the strategy returns")
        return self.order()

    # --- what a learner reads --------------------------------------------------------
    def holders(self) -> list[str]:
        return [c.name for c in self.clients.values() if c.state == "holding"]

    def waiting(self) -> list[str]:
        return [c.name for c in self.clients.values() if c.state == "waiting"]

    def order(self) -> list[str]:
        """Clients in the order they acquired the lock."""
        return list(self._order)

    def creation_order(self) -> list[str]:
        """Clients in the order of their nodes' sequence numbers (the queue)."""
        return [c.name for c in sorted(self.clients.values(), key=lambda c: int(c.node[-10:]))]

    def wakeups_per_release(self) -> list[int]:
        """For each time the holder's node went away, how many waiters that woke up:
        ``labkit.record.history.wakeups_per_release`` of this run's events (one number
        per hand-off), and a 0 for a last release that handed the lock to nobody."""
        counts = history.wakeups_per_release(self.events)
        return counts + [0] * (len(self.releases) - len(counts))

    def trace(self) -> list[str]:
        return list(self._trace)

    def check_mutual_exclusion(self) -> None:
        """Raises MutualExclusionViolated naming the first step where two clients held."""
        if self.violations:
            step, holders = self.violations[0]
            raise MutualExclusionViolated(f"step {step}: {' and '.join(holders)} held the lock at the same time",
                                          hint="read the trace lines around that step: who took the lock without being lowest?")

    # --- the recipe --------------------------------------------------------------------
    def _look(self, client: Client, what: str, woken_by: str | None) -> None:
        view = View(client.node, tuple(self.coordinator.children()), woken_by)
        decision = client.strategy(view)
        holder = view.children[0]
        if decision == "hold":
            client.state = "holding"
            self._order.append(client.name)
            self._record("acquired", client.name, node=client.node)
            result = "lowest: holds the lock" if holder == client.node else f"took the lock although {holder} is lower"
        elif decision == "parent":
            self._record("watch", client.name, target=self.coordinator.parent, what="parent")
            self.coordinator.watch_parent(client.name)
            result = f"waiting behind {holder}; watching the parent {self.coordinator.parent}"
        elif decision in view.children and decision != client.node:
            self._record("watch", client.name, target=decision, what="predecessor")   # one queue node
            self.coordinator.watch_node(decision, client.name)
            client.watching = "predecessor" if decision == view.predecessor else "watched node"
            result = f"waiting behind {holder}; watching {decision}"
        else:
            raise StrategyError(f"strategy {client.strategy.__name__} returned {decision!r} for {client.name} "
                                f"({client.node}, children {', '.join(view.children)})",
                                hint="return 'hold', 'parent', or the name of another child to watch")
        if woken_by is not None and decision != "hold":
            result = "re-checked; still " + result
        self._tick(f"{what}; {result}")

    def _leave(self, client: Client, how: str) -> None:
        release = Release(client.name, client.node, how) if client.state == "holding" else None
        if release:
            self.releases.append(release)
            self._record("released" if how == "released" else "lost", client.name)
        client.state = how
        if how == "expired":
            self.coordinator.close_session(client.name, release)
        else:
            self.coordinator.delete(client.node, release)

    def _record(self, kind: str, client: str, **detail: str) -> None:
        self.events.append(Event(float(len(self.events)), client, kind, detail))

    def _tick(self, line: str) -> None:
        self.steps += 1
        self._trace.append(line)
        holders = tuple(self.holders())
        if len(holders) > 1:
            self.violations.append((self.steps, holders))
            self._trace.append(f"!! two holders at once: {', '.join(holders)}")

    def _client(self, name: str) -> Client:
        if name not in self.clients:
            raise LabError(f"no client named {name!r}", hint=f"clients here: {', '.join(self.clients) or 'none yet'}")
        return self.clients[name]


@dataclass
class StrategyVerdict:
    """What ``evaluate`` found about one strategy: booleans to assert on, and plain words
    (``print(verdict)``). Not record/checker.py's ``Verdict``, which judges one property of
    a real run."""

    strategy: str
    mutual_exclusion: bool          # never two holders at once
    fifo: bool                      # served in the order the nodes were created
    progress: bool                  # nobody left waiting forever
    most_wakeups_per_release: int   # 1 for the recipe, about N - 1 for a herd
    lines: list[str]

    @property
    def ok(self) -> bool:
        return self.mutual_exclusion and self.fifo and self.progress and self.most_wakeups_per_release <= 1

    def __str__(self) -> str:
        return "\n".join([f"strategy {self.strategy}: " + ("passes" if self.ok else "fails")] + self.lines)


def evaluate(strategy: str | Callable[[View], str], clients: int = 10) -> StrategyVerdict:
    """Run a strategy through the recipe's hard cases: a full queue drained one release at
    a time, and the waiter right behind the holder (c2) dying. Raises StrategyError if the
    strategy returns something the recipe cannot act on, LabError if clients < 3."""
    if clients < 3:
        raise LabError(f"evaluate needs at least 3 clients to kill a middle waiter, got {clients}")
    queue, middle = Sandbox(strategy), Sandbox(strategy)
    lines, progress = [], True
    for sim, dies in ((queue, None), (middle, "c2")):
        sim.add_clients(clients)
        sim.run()
        if dies:
            sim.expire(dies)
            sim.run()
        try:
            sim.drain()
        except Stuck as stuck:
            progress = False
            lines.append(f"- deadlock: {stuck.message}")
    violations = queue.violations + middle.violations
    lines.append("- mutual exclusion: never two holders" if not violations else
                 f"- mutual exclusion BROKEN: {' and '.join(violations[0][1])} held the lock at once")
    survivors = [name for name in middle.creation_order() if name != "c2"]
    fifo = queue.order() == queue.creation_order() and middle.order() == survivors
    lines.append("- FIFO: served in the order the nodes were created" if fifo else
                 f"- FIFO BROKEN: served {', '.join(queue.order())} / {', '.join(middle.order())}")
    herd = max(queue.wakeups_per_release() + middle.wakeups_per_release(), default=0)
    lines.append(f"- wakeups: at most {herd} per release" + (" (a herd: all wake, one can win)" if herd > 1 else ""))
    name = strategy if isinstance(strategy, str) else strategy.__name__
    return StrategyVerdict(name, not violations, fifo, progress, herd, lines)


def _resolve(strategy: str | Callable[[View], str]) -> Callable[[View], str]:
    if callable(strategy):
        return strategy
    if strategy not in STRATEGIES:
        raise StrategyError(f"unknown strategy {strategy!r}", hint=f"pick one of {', '.join(STRATEGIES)} or pass a function")
    return STRATEGIES[strategy]
