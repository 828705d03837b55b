"""Hand one lock on, one release at a time, and record who woke: the one harness behind
the wakeup counts of notebooks 02 and 03, the benchmark and the herd pitfall.

N + 1 contenders, each a thread with its own connection and session (a factory makes each
one, usually ``labkit.locks.registry.lock_factory``): ``contender-0`` takes the lock, the
other N queue behind it. Then the lock is handed on. A holder is asked to release only
once every waiter still waiting has armed its watch again (``settled``), so that every
release meets every armed watch: the History then gives ``wakeups_per_release()``
exactly, whatever the machine's speed.

Why each holder releases in its own thread, after its ``acquire`` returned, and the next
release is asked for only once the new holder's "acquired" is in the history: a recipe
sets ``is_held`` a moment before it stamps "acquired", so a release triggered from another
thread as soon as ``is_held`` turns True can be stamped first; on a loaded machine that
once made a herd of two waiters count [2, 0] instead of [2, 1].

What can fail: ``TimeoutError`` naming the step that did not happen within ``timeout``
(a waiter that does not queue, acquire or watch again); a contender's own error is
re-raised. Every connection is closed on the way out, in parallel (closed one after the
other, a herd would re-check the whole queue after every single close).
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from labkit.locks.registry import LockFactory, RecipeHandle
from labkit.record.events import Event
from labkit.record.history import History, woken_per_release
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.services.zookeeper import ZooKeeperNode, ZooKeeperService

# settled(history, names of the waiters still waiting) -> every one of them waits on a watch again
Settled = Callable[[History, list[str]], bool]


@dataclass
class HandOffs:
    """What ``hand_off`` saw: the History, and for each hand-off who released, when the
    release was asked for and when the next holder's "acquired" was stamped (time.time())."""

    history: History
    releases: list[tuple[str, float, float]] = field(default_factory=list)
    woken: list[list[str]] = field(default_factory=list)   # who woke for each of these hand-offs
    # who held, first holder first, taken before the teardown: the sessions close in parallel,
    # so a waiter left waiting can take the lock while its holder's session goes
    served: list[str] = field(default_factory=list)

    @property
    def wakeups(self) -> list[int]:
        """``wakeups_per_release`` of these hand-offs (taken before the teardown closed anything)."""
        return [len(names) for names in self.woken]

    @property
    def latencies(self) -> list[float]:
        """Seconds from each release request to the next holder's "acquired"."""
        return [acquired - asked for _, asked, acquired in self.releases]


def hand_off(make: LockFactory, waiters: int, settled: Settled, releases: int | None = None,
             timeout: float = 30.0, history: History | None = None, names: list[str] | None = None,
             one_by_one: bool = False, before_release: Callable[[int], Any] = lambda number: None,
             after_settled: Callable[[int], Any] = lambda number: None) -> HandOffs:
    """``contender-0`` takes the lock, ``waiters`` more queue, then the lock is handed on
    ``releases`` times (default: until every waiter held it once; then the last holder
    releases too). ``names``: the contenders' names, first holder first (default
    contender-0 ... contender-N). ``one_by_one``: each waiter starts only once the ones
    before it are settled, so that the queue is in the order of the names (else they
    queue all at once, in any order). ``before_release(number)`` runs just before hand-off
    ``number`` (0 first) is asked for, ``after_settled(number)`` once its waiters settled:
    to measure what one release costs the server. See the module doc. Raises ValueError for ``waiters`` < 1
    or names of the wrong number."""
    if waiters < 1:
        raise ValueError(f"waiters must be at least 1, got {waiters}")
    names = names or [f"contender-{number}" for number in range(waiters + 1)]
    if len(names) != waiters + 1:
        raise ValueError(f"{waiters} waiters and a first holder need {waiters + 1} names, got {len(names)}")
    releases = waiters if releases is None else min(releases, waiters)
    history = history if history is not None else History()
    release_now = {name: threading.Event() for name in names}
    closing = threading.Event()   # set at teardown: a holder then leaves without releasing
    errors: list[BaseException] = []
    handles: list[RecipeHandle] = []
    threads: list[threading.Thread] = []
    budget = timeout * (waiters + 2)   # a waiter may wait for every hand-off before its own

    def take_turn(handle: RecipeHandle, name: str) -> None:
        try:
            handle.lock.acquire(timeout=budget)
            if release_now[name].wait(budget) and not closing.is_set():
                handle.lock.release()
        except BaseException as error:  # reported by the main thread, unless we are closing
            if not closing.is_set():
                errors.append(error)

    def check(condition: Callable[[], Any], what: str) -> None:
        wait_until(lambda: errors or condition(), what, timeout)
        if errors:
            raise errors[0]

    def acquired() -> list[Event]:
        return history.events(kind="acquired")

    result = HandOffs(history)
    try:
        for name in names:
            handles.append(make(name, history.sink(name)))
        for number, (handle, name) in enumerate(zip(handles, names)):
            thread = threading.Thread(target=take_turn, args=(handle, name), name=f"handoff-{name}", daemon=True)
            thread.start()
            threads.append(thread)
            if number == 0:   # the first holder holds before anyone queues
                check(lambda: acquired(), f"{name} to take the lock")
            elif one_by_one:
                check(lambda: settled(history, names[1:number + 1]), f"{name} to queue and watch")
        holder = names[0]
        check(lambda: settled(history, names[1:]), f"{waiters} waiters to queue and watch")
        for number in range(releases):
            before_release(number)
            asked = time.time()
            release_now[holder].set()
            check(lambda: len(acquired()) > number + 1, f"hand-off number {number + 1}")
            taken = acquired()[number + 1]
            served = {event.client for event in acquired()}
            check(lambda: settled(history, [name for name in names if name not in served]),
                  "the other waiters to watch again")
            after_settled(number)
            result.releases.append((holder, asked, taken.time))
            holder = taken.client
        result.woken = woken_per_release(history.events())[:releases]   # before the teardown adds events
        result.served = [event.client for event in acquired()]
        if releases == waiters:   # everyone was served: the last holder lets go too
            release_now[holder].set()
            check(lambda: len(history.events(kind="released")) > waiters, "the last release")
    finally:
        closing.set()
        for event in release_now.values():
            event.set()
        with etcd3_watch_teardown_errors_ignored():
            close_all([handle.close for handle in reversed(handles)])
            deadline = time.monotonic() + 10
            for thread in threads:   # each ends when its session closes under it
                thread.join(max(0.0, deadline - time.monotonic()))
    return result


