"""Lesson 06's timings (labkit/lessons/observing.py): a lock client process holding a real
ZooKeeper lock (the session lab's), SIGKILLed just after the server heard its heartbeat,
leaves its node until the server expires its session, so the node goes no sooner than about
one session timeout after the kill (the lower bound is the claim; a loaded machine can only
make it later); and the first hand-on after a fault is the first acquisition by another
client after it, or a ValueError saying the lock never passed on."""
from __future__ import annotations

import pytest

from labkit.clients import spawn_clients
from labkit.lessons.observing import first_hand_on, node_gone_after_kill
from labkit.record.events import Event
from labkit.record.history import History

SESSION_TIMEOUT = 3.0


@pytest.mark.slow   # a client process and a session timeout: ~10 s on the shared 2-core machine
def test_a_killed_holders_node_goes_only_when_its_session_expires(lab, zk, unique_name):
    with spawn_clients(lab, "zookeeper", n=1, name=unique_name, session_timeout=SESSION_TIMEOUT) as clients:
        [holder] = clients
        holder.acquire(timeout=10)
        [node] = [f"{unique_name}/{child}" for child in zk.get_children(unique_name)]
        gone_after = node_gone_after_kill(holder, lab.zookeeper, zk, node)
        assert zk.exists(node) is None and holder.state == "dead"
        # the server heard the holder a moment before the kill and waits a whole timeout from
        # then; half of it leaves room for the moment between that packet and the kill
        assert gone_after >= SESSION_TIMEOUT / 2, f"the node went {gone_after:.2f} s after the kill"
    zk.delete(unique_name, recursive=True)


def history_of(*events):
    return History(Event(100.0 + at, client, kind, {}) for at, client, kind in events)


@pytest.mark.no_servers
def test_the_first_hand_on_is_the_first_acquisition_by_another_client_after_the_fault():
    history = history_of((1, "client-2", "acquired"), (2, "client-1", "acquired"), (3, "client-1", "released"),
                         (4, "client-1", "acquired"), (5, "client-3", "waiting"), (6, "client-3", "acquired"),
                         (7, "client-2", "acquired"))
    assert first_hand_on(history, after=101.5, other_than="client-1") == 106.0
    assert first_hand_on(history, after=100.0, other_than="client-1") == 101.0
    assert first_hand_on(history, after=106.0, other_than="client-1") == 107.0, "strictly after the fault"
    with pytest.raises(ValueError, match="no client other than client-2 acquired the lock after 106.5"):
        first_hand_on(history, after=106.5, other_than="client-2")
