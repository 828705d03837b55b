"""ZooKeeperLock, kazoo's Lock and Curator's InterProcessMutex on a real ZooKeeper: mutual
exclusion, FIFO, wakeups per release, re-check, session death, timeouts and interop."""
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
from labkit.locks.zookeeper import ZooKeeperLock, sequence_of, sorted_contenders

from helpers import DEADLINE, Recorder, skip_unless_curator, wait_until


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


def make_lock(kind: str, client, path: str, name: str, recorder: Recorder):
    if kind == "kazoo":
        return KazooReferenceLock(client, path, identifier=name, on_event=recorder.sink(name))
    return ZooKeeperLock(client, path, identifier=name, watch=kind, on_event=recorder.sink(name))


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
    recorder = Recorder()
    baseline = lab.zookeeper.watch_count()
    holder = make_lock(kind, clients(), path, "holder", recorder)
    holder.acquire(timeout=DEADLINE)
    locks = [make_lock(kind, clients(), path, f"w{i}", recorder) for i in range(waiters)]
    with ThreadPoolExecutor(waiters) as pool:
        outcomes = [pool.submit(lock.acquire, DEADLINE) for lock in locks]
        wait_until(lambda: lab.zookeeper.watch_count() == baseline + waiters, f"all {waiters} waiters watch")
        created = sorted(recorder.of("created"), key=lambda event: event[1]["sequence"])
        queue_order = [name for name, _ in created if name != "holder"]
        acquired, woke_per_release, current = [], [], holder
        for remaining in range(waiters - 1, -1, -1):
            mark = len(recorder.events)
            current.release()
            wait_until(lambda: any(lock.is_held for lock in locks), "the next waiter holds")
            # every waiter that woke has set its next watch: no wakeup of this release is late
            wait_until(lambda: lab.zookeeper.watch_count() == baseline + remaining, f"{remaining} watches remain")
            current = next(lock for lock in locks if lock.is_held)
            acquired.append(current.identifier)
            woke_per_release.append(len(recorder.of("woke", since=mark)))
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
    recorder = Recorder()
    holder = make_lock("predecessor", clients(), unique_name, "holder", recorder)
    holder.acquire(timeout=DEADLINE)
    first, doomed_client, last = clients(), clients(), clients()
    first_lock = make_lock("predecessor", first, unique_name, "first", recorder)
    doomed = make_lock("predecessor", doomed_client, unique_name, "doomed", recorder)
    last_lock = make_lock("predecessor", last, unique_name, "last", recorder)
    with ThreadPoolExecutor(3) as pool:
        outcomes = {}
        for lock in (first_lock, doomed, last_lock):   # one by one, so the queue order is known
            outcomes[lock.identifier] = pool.submit(lock.acquire, DEADLINE)
            wait_until(lambda: recorder.of("watch", lock.identifier), f"{lock.identifier} watches")
        assert recorder.of("watch", "last")[0][1]["target"].endswith(doomed.node)
        # "watch" is stamped before the watch is set: wait until the server holds it, or the
        # node could go first and the successor would find it gone (a re-check, no wake-up)
        wait_until(lambda: last.client_id[0] in watchers_of(lab.zookeeper, f"{unique_name}/{doomed.node}"),
                   "the server to hold the successor's watch on the doomed node")

        doomed_client.stop()                             # its session ends: its node goes
        wait_until(lambda: len(recorder.of("watch", "last")) == 2, "the successor watches again")
        # an order made by cause, not by two threads' clocks: the callback stamps "woke" before
        # it wakes the waiter, and only then does the waiter re-list and stamp its next "watch"
        kinds = [kind for client, kind, _ in list(recorder.events) if client == "last" and kind in ("watch", "woke")]
        assert kinds == ["watch", "woke", "watch"], kinds
        assert recorder.of("watch", "last")[1][1]["target"].endswith(first_lock.node)
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
    recorder = Recorder()
    holder_client = clients()
    holder = make_lock("predecessor", holder_client, unique_name, "holder", recorder)
    holder.acquire(timeout=DEADLINE)
    waiter = make_lock("predecessor", clients(), unique_name, "waiter", recorder)
    with ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(waiter.acquire, DEADLINE)
        wait_until(lambda: recorder.of("watch", "waiter"), "the waiter watches the holder")
        expire_session(lab.zookeeper.hosts, *holder_client.client_id)
        assert outcome.result(timeout=DEADLINE) == waiter.token
    wait_until(lambda: recorder.of("lost", "holder"), "the holder learns it lost the lock")
    assert not holder.is_held and holder.token is None
    holder.release()                                     # nothing to let go of: no event
    assert not recorder.of("released", "holder")
    waiter.release()


