"""labkit/locks/zookeeper_queue.py, on the session lab's ZooKeeper: ``contenders_seen`` counts a
lock's children as the client's own member has them, 0 where it has no such path yet."""
from __future__ import annotations

import uuid

import pytest
from kazoo.exceptions import NoNodeError

from labkit.locks.zookeeper_queue import contenders_seen


def test_a_lock_path_its_member_has_not_applied_yet_counts_no_contenders(lab):
    # A waiter's member may lag the holder's: until it has applied the create of the lock's path,
    # a read there answers NoNode (soak run, session 16: the race's "waiter queues" wait raised
    # NoNodeError, 2 of 3 full runs under load). The count is 0 then; the wait goes on.
    client = lab.zookeeper.client()
    path = f"/seen-{uuid.uuid4().hex[:8]}"
    try:
        with pytest.raises(NoNodeError):
            client.get_children(path)             # what the wait read before
        assert contenders_seen(client, path) == 0
        for _ in range(2):
            client.create(f"{path}/contender-", ephemeral=True, sequence=True, makepath=True)
        assert contenders_seen(client, path) == 2
    finally:
        client.stop()
        client.close()
