"""ZooKeeperLock and kazoo's Lock on a real ZooKeeper: mutual exclusion, FIFO, wakeups per
release, re-check, session death and timeouts. With Curator's InterProcessMutex in one queue:
tests/locks/test_zookeeper_curator.py."""
from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from labkit.faults import expire_session
from labkit.lessons.zookeeper_recipe import watchers_of
from labkit.locks.errors import LockTimeout, SessionExpired
from labkit.locks.kazoo_reference import KazooReferenceLock
from labkit.locks.zookeeper import ZooKeeperLock, sorted_contenders
from labkit.record.history import History

from helpers import DEADLINE, wait_until


class OverlapDetector:
    """Counts holders inside the critical section; remembers the most ever seen at once."""

    def __init__(self):
        self._lock = threading.Lock()
        self.inside = 0
        self.most_at_once = 0
        self.tokens: list[int] = []

    def hold(self, token: int, seconds: float) -> None:
        with self._lock:
            self.inside += 1
            self.most_at_once = max(self.most_at_once, self.inside)
            self.tokens.append(token)
        time.sleep(seconds)   # the work done under the lock, not a wait for anything
        with self._lock:
            self.inside -= 1


def drain_watch_callbacks(client, path: str) -> None:
    """Return once ``client`` has run every watch callback the server sent it so far: kazoo
    runs them in order on one thread, so a probe watch set and fired now runs last."""
    probe = f"{path}-probe"
    fired = threading.Event()
    client.exists(probe, watch=lambda event: fired.set())
    client.create(probe, ephemeral=True)
    assert fired.wait(DEADLINE), f"the probe watch on {probe} never fired"
    client.delete(probe)


@pytest.fixture
def clients(lab):
    """make() -> a started KazooClient with its own session; all are stopped afterwards."""
    made = []

    def make(timeout: float = 4.0):
        made.append(lab.zookeeper.client(timeout=timeout))
        return made[-1]
    yield make
    for client in made:
        client.stop()
        client.close()


def lowest_node(client, path: str) -> str:
    return sorted_contenders(client.get_children(path))[0]


def make_lock(kind: str, client, path: str, name: str, history: History):
    if kind == "kazoo":
        return KazooReferenceLock(client, path, identifier=name, on_event=history.sink(name))
    return ZooKeeperLock(client, path, identifier=name, watch=kind, on_event=history.sink(name))


def test_contenders_of_every_recipe_sort_by_sequence_alone():
    children = ["_c_0b3e-41d2-lock-0000000007", "f00d__lock__0000000002", "zz-lock-0000000005",
                "notes", "0123-lock-0000000011"]
    assert sorted_contenders(children) == ["f00d__lock__0000000002", "zz-lock-0000000005",
                                           "_c_0b3e-41d2-lock-0000000007", "0123-lock-0000000011"]


def test_mutual_exclusion_under_contention(clients, unique_name):
    contenders, rounds = 10, 3
    detector = OverlapDetector()
    locks = [ZooKeeperLock(clients(), unique_name, identifier=f"c{i}") for i in range(contenders)]
    start = threading.Barrier(contenders)

    def contend(lock):
        start.wait(DEADLINE)
        for _ in range(rounds):
            with lock:
                detector.hold(lock.token, 0.005)

    with ThreadPoolExecutor(contenders) as pool:
        for outcome in [pool.submit(contend, lock) for lock in locks]:
            outcome.result(timeout=3 * DEADLINE)
    assert detector.most_at_once == 1
    assert len(detector.tokens) == contenders * rounds
    assert detector.tokens == sorted(detector.tokens), "tokens must grow in the order holders held"


def hand_off_one_by_one(lab, kind: str, clients, path: str, waiters: int):
    """A holder and ``waiters`` queued behind it; release one at a time and let each settle.
    Returns (names in queue order, names in acquisition order, wakeups per release)."""
    history = History()
    baseline = lab.zookeeper.watch_count()
    holder = make_lock(kind, clients(), path, "holder", history)
    holder.acquire(timeout=DEADLINE)
    locks = [make_lock(kind, clients(), path, f"w{i}", history) for i in range(waiters)]
    with ThreadPoolExecutor(waiters) as pool:
        outcomes = [pool.submit(lock.acquire, DEADLINE) for lock in locks]
        wait_until(lambda: lab.zookeeper.watch_count() == baseline + waiters, f"all {waiters} waiters watch")
        created = sorted(history.events(kind="created"), key=lambda event: event.detail["sequence"])
        queue_order = [event.client for event in created if event.client != "holder"]
        acquired, woke_per_release, current = [], [], holder
        for remaining in range(waiters - 1, -1, -1):
            woke_before = len(history.events(kind="woke"))
            current.release()
            wait_until(lambda: any(lock.is_held for lock in locks), "the next waiter holds")
            # every waiter that woke has set its next watch: no wakeup of this release is late
            wait_until(lambda: lab.zookeeper.watch_count() == baseline + remaining, f"{remaining} watches remain")
            current = next(lock for lock in locks if lock.is_held)
            acquired.append(current.identifier)
            woke_per_release.append(len(history.events(kind="woke")) - woke_before)
        current.release()
        for outcome in outcomes:
            outcome.result(timeout=DEADLINE)
    return queue_order, acquired, woke_per_release


