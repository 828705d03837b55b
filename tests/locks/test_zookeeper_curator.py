"""Curator's InterProcessMutex beside ZooKeeperLock and kazoo's Lock on a real ZooKeeper: one
queue, never two holders, kazoo's default node names misleading Curator, Curator's own hand-off
in its JVM, and what a machine without Java or Curator's jars is told. The fixtures and helpers
are test_zookeeper_lock's."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from labkit.locks.kazoo_reference import KazooReferenceLock
from labkit.locks.zookeeper import sequence_of, sorted_contenders
from labkit.record.history import History

from helpers import DEADLINE, wait_until
from test_zookeeper_lock import OverlapDetector, clients, drain_watch_callbacks, lowest_node, make_lock  # noqa: F401  (clients: a fixture)


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


@pytest.mark.curator
def test_ours_kazoo_and_curator_share_one_queue(clients, curator, unique_name):
    history = History()
    observer = clients()
    ours = make_lock("predecessor", clients(), unique_name, "ours", history)
    kazoo = make_lock("kazoo", clients(), unique_name, "kazoo", history)
    ours_again = make_lock("parent", clients(), unique_name, "ours-again", history)
    ours.acquire(timeout=DEADLINE)
    with ThreadPoolExecutor(3) as pool:
        outcomes = []
        for lock in (kazoo, curator, ours_again):        # one by one, so the queue order is known
            outcomes.append(pool.submit(lock.acquire, DEADLINE))
            queued = len(outcomes) + 1
            wait_until(lambda: len(sorted_contenders(observer.get_children(unique_name))) == queued
                       and (lock is curator or history.events(lock.identifier, "created")),
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


@pytest.mark.curator
def test_ours_kazoo_and_curator_never_overlap(clients, curator, unique_name):
    history, detector, observer = History(), OverlapDetector(), clients()
    locks = [make_lock(kind, clients(), unique_name, f"{kind}-{number}", history)
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


@pytest.mark.curator
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


@pytest.mark.curator("Curator's hand-off inside its JVM")
def test_curator_hands_its_lock_to_one_waiter_at_a_time_inside_its_jvm(lab, zk):
    """The bench's Curator hand-off (labkit/locks/java/CuratorHandoff.java) at N = 20: each
    release goes to another contender, never two holders, and the server fires one watch."""
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
