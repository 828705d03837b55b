"""A holder cut off from every server gives up on its own clock, strictly before the server
frees its lock: ZooKeeperLock's client-side deadline and EtcdSession's send-time deadline,
on real servers, with the connection cut by a TCP relay (nothing reaches the holder)."""
from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from labkit.faults.relay import TcpLink
from labkit.lessons.client_deadlines import cut_off_holder
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.record.history import History

from helpers import DEADLINE, wait_until

# python3-etcd3 0.13's watch thread ends with NameError when a client that watched is closed.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception in thread etcd3_watch:pytest.PytestUnhandledThreadExceptionWarning")


@pytest.mark.parametrize("recipe, timeout", [("zookeeper", 2.0), ("etcd", 2)])
def test_a_cut_off_holder_gives_up_before_the_server_frees_the_lock(lab, recipe, timeout):
    outcome = cut_off_holder(lab, recipe, timeout=timeout)
    print(outcome.row())
    assert "client-side deadline" in outcome.lost_reason
    assert not outcome.holder_still_held_after
    # strictly before: the holder's "lost" comes before the server deletes its node/key
    assert outcome.gave_up_ms < outcome.freed_ms <= outcome.acquired_ms, outcome.row()
    # and not absurdly early: the server gave it at least (timeout - margin) since its last answer,
    # and the last answer came at most a third of the timeout before the cut
    assert outcome.gave_up_ms > 1000 * timeout * (0.8 - 1 / 3) - 100, outcome.row()
    assert outcome.freed_ms < 1000 * timeout * 3, outcome.row()


def test_a_holder_that_gave_up_lets_the_next_waiter_in_when_its_session_survived(lab, unique_name):
    # Gave up early (half the timeout), then the link came back before the server expired the
    # session: the node would keep the lock held for nobody, so the holder deletes it.
    history = History()
    with TcpLink(lab.zookeeper.nodes[0].endpoint) as link:
        holder_client = KazooClient(hosts=link.address, timeout=6.0, **lab.zookeeper.auth)
        waiter_client = lab.zookeeper.client()
        holder_client.start(timeout=15)
        try:
            holder = ZooKeeperLock(holder_client, unique_name, "holder", on_event=history.sink("holder"),
                                   deadline_margin=0.5)
            waiter = ZooKeeperLock(waiter_client, unique_name, "waiter", on_event=history.sink("waiter"))
            holder.acquire(timeout=DEADLINE)
            session_id = holder_client.client_id[0]
            link.cut()
            wait_until(lambda: history.events("holder", "lost"), "the holder gives up", timeout=10)
            assert "client-side deadline" in history.events("holder", "lost")[0].detail["reason"]
            link.restore()
            wait_until(lambda: history.events("holder", "reconnected"), "the holder reconnects, session intact")
            assert holder_client.client_id[0] == session_id and not holder.is_held
            assert waiter.acquire(timeout=DEADLINE) == waiter.czxid
            assert history.events("holder", "lost")[0].detail["token"] < waiter.token
            waiter.release()
            holder.release()                      # its node is gone already: a no-op
        finally:
            for client in (holder_client, waiter_client):
                client.stop()
                client.close()
