"""Curator's InterProcessMutex cut off from the quorum, on a real 3-node ensemble: when
Curator reports SUSPENDED and LOST against the server's delete of its node (the waiter's
grant), in the two topologies of issue #22 (e). Each test prints its runs and the margins.

What holds in every run (this lab: tickTime 200 ms, syncLimit 5, so a follower cut from its
leader drops its clients 0.9-1.0 s after the cut):
- the client's link cut: SUSPENDED comes between 1/3 and 2/3 of the session timeout after
  the cut (the Java client's read timeout is 2/3 of it, counted from its last answer), before
  the grant;
- its follower cut from the leader: SUSPENDED comes only when the follower drops the client,
  ~1 s after the cut whatever the session timeout (a 0.6 s session's own read timeout may fire
  sooner on a loaded machine, when a ping is answered late). With a 2 s session that is before
  the grant; with a 0.6 s session it is AFTER the grant: a Curator user who stops at SUSPENDED, as
  Curator's docs advise, still overlaps with the next holder;
- LOST comes at least one session timeout after SUSPENDED (Curator's simulated expiry), after
  the grant in every run, or not at all while the cut lasts: LOST is never the signal to stop.
"""
from __future__ import annotations

import pytest

import labkit
from labkit.lessons.curator_topologies import curator_race_many, curator_summary
from labkit.servers.services.zookeeper import SYNC_LIMIT, TICK_MS


RUNS = 3
SLACK = 0.75   # s: a loaded machine's delay from the JVM's read timeout to its listener, at most
#                (0.5 was 15 ms short at load 20: SUSPENDED at 1848 ms for a bound of 1833)
FOLLOWER_DROP = (SYNC_LIMIT * TICK_MS - TICK_MS / 2) / 1000   # the leader pings every half tick


# slow: 9 races on a 3-node ensemble, ~45 s; curator: checked before the module's lab starts
pytestmark = [pytest.mark.slow, pytest.mark.curator("Curator's races against the quorum")]


@pytest.fixture(scope="module")
def zookeeper_lab():
    with labkit.up(zookeeper=3, etcd=0, redis=False, network=True, quiet=True) as lab:
        yield lab


def _races(lab, topology: str, timeout: float):
    runs = curator_race_many(lab, topology, RUNS, timeout)
    rows = [run.row() for run in runs]
    print(*rows, curator_summary(runs), sep="\n")
    assert len(runs) == RUNS
    for run in runs:
        assert run.timeout_s == timeout, rows                       # the server granted what Curator asked
        assert None not in (run.suspended_ms, run.deleted_ms), rows
        assert run.deleted_ms <= run.acquired_ms, rows              # the grant is the server's delete
        # LOST, if it came while the cut lasted (at load 20 it once had not, 26 s after the cut:
        # later still, and still no signal to stop), is simulated: SUSPENDED must have lasted the
        # session timeout, and it is always after someone else holds
        if run.lost_ms is not None:
            assert run.lost_ms - run.suspended_ms >= 1000 * timeout - 50, rows
            assert run.lost_ms > run.acquired_ms, rows
    return runs, rows


def test_client_link_cut_suspended_comes_within_two_thirds_of_the_timeout_before_the_grant(zookeeper_lab):
    timeout = 3.0   # 2/3 of it plus the slack stays under the timeout: the bound tells the read timeout apart
    assert 2 * timeout / 3 + SLACK < timeout
    runs, rows = _races(zookeeper_lab, "client-link", timeout)
    for run in runs:
        assert 1000 * (timeout / 3 - 0.05) <= run.suspended_ms <= 1000 * (2 * timeout / 3 + SLACK), rows
        assert run.suspended_first, rows


def test_follower_cut_suspended_waits_for_the_follower_to_drop_the_client(zookeeper_lab):
    timeout = 2.0
    runs, rows = _races(zookeeper_lab, "follower-cut", timeout)
    for run in runs:
        assert 1000 * FOLLOWER_DROP <= run.suspended_ms <= 1000 * (FOLLOWER_DROP + TICK_MS / 1000 + SLACK), rows
        assert run.suspended_first, rows       # a 2 s session outlasts the follower's 1 s


def test_follower_cut_with_a_session_shorter_than_the_follower_window_suspended_comes_after_the_grant(
        zookeeper_lab):
    # The finding: with a session timeout under syncLimit x tickTime the leader expires the
    # session and gives the lock away while the follower still answers Curator's pings.
    timeout = 0.6
    runs, rows = _races(zookeeper_lab, "follower-cut", timeout)
    for run in runs:
        # SUSPENDED by the follower's drop, or sooner by the client's own read timeout (2/3 of the
        # session, counted from its last answer, at most a third of it before the cut), which a
        # loaded machine triggers when a ping's answer comes late: 728 ms once in a fresh-clone run
        # at load 8, the follower's drop being 900 ms. The 2 s test keeps the drop's lower bound.
        assert 1000 * (timeout / 3 - 0.05) <= run.suspended_ms <= 1000 * (FOLLOWER_DROP + TICK_MS / 1000 + SLACK), rows
        assert not run.suspended_first, rows   # Curator said SUSPENDED after the waiter got the lock
