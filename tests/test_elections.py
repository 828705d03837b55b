"""Leader election on the real servers of the shared ``lab``: etcd's election with etcdctl as a
peer, ZooKeeper's with kazoo's Election as a peer, the epoch as a fencing token (C28), and a
Kubernetes-style lease election's failover bound and clock-skew gap (C31)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from labkit.clients import ClientError, spawn_clients
from labkit.lessons import elections
from labkit.locks.errors import InvalidElectionName, InvalidLeaseDurations, NoElectedLeader, NotLeader
from labkit.locks.etcd_election import EtcdElection
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.lease_election import LeaseDurations, LeaseElection
from labkit.locks.zookeeper_election import ZooKeeperElection
from labkit.record.epochs import check_one_leader_per_epoch
from labkit.timing import wait_until
from labkit.torture import torture


def client_processes() -> list[int]:
    """Lock client processes this test process started that still exist."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"labkit.clients.child" in command:
            found.append(int(entry.name))
    return found


@pytest.fixture
def session(lab):
    client = lab.etcd.client()
    session = EtcdSession(client, ttl=5)
    yield session
    session.close()
    client.close()


@pytest.mark.backend   # servers in containers on the Docker leg
def test_labkit_and_etcdctl_each_see_the_other_lead_in_turn(lab, unique_name):
    outcome = elections.etcdctl_interop(lab, "elections" + unique_name)
    print(outcome.steps)
    assert [(step["labkit sees"], step["peer sees"]) for step in outcome.steps] == [
        ("labkit-1", "labkit-1"), ("etcdctl", "etcdctl"), ("labkit-2", "labkit-2")]
    assert outcome.epochs == sorted(outcome.epochs) and len(set(outcome.epochs)) == 3   # a new epoch per term


def test_labkit_and_kazoos_election_share_one_queue(lab, unique_name):
    outcome = elections.kazoo_interop(lab, "/elections" + unique_name)
    print(outcome.steps)
    assert [(step["labkit sees"], step["peer sees"]) for step in outcome.steps] == [
        ("labkit", "labkit"), ("kazoo", "kazoo"), ("labkit", "labkit")]
    assert outcome.epochs == sorted(outcome.epochs) and len(set(outcome.epochs)) == 3   # czxids grow


def test_proclaim_changes_the_value_only_while_leading_and_observe_sees_it(session, unique_name):
    election = EtcdElection(session, "elections" + unique_name)
    with pytest.raises(NoElectedLeader):
        election.leader()
    with pytest.raises(NotLeader):
        election.proclaim("too early")
    stop, seen = threading.Event(), []
    observer = threading.Thread(target=lambda: seen.extend(leader.proposal for leader in election.observe(stop)))
    observer.start()
    epoch = election.campaign("first")
    election.proclaim("second")
    assert election.leader().proposal == "second" and election.leader().epoch == epoch   # same term
    try:
        wait_until(lambda: seen[-2:] == ["first", "second"], f"the observer to see both proposals (saw {seen})")
    finally:
        stop.set()
        observer.join(5)
    election.resign()
    with pytest.raises(NotLeader):
        election.proclaim("after resigning")


@pytest.mark.slow
def test_a_paused_old_leaders_write_is_refused_by_its_epoch(lab):
    # C28: the new leader's epoch is higher; the store, having seen it, refuses the old one
    for label, outcome in elections.paused_leaders(lab, timeout=1.0, pause=3.0).items():
        print(label, outcome.rows())
        assert outcome.new_token > outcome.old_token, label
        assert [(write.client, write.accepted) for write in outcome.writes] == [
            ("client-1", True), ("client-2", True), ("client-1", False)], label
        assert outcome.writes[-1].token == outcome.old_token and not outcome.late_write_accepted, label
        assert outcome.verdict.ok, outcome.verdict.explain()
        one_leader = check_one_leader_per_epoch(outcome.writes, outcome.history)
        assert one_leader.ok and "2 epoch(s)" in one_leader.summary, one_leader.explain()


@pytest.mark.backend   # servers in containers on the Docker leg
def test_lease_election_fails_over_within_the_worst_case_of_its_durations(lab):
    # C31: leaseDuration + 2 x retryPeriod bounds the failover after a SIGKILL of the leader
    failover = elections.lease_failover(lab, lease_duration=1.5)
    print(failover, round(failover.ratio, 2))
    assert failover.worst_case == pytest.approx(1.5 + 2 * 0.2)
    # never before the lease ran out (less the retry period and the try in which it last renewed) ...
    assert failover.seconds > 1.5 - 2 * 0.2
    assert failover.seconds <= failover.worst_case   # ... and never later than the bound