def test_waiters_are_served_in_creation_order(lab, clients, unique_name):
    queue_order, acquired, _ = hand_off_one_by_one(lab, "predecessor", clients, unique_name, waiters=6)
    assert acquired == queue_order


@pytest.mark.parametrize("kind", ["predecessor", "kazoo", "parent"])
def test_wakeups_per_release(lab, clients, unique_name, kind):
    waiters = 5
    queue_order, acquired, woke_per_release = hand_off_one_by_one(lab, kind, clients, unique_name, waiters)
    assert acquired == queue_order
    if kind == "parent":
        # the herd: every release wakes everyone still waiting, though only one can win
        assert woke_per_release == list(range(waiters, 0, -1))
    else:
        assert woke_per_release == [1] * waiters


def test_successor_of_a_dead_waiter_rechecks_and_keeps_waiting(lab, clients, unique_name):
    history = History()
    holder = make_lock("predecessor", clients(), unique_name, "holder", history)
    holder.acquire(timeout=DEADLINE)
    first, doomed_client, last = clients(), clients(), clients()
    first_lock = make_lock("predecessor", first, unique_name, "first", history)
    doomed = make_lock("predecessor", doomed_client, unique_name, "doomed", history)
    last_lock = make_lock("predecessor", last, unique_name, "last", history)
    with ThreadPoolExecutor(3) as pool:
        outcomes = {}
        for lock in (first_lock, doomed, last_lock):   # one by one, so the queue order is known
            outcomes[lock.identifier] = pool.submit(lock.acquire, DEADLINE)
            wait_until(lambda: history.events(lock.identifier, "watch"), f"{lock.identifier} watches")
        assert history.events("last", "watch")[0].detail["target"].endswith(doomed.node)
        # "watch" is stamped before the watch is set: wait until the server holds it, or the
        # node could go first and the successor would find it gone (a re-check, no wake-up)
        wait_until(lambda: last.client_id[0] in watchers_of(lab.zookeeper, f"{unique_name}/{doomed.node}"),
                   "the server to hold the successor's watch on the doomed node")

        doomed_client.stop()                             # its session ends: its node goes
        wait_until(lambda: len(history.events("last", "watch")) == 2, "the successor watches again")
        # an order made by cause, not by two threads' clocks: the callback stamps "woke" before
        # it wakes the waiter, and only then does the waiter re-list and stamp its next "watch"
        kinds = [event.kind for event in history.events("last", ("watch", "woke"))]
        assert kinds == ["watch", "woke", "watch"], kinds
        assert history.events("last", "watch")[1].detail["target"].endswith(first_lock.node)
        assert holder.is_held and not last_lock.is_held and not first_lock.is_held
        with pytest.raises(SessionExpired):
            outcomes["doomed"].result(timeout=DEADLINE)

        holder.release()
        outcomes["first"].result(timeout=DEADLINE)
        assert not last_lock.is_held
        first_lock.release()
        outcomes["last"].result(timeout=DEADLINE)
        assert last_lock.is_held
        last_lock.release()


def test_expired_holder_session_passes_the_lock_on(lab, clients, unique_name):
    history = History()
    holder_client = clients()
    holder = make_lock("predecessor", holder_client, unique_name, "holder", history)
    holder.acquire(timeout=DEADLINE)
    waiter = make_lock("predecessor", clients(), unique_name, "waiter", history)
    with ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(waiter.acquire, DEADLINE)
        wait_until(lambda: history.events("waiter", "watch"), "the waiter watches the holder")
        expire_session(lab.zookeeper.hosts, *holder_client.client_id)
        assert outcome.result(timeout=DEADLINE) == waiter.token
    wait_until(lambda: history.events("holder", "lost"), "the holder learns it lost the lock")
    assert not holder.is_held and holder.token is None
    holder.release()                                     # nothing to let go of: no event
    assert not history.events("holder", "released")
    waiter.release()


@pytest.mark.parametrize("kind", ["predecessor", "parent", "kazoo"])
def test_timeout_leaves_the_queue(clients, unique_name, kind):
    history = History()
    holder = make_lock("predecessor", clients(), unique_name, "holder", history)
    holder.acquire(timeout=DEADLINE)
    client = clients()
    impatient = make_lock(kind, client, unique_name, "impatient", history)
    with pytest.raises(LockTimeout, match=re.escape(unique_name)) as raised:
        impatient.acquire(timeout=0.5)
    assert raised.value.waited >= 0.5
    assert history.events("impatient", "timeout")
    created = history.events("impatient", "created")[0].detail["node"]
    assert created.rsplit("/", 1)[1] not in client.get_children(unique_name)
    assert [contender.identifier for contender in holder.contenders()] == ["holder"]
    holder.release()
    drain_watch_callbacks(client, unique_name)
    assert not history.events("impatient", "woke"), "a waiter that gave up is woken by no one"


