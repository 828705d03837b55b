"""The experiments of notebooks 04 and 05, run on real servers."""
import time

import pytest
import redis

import labkit
from labkit import faults
from labkit.record.checker import check_fifo
from labkit.clients import spawn_clients
from labkit.record.history import History
from labkit.locks.zookeeper import sorted_contenders
from labkit.locks.zookeeper_deadline import heartbeat_for
from labkit.faults.relay import TcpLink
from labkit.harness.queue import queue_behind, release_in_turn
from labkit.lessons.common import table
from labkit.lessons.coordinator_crash import (ETCD_ELECTION_TIMEOUT, acquisitions_through_members,
                                              FAILOVER_WAITER_TIMEOUT, crash_then_fail_over, lose_majority,
                                              zookeeper_write)
from labkit.errors import NoLeader
from labkit.locks.errors import SessionExpired
from labkit.lessons.pauses_and_fencing import pause_past_timeout
from labkit.servers.services.zookeeper import TICK_MS
from labkit.timing import seconds_until, wait_until


def test_seconds_until_counts_from_the_given_moment_and_gives_up_with_the_last_error():
    attempts = []

    def succeeds_on_the_third_try():
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError(f"attempt {len(attempts)}")

    since = time.monotonic() - 1.0
    assert seconds_until(succeeds_on_the_third_try, since=since, timeout=5) >= 1.0
    assert len(attempts) == 3
    with pytest.raises(TimeoutError, match="attempt 99"):
        seconds_until(lambda: (_ for _ in ()).throw(ConnectionError("attempt 99")), since=time.monotonic(),
                      timeout=0.2)
    with pytest.raises(TimeoutError, match="returned False"):
        seconds_until(lambda: False, since=time.monotonic(), timeout=0.2)


def test_wait_until_and_table():
    assert wait_until(lambda: True, "something true") < 1.0
    with pytest.raises(TimeoutError, match="the impossible"):
        wait_until(lambda: False, "the impossible", timeout=0.1)
    assert table([{"client": "a", "token": 1}, {"client": "bb", "token": None}]).splitlines() == [
        "client  token", "a       1", "bb      None"]


@pytest.mark.slow
def test_a_cut_link_drops_bytes_until_it_is_restored(lab):
    with TcpLink(f"{lab.redis.host}:{lab.redis.port}") as link:
        host, port = link.address.rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port), socket_timeout=0.5, **lab.redis.auth)
        assert client.ping()
        link.cut()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        link.restore()
        fresh = redis.Redis(host=host, port=int(port), socket_timeout=2.0, **lab.redis.auth)
        assert fresh.ping()
        fresh.close()
        client.close()
    with pytest.raises(ValueError, match="127.0.0.1"):
        TcpLink("10.0.0.1:2181")


@pytest.mark.slow
@pytest.mark.parametrize("recipe, fenced", [("zookeeper", False), ("etcd", True)])
def test_a_paused_holder_writes_late_and_only_fencing_stops_it(lab, recipe, fenced):
    outcome = pause_past_timeout(lab, recipe, fenced=fenced, timeout=2.0, pause=5.0)
    assert outcome.new_token > outcome.old_token
    assert outcome.old_holder_told_at > outcome.new_holder_acquired_at
    assert outcome.late_write_accepted is not fenced
    assert outcome.verdict.ok is fenced
    assert [(row["client"], row["accepted"]) for row in outcome.rows()] == [
        ("client-1", True), ("client-2", True), ("client-1", not fenced)]
    with pytest.raises(ValueError, match="longer than the timeout"):
        pause_past_timeout(lab, recipe, timeout=2.0, pause=1.0)