@pytest.mark.parametrize("kind", ["predecessor", "parent", "kazoo"])
def test_timeout_leaves_the_queue(clients, unique_name, kind):
    recorder = Recorder()
    holder = make_lock("predecessor", clients(), unique_name, "holder", recorder)
    holder.acquire(timeout=DEADLINE)
    client = clients()
    impatient = make_lock(kind, client, unique_name, "impatient", recorder)
    with pytest.raises(LockTimeout, match=re.escape(unique_name)) as raised:
        impatient.acquire(timeout=0.5)
    assert raised.value.waited >= 0.5
    assert recorder.of("timeout", "impatient")
    created = recorder.of("created", "impatient")[0][1]["node"]
    assert created.rsplit("/", 1)[1] not in client.get_children(unique_name)
    assert [contender.identifier for contender in holder.contenders()] == ["holder"]
    holder.release()
    drain_watch_callbacks(client, unique_name)
    assert not recorder.of("woke", "impatient"), "a waiter that gave up is woken by no one"


def test_missing_java_or_jars_say_what_to_install(tmp_path, monkeypatch):
    from labkit.locks import curator as curator_module

    monkeypatch.setattr(curator_module, "JAR_DIRECTORY", tmp_path)
    with pytest.raises(curator_module.CuratorUnavailable, match="curator-recipes") as raised:
        curator_module.class_path()
    assert "apt-get install" in str(raised.value)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(curator_module.CuratorUnavailable, match="javac") as raised:
        curator_module.compiled_peer_directory()
    assert "apt-get install" in str(raised.value)


@pytest.fixture
def curator(lab, unique_name):
    from labkit.locks.curator import CuratorPeer
    peer = CuratorPeer(lab.zookeeper.hosts, unique_name, identifier="curator")
    try:
        yield peer
    finally:
        peer.close()


def lowest_node(client, path: str) -> str:
    return sorted_contenders(client.get_children(path))[0]


def test_ours_kazoo_and_curator_share_one_queue(clients, curator, unique_name):
    recorder = Recorder()
    observer = clients()
    ours = make_lock("predecessor", clients(), unique_name, "ours", recorder)
    kazoo = make_lock("kazoo", clients(), unique_name, "kazoo", recorder)
    ours_again = make_lock("parent", clients(), unique_name, "ours-again", recorder)
    ours.acquire(timeout=DEADLINE)
    with ThreadPoolExecutor(3) as pool:
        outcomes = []
        for lock in (kazoo, curator, ours_again):        # one by one, so the queue order is known
            outcomes.append(pool.submit(lock.acquire, DEADLINE))
            queued = len(outcomes) + 1
            wait_until(lambda: len(sorted_contenders(observer.get_children(unique_name))) == queued
                       and (lock is curator or recorder.of("created", lock.identifier)),
                       f"{queued} contenders queue")
        queue = sorted_contenders(observer.get_children(unique_name))
        assert queue[0] == ours.node and queue[1] == kazoo.node
        assert queue[2].startswith("_c_") and queue[3] == ours_again.node
        assert [entry.identifier for entry in ours.contenders()] == ["ours", "kazoo", "curator", "ours-again"]

        order = []
        for current, successor, outcome in ((ours, kazoo, outcomes[0]), (kazoo, curator, outcomes[1]),
                                            (curator, ours_again, outcomes[2])):
            current.release()
            outcome.result(timeout=DEADLINE)
            assert lowest_node(observer, unique_name) == successor.node.rsplit("/", 1)[-1]
            order.append(successor.identifier)
        ours_again.release()
    assert order == ["kazoo", "curator", "ours-again"]


