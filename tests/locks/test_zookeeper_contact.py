"""The holder's own clock of leader contact (labkit/locks/zookeeper_contact.py), followed on a
real kazoo client of the session lab's ZooKeeper: one ServerContact per client, counting no
answer that came before it; a read is an answer but no proof that the leader heard of us, a
sync and a write are, each stamped with its *send* time (between the moments before the call
and after it); expires_by is that stamp plus the granted timeout; a reconnect's handshake
counts as proof, names the server and takes the timeout the server granted. The deadline
built on it, on cut links and paused servers: test_client_deadlines.py, test_holder_safety.py."""
from __future__ import annotations

import time

import pytest

from labkit.locks.zookeeper_contact import ServerContact, server_contact
from labkit.timing import wait_until

SESSION_TIMEOUT = 4.0


@pytest.fixture
def client(lab):
    client = lab.zookeeper.client(timeout=SESSION_TIMEOUT)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def sent_within(call):
    """(monotonic before, after) ``call()``."""
    before = time.monotonic()
    call()
    return before, time.monotonic()


def test_one_contact_per_client_and_nothing_answered_before_it_counts(lab, client):
    client.sync("/")                          # answered before anyone followed the client
    contact = server_contact(client)
    assert server_contact(client) is contact
    assert contact.heard_at is None and contact.answered_at is None and contact.silent_for() == 0.0
    before = time.monotonic()
    assert before <= contact.expires_by() <= time.monotonic(), "never heard: it may be expired now"
    other = lab.zookeeper.client(timeout=SESSION_TIMEOUT)
    try:
        assert server_contact(other) is not contact
    finally:
        other.stop()
        other.close()


def test_a_read_is_an_answer_a_sync_and_a_write_prove_the_leader_heard(client, unique_name):
    contact = server_contact(client)
    before, after = sent_within(lambda: client.get("/"))
    assert contact.heard_at is None and before <= contact.answered_at <= after, "a read proves no leader contact"
    before, after = sent_within(lambda: client.sync("/"))
    assert before <= contact.heard_at <= after and contact.answered_at >= contact.heard_at
    synced = contact.heard_at
    before, after = sent_within(lambda: client.create(unique_name, ephemeral=True))
    assert before <= contact.heard_at <= after and contact.heard_at > synced
    assert contact.expires_by() == contact.heard_at + contact.session_timeout
    now = time.monotonic()
    assert contact.silent_for() >= now - after, "counted from the send, before the answer came"
    client.get("/")
    assert contact.answered_at > contact.heard_at, "the newer read is an answer, not a proof"


def test_a_reconnect_counts_its_handshake_names_the_server_and_takes_the_granted_timeout(lab, client):
    contact = server_contact(client)
    assert contact.server is None, "no connection made since the contact followed the client"
    client.stop()
    before, after = sent_within(lambda: client.start(timeout=15))
    # kazoo says CONNECTED inside the handshake, so start() may return a moment before the
    # handshake is counted; it began before start() returned
    wait_until(lambda: contact.heard_at is not None, "the handshake counted", timeout=10)
    assert before <= contact.heard_at <= after
    node = lab.zookeeper.nodes[0]
    assert contact.server == (node.host, node.port)
    assert contact.session_timeout == pytest.approx(client._session_timeout / 1000.0, abs=0.01)


def test_the_newest_send_wins_whatever_order_the_answers_come_in():
    contact = ServerContact(SESSION_TIMEOUT)
    contact._answered(10.0, True)
    contact._answered(12.0, False)
    contact._answered(11.0, True)             # a pipelined request answered after a newer ping
    assert (contact.heard_at, contact.answered_at) == (11.0, 12.0)
    contact._answered(9.0, True)
    assert (contact.heard_at, contact.answered_at) == (11.0, 12.0)
    assert contact.expires_by() == 11.0 + SESSION_TIMEOUT
