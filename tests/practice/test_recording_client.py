"""The kazoo client a learner's ZooKeeper lock is handed (labkit/practice/exercises/
recording_client.py), on the session lab's real ZooKeeper: a sequential node is recorded as
"created" with its number and whether it is ephemeral, a plain node is not; a watch is
recorded with what it watches (a numbered node "predecessor", a plain one "key", children
"parent"), and its firing as "woke" with the node, the learner's own callback still called;
reads without a watch make a poller count as queued; deliver_pending_notifications returns
only once a deletion another client made has been handled (and False on a stopped client);
wake_waiters fires a watch still outstanding with a NONE event, which is no "woke"; kazoo's
own Lock runs through it. The checker that uses it: test_exercises.py."""
from __future__ import annotations

import threading

import pytest
from kazoo.protocol.states import EventType

from labkit.locks.zookeeper import sequence_of
from labkit.practice.exercises.recording_client import RecordingClient
from labkit.record.history import History

PATIENCE = 10.0


@pytest.fixture
def recorder(lab, zk, unique_name):
    """(RecordingClient on a session of its own, its History, the test's path, another client)."""
    history = History()
    raw = lab.zookeeper.client()
    zk.ensure_path(unique_name)
    client = RecordingClient(raw, history.sink("learner"))
    try:
        yield client, history, unique_name, zk
    finally:
        raw.stop()
        raw.close()
        zk.delete(unique_name, recursive=True)


def kinds(history):
    return [(event.kind, event.detail) for event in history.events()]


def test_a_sequential_node_is_recorded_with_its_number_a_plain_one_is_not(recorder):
    client, history, path, _ = recorder
    queued = client.create(f"{path}/lock-", ephemeral=True, sequence=True)
    kept = client.create(f"{path}/kept-lock-", sequence=True)
    client.create(f"{path}/plain", b"x")
    assert client.nodes == {queued: True, kept: False}
    created = history.events(kind="created")
    assert [(event.detail["node"], event.detail["ephemeral"]) for event in created] == [(queued, True), (kept, False)]
    assert created[0].detail["sequence"] == sequence_of(queued) and sequence_of(kept) == sequence_of(queued) + 1
    node, stat = client.create(f"{path}/lock-", sequence=True, include_data=True)
    assert node in client.nodes and stat.czxid > 0, "include_data's (path, stat) is recorded by its path"


def test_a_poller_counts_as_queued_after_three_reads_without_a_watch(recorder):
    client, _, path, _ = recorder
    client.get_children(path)
    client.create(f"{path}/lock-", ephemeral=True, sequence=True)
    assert client.reads_without_watch == 0, "a create starts the count again"
    for reads in range(3):
        assert not client.queued
        client.get_children(path)
    assert client.queued and not client.ever_armed


def test_a_watch_on_the_predecessor_records_what_woke_it_and_calls_the_learners_callback(recorder):
    client, history, path, other = recorder
    ahead = other.create(f"{path}/lock-", ephemeral=True, sequence=True)
    fired = []
    assert client.exists(ahead, watch=fired.append) is not None
    assert client.armed and client.ever_armed and client.queued
    other.delete(ahead)
    assert client.deliver_pending_notifications(PATIENCE), "the deletion's notification was handled"
    assert [event.type for event in fired] == [EventType.DELETED] and not client.armed
    assert kinds(history) == [("watch", {"target": ahead, "what": "predecessor"}),
                              ("woke", {"reason": "deleted", "target": ahead})]
    assert client.last_woken_by == ahead


def test_a_watch_on_a_plain_node_is_a_key_and_on_the_children_the_parent(recorder):
    client, history, path, other = recorder
    client.exists(f"{path}/shared", watch=lambda event: None)     # not there yet: fires on its creation
    client.get_children(path, watch=lambda event: None)
    other.create(f"{path}/shared")
    assert client.deliver_pending_notifications(PATIENCE)
    watches = [(event.detail["what"], event.detail["target"]) for event in history.events(kind="watch")]
    assert watches == [("key", f"{path}/shared"), ("parent", path)]
    woke = sorted((event.detail["reason"], event.detail["target"]) for event in history.events(kind="woke"))
    assert woke == [("child", path), ("created", f"{path}/shared")]


def test_wake_waiters_fires_an_outstanding_watch_with_none_and_records_no_wakeup(recorder):
    client, history, path, other = recorder
    ahead = other.create(f"{path}/lock-", ephemeral=True, sequence=True)
    fired = threading.Event()
    seen = []
    client.get(ahead, watch=lambda event: (seen.append(event), fired.set()))
    assert client.armed
    client.raw.stop()                     # kazoo's callback thread is gone: only wake_waiters can end a wait
    client.wake_waiters()
    assert fired.wait(PATIENCE) and [event.type for event in seen] == [EventType.NONE]
    assert not client.armed and history.events(kind="woke") == [] and client.last_woken_by is None
    client.wake_waiters()
    assert len(seen) == 1, "a watch fires once"


def test_deliver_pending_notifications_is_false_on_a_stopped_client(recorder):
    client, _, _, _ = recorder
    client.raw.stop()
    assert client.deliver_pending_notifications(PATIENCE) is False


def test_kazoos_own_lock_runs_through_the_recording_client(recorder):
    client, history, path, _ = recorder
    lock = client.Lock(f"{path}/kazoo", "learner")
    assert lock.acquire(timeout=PATIENCE)
    try:
        [node] = client.nodes
        assert client.nodes[node] is True and history.events(kind="created")[0].detail["node"] == node
        assert client.client_id == client.raw.client_id, "everything else is the real client's"
    finally:
        lock.release()