def test_ours_kazoo_and_curator_never_overlap(clients, curator, unique_name):
    recorder, detector, observer = Recorder(), OverlapDetector(), clients()
    locks = [make_lock(kind, clients(), unique_name, f"{kind}-{number}", recorder)
             for kind in ("predecessor", "kazoo") for number in range(2)] + [curator]
    start = threading.Barrier(len(locks))
    judged_by_server, sequences = [], []

    def contend(lock):
        start.wait(DEADLINE)
        for _ in range(3):
            token = lock.acquire(timeout=2 * DEADLINE)
            try:
                # the server's view: whoever believes it holds must own the lowest node
                node = lock.node.rsplit("/", 1)[-1]
                judged_by_server.append(lowest_node(observer, unique_name) == node)
                # every recipe's token is its node's czxid: one store can fence them all
                detector.hold(token, 0.01)
                sequences.append(sequence_of(node))
            finally:
                lock.release()

    with ThreadPoolExecutor(len(locks)) as pool:
        for outcome in [pool.submit(contend, lock) for lock in locks]:
            outcome.result(timeout=4 * DEADLINE)
    assert detector.most_at_once == 1
    assert judged_by_server == [True] * 3 * len(locks)
    assert detector.tokens == sorted(detector.tokens)
    assert sequences == sorted(sequences)   # czxid order is queue order


def test_kazoo_default_node_names_mislead_curator(clients, curator, unique_name):
    # Why KazooReferenceLock renames kazoo's node: Curator sorts by what follows "lock-",
    # and kazoo's "<uuid>__lock__<seq>" has none, so Curator sorts it by its random uuid.
    kazoo = KazooReferenceLock(clients(), unique_name, identifier="kazoo", curator_compatible=False)
    kazoo.acquire(timeout=DEADLINE)
    assert "__lock__" in kazoo.node
    curator.acquire(timeout=DEADLINE)                    # granted although kazoo holds the lock
    assert kazoo.is_held and curator.is_held
    curator.release()
    kazoo.release()


def test_curator_hands_its_lock_to_one_waiter_at_a_time_inside_its_jvm(lab, zk):
    """The bench's Curator hand-off (labkit/locks/java/CuratorHandoff.java) at N = 20: each
    release goes to another contender, never two holders, and the server fires one watch."""
    skip_unless_curator("Curator's hand-off inside its JVM")
    from labkit.bench import peers as bench_peers

    run_id = f"test-{time.time_ns()}"
    rows = bench_peers.curator_handoffs(lab, 20, 5, run_id, jvm_warm_up=20)
    assert [row["scenario"] for row in rows] == list(bench_peers.CURATOR_HANDOFFS)
    for row in rows:
        assert row["handoffs"] == 5 and row["overlaps"] == 0, row
        assert all(giver != taker for giver, taker in zip(row["givers"], row["takers"])), row
        assert row["takers"][:-1] == row["givers"][1:], row   # each new holder is the next to let go
        assert row["wakeups"] == [1] * 5, row                   # Curator watches its predecessor only
        assert 0 < row["from_release_p50_ms"] <= row["handoff_p50_ms"] <= row["handoff_p99_ms"], row
        assert set(row["breakdown_p50_ms"]) == {"asked to watch fired", "holder's thread woke", "release call",
                                                "release call to watch fired", "watch fired to acquired"}, row
    crowd = f"/bench-{run_id}/curator-handoff-handoff"
    assert not zk.exists(crowd) or zk.get_children(crowd) == []   # every contender's node is gone


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
        recorder = Recorder()
        lock = make_lock("predecessor", client, unique_name, "unlucky", recorder)
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

    recorder = Recorder()
    with labkit.up(zookeeper=1, etcd=0, redis=False, quiet=True) as own_lab:
        # a long session: the server stays frozen long enough for the client to notice,
        # yet not long enough for the session to expire
        client = own_lab.zookeeper.client(timeout=10.0)
        try:
            holder = make_lock("predecessor", client, "/frozen", "holder", recorder)
            holder.acquire(timeout=DEADLINE)
            server = own_lab.node("zk1")
            server.pause()
            try:
                wait_until(lambda: recorder.of("suspended", "holder"), "the holder is told SUSPENDED")
                assert holder.is_suspended and holder.is_held   # may hold it: stop writing
            finally:
                server.resume()
            wait_until(lambda: recorder.of("reconnected", "holder"), "the holder is told it reconnected")
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
    recorder, client = Recorder(), clients()
    lock = ZooKeeperLock(client, unique_name, on_event=recorder.sink("holder"))
    token = lock.acquire(timeout=DEADLINE)
    client.stop()
    wait_until(lambda: recorder.of("released"), "the close is reported")
    assert recorder.of("lost") == [] and not lock.is_held
    assert recorder.of("released")[0][1]["token"] == token
    assert "closed its session" in recorder.of("released")[0][1]["reason"]


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
