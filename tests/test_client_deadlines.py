"""A holder cut off from every server gives up on its own clock, strictly before the server
frees its lock: ZooKeeperLock's client-side deadline and EtcdSession's send-time deadline,
on real servers, with the connection cut by a TCP relay (nothing reaches the holder)."""
from __future__ import annotations

import pytest

from labkit.lessons.client_deadlines import cut_off_holder

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