# ---- settled: every waiter still waiting watches again ------------------------------------
def watching_again(history: History, waiting: list[str]) -> bool:
    """From the events: each waiter has one more "watch" than "woke" (it woke, lost the
    race, and watches again). For recipes whose watch cannot miss a change made after
    its "watch" stamp (etcd watches start from a revision). A watch that says where it
    starts (``from_revision``: python-etcd3's herd on one key) counts only once it starts
    after the newest holder's token: an older one still has a wake-up on its way, which
    the counts alone cannot tell from a new watch (a loaded run counted [3, 1, 0])."""
    acquired = history.events(kind="acquired")
    newest = acquired[-1].detail.get("token") if acquired else None
    for name in waiting:
        watches = history.events(client=name, kind="watch")
        if len(watches) != len(history.events(client=name, kind="woke")) + 1:
            return False
        if not starts_after(watches[-1].detail.get("from_revision"), newest):
            return False
    return True


def starts_after(from_revision: Any, token: Any) -> bool:
    """True unless a watch that starts at ``from_revision`` would still see the change
    that made the holder of ``token`` (either unknown: True)."""
    return from_revision is None or not isinstance(token, int) or from_revision > token


def server_watches(zookeeper: ZooKeeperNode | ZooKeeperService) -> Settled:
    """From the server: ZooKeeper holds one watch per waiter still waiting, counted by
    ``mntr`` (over and above the watches it held when this was called). Exact, because
    ZooKeeperLock stamps "watch" before it arms: only the server knows the watch is set.
    Every contender must talk to the counted server(s)."""
    baseline = zookeeper.watch_count()
    return lambda history, waiting: zookeeper.watch_count() == baseline + len(waiting)


# ---- teardown ------------------------------------------------------------------------------
@contextlib.contextmanager
def etcd3_watch_teardown_errors_ignored() -> Iterator[None]:
    """python3-etcd3 0.13 starts a watch thread that dies with "Channel closed" when a
    python-etcd3 Lock waiter retries on a client we are closing on purpose. Hide only
    those tracebacks, only while closing; every other thread error is still printed."""
    previous = threading.excepthook

    def hook(arguments: Any) -> None:
        name = arguments.thread.name if arguments.thread is not None else ""
        if not (name.startswith("etcd3_watch") and arguments.exc_type is ValueError):
            previous(arguments)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def close_all(closers: list[Callable[[], None]]) -> None:
    """Run every ``close`` in parallel; a session already gone is what we wanted, so a
    failure is printed to stderr, not raised."""
    threads = [threading.Thread(target=close_quietly, args=(close,), daemon=True) for close in closers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def close_quietly(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception as error:  # a session already gone is what we wanted
        print(f"(closing a contender's session: {error!r})", file=sys.stderr)