def test_a_follower_whose_clock_runs_ahead_takes_over_a_leader_that_still_believes(lab):
    durations = LeaseDurations(1.5, 1.0, 0.2)
    agreed = elections.skewed_takeover(lab, durations, skew=0.0, watch=2.0)
    ahead = elections.skewed_takeover(lab, durations, skew=2.0)
    observed = elections.skewed_takeover(lab, durations, skew=2.0, judge="observed", watch=2.0)
    print(agreed, ahead, observed, sep="\n")
    assert not agreed.took_over and agreed.overlap is None            # agreeing clocks: no takeover
    assert ahead.took_over and ahead.leader_believed_at_takeover      # skew: the old leader still believed
    assert 0 < ahead.overlap <= 2 * durations.retry_period            # until its next renewal failed
    assert not observed.took_over                                     # client-go's own-clock rule is immune


def test_bad_input_is_refused_with_one_clear_error_and_nothing_left_running(lab, session, zk):
    for name in ("", "  ", "elections/", "a\x00b", None):
        with pytest.raises(InvalidElectionName, match="not a valid etcd election name"):
            EtcdElection(session, name)
    for path in ("elections", "/", "/a//b", "/a/", "/a/../b"):
        with pytest.raises(InvalidElectionName, match="not a valid ZooKeeper election path"):
            ZooKeeperElection(zk, path)
    with pytest.raises(InvalidLeaseDurations, match="renew_deadline .* must be shorter than lease_duration"):
        LeaseDurations(lease_duration=2, renew_deadline=2, retry_period=0.5)
    with pytest.raises(InvalidLeaseDurations, match="retry_period .* must be shorter than renew_deadline"):
        LeaseDurations(lease_duration=3, renew_deadline=1, retry_period=1)
    with pytest.raises(InvalidLeaseDurations, match="positive"):
        LeaseDurations(lease_duration=float("nan"), renew_deadline=1, retry_period=0.1)
    with pytest.raises(InvalidElectionName):
        LeaseElection(session.client, "", "me", LeaseDurations(3, 2, 0.5))
    # a client process given a bad name exits with the error, and is gone
    before = client_processes()
    with pytest.raises(ClientError, match="not a valid ZooKeeper election path") as refused:
        spawn_clients(lab, "zookeeper-election", n=1, name="no-slash")
    assert "InvalidElectionName" in str(refused.value)
    with pytest.raises(ClientError, match="positive number of seconds"):
        spawn_clients(lab, "lease-election", n=1, name="elections/x", ttl=0)
    assert client_processes() == before


@pytest.mark.no_servers
def test_one_leader_per_epoch_fails_when_two_clients_act_under_one_epoch():
    honest = [{"time": 1.0, "client": "a", "token": 5, "accepted": True},
              {"time": 2.0, "client": "b", "token": 7, "accepted": True},
              {"time": 3.0, "client": "a", "token": 5, "accepted": False}]
    assert check_one_leader_per_epoch(honest).ok
    shared = honest + [{"time": 4.0, "client": "c", "token": 7, "accepted": True}]
    verdict = check_one_leader_per_epoch(shared)
    assert not verdict.ok and verdict.problems == ["epoch 7: b wrote at 2.000; c wrote at 4.000"]
    assert not check_one_leader_per_epoch([]).ok          # nothing shown, nothing proved
    assert not check_one_leader_per_epoch([{"time": 1.0, "client": "a", "token": None, "accepted": True}]).ok


@pytest.mark.slow   # its own servers, 3 client processes, 6 s
@pytest.mark.parametrize("recipe", ["etcd-election", "lease-election"])
def test_labkit_torture_judges_an_election_one_leader_per_epoch(recipe):
    result = torture(recipe, clients=3, duration=6.0, nemesis="pause,kill", seed=1, timeout=1.0, quiet=True)
    judgement = result.trials[0].judgement
    assert judgement.safety == "One leader per epoch" and judgement.linearizability_judged
    assert result.ok, "\n".join(judgement.lines())
    assert "each epoch belonged to one client" in judgement.mutual_exclusion.summary
