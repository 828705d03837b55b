"""A cut-off ZooKeeper semaphore holder, and a cut-off election leader, stop believing strictly
before the next client is let in (issue #33, item 3; claims C20, C27, C28): on a real 3-node
ensemble, the holder's own link cut (client-link) and its follower cut from the leader with the
link up (follower-cut), RUNS races each, every run asserted, margins printed. The negative
controls, the same races without a client-side deadline (ZooKeeperSemaphore with
client_deadline=False, Curator's behaviour; kazoo's own Election as the leader), NEGATIVE_RUNS
each (a run waits two timeouts past the grant to show the holder never stops), are unsafe in
every run: the waiter is admitted while the old holder still believes it holds. On main before
this change ZooKeeperSemaphore kept no deadline, so the semaphore races failed there."""
from __future__ import annotations

import pytest

import labkit
from labkit.lessons.holder_safety import summary
from labkit.lessons.semaphore_deadlines import deadline_race, deadline_races
from labkit.locks.zookeeper_election import ZooKeeperElection
from labkit.locks.zookeeper_semaphore import ZooKeeperSemaphore
from labkit.servers.services.zookeeper import SERVER_LAG

RUNS = 10            # the safety claims: ten runs a topology
NEGATIVE_RUNS = 3    # the controls: each of their runs ~9 s (two timeouts past the grant), as the other controls
TOPOLOGIES = ("client-link", "follower-cut")

pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception in thread:pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture(scope="module")
def ensemble():
    with labkit.up(zookeeper=3, etcd=0, redis=False, network=True, quiet=True) as lab:
        yield lab


def _races(lab, primitive, topology, deadline):
    count = RUNS if deadline else NEGATIVE_RUNS
    runs = deadline_races(lab, primitive, topology, count, deadline=deadline,
                          progress=lambda number, run: print(f"  {number + 1:2d} {run.row()}"))
    print(summary(runs))
    assert len(runs) == count
    return runs


@pytest.mark.parametrize("primitive", ["semaphore", "election"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.slow
def test_a_cut_off_holder_gives_up_before_the_waiter_is_admitted(ensemble, primitive, topology):
    runs = _races(ensemble, primitive, topology, deadline=True)
    for run in runs:
        assert run.safe, f"{primitive}, {topology}: the waiter was admitted {run.acquired_ms:.0f} ms after the fault, " \
                         f"the holder gave up at {run.gave_up_ms} ms: {run.row()}"


@pytest.mark.parametrize("primitive", ["semaphore", "election"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.slow
def test_negative_control_without_a_deadline_the_holder_believes_past_the_grant(ensemble, primitive, topology):
    # Cut off, kazoo hears LOST only once the link is back: until then the holder believes,
    # while the leader has expired its session and let the waiter in.
    runs = _races(ensemble, primitive, topology, deadline=False)
    for run in runs:
        assert not run.safe and run.gave_up_ms is None, \
            f"{primitive}, {topology}: without a deadline the holder still stopped in time: {run.row()}"


def test_bad_arguments_get_clear_errors(ensemble, lab):
    with pytest.raises(ValueError, match="primitive"):
        deadline_race(ensemble, "barrier")
    with pytest.raises(ValueError, match="topology"):
        deadline_race(ensemble, "semaphore", "sideways")
    with pytest.raises(ValueError, match="3 ZooKeeper members and network=True"):
        deadline_race(lab, "semaphore")


def test_a_semaphore_holder_reads_its_deadline_at_each_call(zk, unique_name):
    # Its answers stop coming (here: its contact clock set 10 s in the past): is_held reads
    # False at once, with no SUSPENDED and no timer needed, as ZooKeeperLock's does.
    semaphore = ZooKeeperSemaphore(zk, unique_name, 2)
    semaphore.acquire(timeout=5)
    try:
        assert semaphore.is_held and semaphore.time_left() > 0
        semaphore.client_deadline.contact.heard_at -= 10.0
        assert not semaphore.is_held and not semaphore.is_suspended
    finally:
        semaphore.release()
    assert semaphore.holders() == []


def test_the_unsafe_option_keeps_no_deadline(zk, unique_name):
    semaphore = ZooKeeperSemaphore(zk, unique_name, 2, client_deadline=False)
    semaphore.acquire(timeout=5)
    try:
        assert semaphore.client_deadline is None and semaphore.give_up_at() == float("inf")
        semaphore.mutex.contact.heard_at -= 10.0  # silent for 10 s: it believes all the same
        assert semaphore.is_held
    finally:
        semaphore.release()


def test_a_session_too_short_for_the_lag_is_refused_before_anything_is_created(lab, unique_name):
    client = lab.zookeeper.client(timeout=1.0)
    try:
        semaphore = ZooKeeperSemaphore(client, unique_name, 2, server_lag=SERVER_LAG)   # as on an ensemble
        with pytest.raises(ValueError, match=r"too short to hold .* safely.* at least \d"):
            semaphore.acquire(timeout=5)
        assert semaphore.node is None and client.exists(unique_name) is None
        election = ZooKeeperElection(client, unique_name, server_lag=SERVER_LAG)
        with pytest.raises(ValueError, match=r"too short to hold .* safely"):
            election.campaign(timeout=5)
        assert client.exists(unique_name) is None
        # the same session on the standalone server (no lag, learned from the server) is fine
        semaphore = ZooKeeperSemaphore(client, unique_name, 2)
        semaphore.acquire(timeout=5)
        assert semaphore.is_held
        semaphore.release()
    finally:
        client.stop()
        client.close()