@pytest.mark.slow
def test_leader_crash_keeps_the_queue_and_a_lost_majority_stops_writes(monkeypatch):
    with labkit.up(zookeeper=3, etcd=3, redis=False, quiet=True) as lab:
        for service in ("zookeeper", "etcd"):
            rows = acquisitions_through_members(lab, service, rounds=2)
            order = [row["czxid"] if service == "zookeeper" else row["header_revision"] for row in rows]
            assert all(a < b for a, b in zip(order, order[1:])), rows
            assert {row["member"] for row in rows} == {node.name for node in getattr(lab, service).nodes}

        history = History()
        observer = lab.zookeeper.client(timeout=6.0)
        try:
            # a holder that hears nothing for 0.8 of its session timeout gives up (its client-side
            # deadline): the timeout must outlast an election on a busy machine by a wide margin.
            # The claim (notebook 05's): the ensemble takes writes again before that deadline, so
            # the holder keeps its lock. This test asserted 6.0 s, 0.8 s under the deadline it
            # stands for (6.8 s with a 10 s session), and failed once at load average 18 (#34);
            # 15 s sessions leave an election on a busy machine 10.8 s.
            session_timeout = 15.0
            holder_deadline = session_timeout * 0.8 - lab.zookeeper.server_lag - heartbeat_for(session_timeout)
            with spawn_clients(lab, "zookeeper", n=3, name="/locks/crash", history=history,
                               session_timeout=session_timeout) as clients:
                pending = queue_behind(clients)
                before = sorted_contenders(observer.get_children("/locks/crash"))
                killed_at = time.monotonic()
                killed = faults.kill_leader(lab.zookeeper, history=history)
                assert lab.zookeeper.wait_for_leader(timeout=30) is not killed
                wrote = seconds_until(zookeeper_write(observer), since=killed_at)
                print(f"a write went through {wrote:.2f} s after the leader's kill (holder's deadline "
                      f"{holder_deadline:.1f} s)")
                assert wrote < holder_deadline, (wrote, holder_deadline)
                assert sorted_contenders(observer.get_children("/locks/crash")) == before
                assert release_in_turn(clients, pending) == ["client-2", "client-3"]
            assert check_fifo(history).ok
        finally:
            observer.stop()
            observer.close()
        killed.start()
        lab.zookeeper.wait_for_leader(timeout=30)

        for service in ("zookeeper", "etcd"):
            outcome = lose_majority(lab, service)
            assert outcome["write during the outage"] is False, outcome
            assert set(outcome["values"].values()) == {"before"} and len(outcome["values"]) == 3, outcome

        # a failover restarts the timers: the dead holder's lock outlives its timeout (C26)
        for service, extension in (("zookeeper", 0.0), ("etcd", ETCD_ELECTION_TIMEOUT)):
            timers = crash_then_fail_over(lab, service, timeout=3.0)
            assert timers.freed_after_leader_kill >= 3.0 + extension - TICK_MS / 1000, timers.row()
            assert timers.freed_at > 3.0 + 0.5, timers.row()

        # a run that fails after the leader's kill starts the killed leader again (notebook 05's
        # next cells need the whole cluster): the new leader is forced to be "not found in time"
        timers.restart_killed_leader(lab.etcd)

        def no_leader_in_time(timeout):
            raise NoLeader(f"forced by the test: no etcd leader within {timeout} s")

        monkeypatch.setattr(lab.etcd, "wait_for_leader", no_leader_in_time)
        with pytest.raises(NoLeader, match="forced by the test"):
            crash_then_fail_over(lab, "etcd", timeout=3.0)
        monkeypatch.undo()
        assert sorted(node.role for node in lab.etcd.nodes) == ["follower", "follower", "leader"]
        with pytest.raises(ValueError, match="must be longer than the holder's 3.0 s"):
            crash_then_fail_over(lab, "etcd", timeout=3.0, waiter_timeout=3.0)



@pytest.mark.slow
@pytest.mark.parametrize("waiter_ttl, waits", [(3, False), (FAILOVER_WAITER_TIMEOUT, True)], ids=["holders-3s", "waiter-timeout"])
def test_no_keep_alive_is_acknowledged_without_a_leader_so_only_a_longer_waiter_waits_through_it(waiter_ttl, waits):
    # Why crash_then_fail_over's waiter gets FAILOVER_WAITER_TIMEOUT rather than the holder's 3 s: a
    # waiter with 3 s gave up there during an election on a busy machine (#34). The slow election
    # is forced: with the leader killed and the other follower paused, the follower the clients
    # talk to cannot win a vote, so nobody acknowledges a keep-alive until the pause ends. The
    # holder's 3 s run out (its client-side deadline); a waiter with 3 s gives up in the same
    # outage (the negative control); one with FAILOVER_WAITER_TIMEOUT waits through it and gets the lock.
    with labkit.up(zookeeper=0, etcd=3, redis=False, quiet=True) as lab:
        lab.etcd.wait_for_leader(timeout=30)
        follower, other = [node for node in lab.etcd.nodes if node.role == "follower"]
        with spawn_clients(lab, "etcd", n=2, name="/locks/slow-election", ttl=3,
                           timeouts={"client-2": waiter_ttl}, connections={"etcd": follower.endpoint}) as clients:
            pending = queue_behind(clients)
            waiter = clients["client-2"]
            other.pause()
            try:
                lab.etcd.leader().kill()
                lost = clients.history.wait_for("lost", client="client-1", timeout=20)
                assert "client-side deadline" in lost[0].detail["reason"], lost[0]
                if not waits:
                    with pytest.raises(SessionExpired, match="client-side deadline"):
                        waiter.wait_reply(pending["client-2"], timeout=20)
            finally:
                other.resume()
            if waits:
                lab.etcd.wait_for_leader(timeout=30)
                waiter.wait_reply(pending["client-2"], timeout=60)   # the holder's key expires on the new leader
                assert clients.history.events(client="client-2", kind="acquired")
