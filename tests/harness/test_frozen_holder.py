"""A holder frozen past its lease (labkit/harness/frozen_holder.py) on the session lab's real
ZooKeeper and Redis: client-1 acquires and writes, is frozen (SIGSTOP) for longer than its
session timeout, a successor (client-2, or a Redis lock in this process) takes the lock and
writes, and client-1's late write, sent while it is frozen, runs only once it thaws: after
the new holder's in the store's log (read once the block is left), refused by a fenced store
and taken by an unfenced one; client-1 then learns that its session is gone. The lessons
built on it (04, 08, 01's libraries): test_peers.py, test_redlock_lessons.py, test_scenarios.py."""
from __future__ import annotations

import pytest

from labkit.harness.frozen_holder import FIRST_WRITE, LATE_WRITE, NEW_HOLDER_WRITE, frozen_holder
from labkit.locks.redis_lock import RedisLock

PAUSE = 2.5
SESSION_TIMEOUT = 1.0


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_the_late_write_of_a_thawed_zookeeper_holder_lands_after_the_new_holders(lab, unique_name, fenced):
    with frozen_holder(lab, "zookeeper", unique_name, PAUSE, fenced=fenced, session_timeout=SESSION_TIMEOUT) as run:
        assert run.frozen.name == "client-1" and run.new_holder.name == "client-2"
        assert run.new_token > run.old_token, "a later czxid"
        assert run.late_write_accepted is not fenced
        run.history.wait_for("lost", client="client-1", timeout=10)   # thawed, it learns its session is gone
    assert [(write.client, write.token, write.value, write.accepted) for write in run.writes] == [
        ("client-1", run.old_token, FIRST_WRITE, True), ("client-2", run.new_token, NEW_HOLDER_WRITE, True),
        ("client-1", run.old_token, LATE_WRITE, not fenced)]
    with pytest.raises(RuntimeError, match="only inside the frozen_holder block"):
        run.frozen


def test_a_successor_in_this_process_takes_a_redis_lock_whose_ttl_ran_out(lab, unique_name):
    bob_client = lab.redis.client()
    bob = RedisLock(bob_client, f"lock:{unique_name}", ttl_ms=int(10 * PAUSE * 1000), identifier="bob")
    try:
        with frozen_holder(lab, "redis", f"lock:{unique_name}", PAUSE, successor=bob, ttl=SESSION_TIMEOUT) as run:
            assert run.old_token is None and run.new_token is None, "a Redis lock has no token"
            assert bob.is_held and run.late_write_accepted, "an unfenced store takes the late write"
            with pytest.raises(RuntimeError, match="without a successor"):
                run.new_holder
        bob.release()
    finally:
        bob_client.close()
    assert [(write.client, write.value) for write in run.writes] == [
        ("client-1", FIRST_WRITE), ("bob", NEW_HOLDER_WRITE), ("client-1", LATE_WRITE)]