def test_a_create_whose_reply_was_lost_is_found_again(lab, unique_name):
    from kazoo.client import KazooClient
    from kazoo.exceptions import ConnectionLoss

    class LosesFirstCreateReply(KazooClient):
        """The server creates the node; the reply never reaches the caller (a fault, injected)."""
        lost = False

        def create(self, *args, **kwargs):
            created = super().create(*args, **kwargs)
            if not self.lost:
                self.lost = True
                raise ConnectionLoss()
            return created

    client = LosesFirstCreateReply(hosts=lab.zookeeper.hosts, timeout=4.0, **lab.zookeeper.auth)
    client.start(timeout=15)
    try:
        history = History()
        lock = make_lock("predecessor", client, unique_name, "unlucky", history)
        lock.acquire(timeout=DEADLINE)
        assert client.lost
        assert client.get_children(unique_name) == [lock.node]   # found again, not created twice
        lock.release()
        assert client.get_children(unique_name) == []
    finally:
        client.stop()
        client.close()


@pytest.mark.slow
def test_a_frozen_server_suspends_the_holder_until_it_answers_again():
    import labkit

    history = History()
    with labkit.up(zookeeper=1, etcd=0, redis=False, quiet=True) as own_lab:
        # a long session: the server stays frozen long enough for the client to notice,
        # yet not long enough for the session to expire
        client = own_lab.zookeeper.client(timeout=10.0)
        try:
            holder = make_lock("predecessor", client, "/frozen", "holder", history)
            holder.acquire(timeout=DEADLINE)
            server = own_lab.node("zk1")
            server.pause()
            try:
                wait_until(lambda: history.events("holder", "suspended"), "the holder is told SUSPENDED")
                assert holder.is_suspended and holder.is_held   # may hold it: stop writing
            finally:
                server.resume()
            wait_until(lambda: history.events("holder", "reconnected"), "the holder is told it reconnected")
            assert holder.is_held and not holder.is_suspended
            assert lowest_node(client, "/frozen") == holder.node
            holder.release()
        finally:
            client.stop()
            client.close()


def test_the_token_is_the_czxid_and_the_sequence_only_orders_the_queue(clients, unique_name):
    first, second = ZooKeeperLock(clients(), unique_name), ZooKeeperLock(clients(), unique_name)
    token = first.acquire(timeout=DEADLINE)
    assert token == first.czxid and first.sequence == 0
    first.release()
    assert second.acquire(timeout=DEADLINE) == second.czxid > token
    assert second.sequence == 1   # the parent counts creations: the delete left no gap
    second.release()


def test_closing_the_client_on_purpose_is_a_release_not_a_loss(clients, unique_name):
    history, client = History(), clients()
    lock = ZooKeeperLock(client, unique_name, on_event=history.sink("holder"))
    token = lock.acquire(timeout=DEADLINE)
    client.stop()
    wait_until(lambda: history.events(kind="released"), "the close is reported")
    assert history.events(kind="lost") == [] and not lock.is_held
    assert history.events(kind="released")[0].detail["token"] == token
    assert "closed its session" in history.events(kind="released")[0].detail["reason"]


def test_a_lock_client_reconnects_within_a_second_of_its_server_coming_back(unique_name):
    """kazoo's default waits longer and longer between reconnect rounds (up to an hour): after
    an outage of 8 s it would sleep for seconds more with the server back, past a session
    timeout. The recipes' clients wait at most a second, as ZooKeeper's Java client does."""
    import labkit
    from labkit.locks.registry import connections_of, make_lock

    with labkit.up(zookeeper=1, etcd=0, redis=False, quiet=True) as own:
        handle = make_lock("zookeeper", connections_of(own), unique_name, "c1", session_timeout=30.0)
        client, states = handle.extra["zookeeper"], []
        client.add_listener(lambda state: states.append((time.monotonic(), state)))
        try:
            [node] = own.zookeeper.nodes
            node.kill()
            wait_until(lambda: states and states[-1][1] == "SUSPENDED", f"the client to notice: {states}", timeout=10)
            time.sleep(8.0)   # the outage: a default kazoo client's wait has grown to about 6 s by now
            node.start()
            node.wait_ready(30)
            back = time.monotonic()
            wait_until(lambda: states[-1][1] == "CONNECTED", f"the client to reconnect: {states}", timeout=30)
            assert states[-1][0] - back < 2.0, f"reconnected {states[-1][0] - back:.1f} s after the server was ready"
        finally:
            handle.close()
