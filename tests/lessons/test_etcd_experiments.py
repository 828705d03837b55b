"""The many-client experiments of the etcd lesson (labkit/lessons/etcd_experiments.py) on the
session lab's real etcd: a guarded put writes only while its Mutex is held; a holder whose
keep-alive stopped goes on writing, its plain puts all taken (the last word is its own, over
the successor's) while no guarded write started after the successor held is taken, and its
session gives up; python-etcd3's Lock held past its TTL loses its key without being told, a
rival takes that lock, while the Mutex kept alive refuses its rival; two client processes:
the silent holder's key goes only after its lease ran out and the waiter queued behind it
gets the lock; the plots draw the samples and the writes they are given."""
from __future__ import annotations

import contextlib

import matplotlib
import pytest

from labkit.lessons.etcd_experiments import (REFRESHED, UNREFRESHED, CarelessRun, careless_holder,
                                             careless_writes_plot, guarded_put, hold_past_ttl, lease_countdown_plot,
                                             stop_keepalive)
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession

TTL = 2


@pytest.fixture
def opened(lab):
    """(new_client, new_session, etcd): connections and sessions closed at the end, as notebook 03's."""
    with contextlib.ExitStack() as stack:
        def new_client(node=None):
            client = lab.etcd.client(node=node)
            stack.callback(client.close)
            return client

        def new_session(ttl=TTL, node=None):
            session = EtcdSession(new_client(node), ttl=ttl)
            stack.callback(session.close)
            return session

        yield new_client, new_session, new_client()


def test_a_guarded_put_writes_only_while_its_mutex_is_held(opened, unique_name):
    _, new_session, etcd = opened
    session = new_session()
    mutex = EtcdMutex(session, f"/locks{unique_name}", identifier="guard")
    mutex.lock(timeout=10)
    assert guarded_put(mutex, f"/data{unique_name}", "while held") is True
    session.revoke()                       # the key goes with the lease
    assert guarded_put(mutex, f"/data{unique_name}", "after") is False
    assert etcd.get(f"/data{unique_name}")[0] == b"while held"
    etcd.delete(f"/data{unique_name}")


def test_a_careless_holders_plain_puts_win_and_its_guarded_ones_are_refused(opened, unique_name):
    _, new_session, etcd = opened
    careless = EtcdMutex(new_session(), f"/locks{unique_name}", identifier="A")
    successor = EtcdMutex(new_session(ttl=10), f"/locks{unique_name}", identifier="B")
    careless.lock(timeout=10)
    plain, guarded = f"/data{unique_name}/plain", f"/data{unique_name}/guarded"
    run = careless_holder(careless, successor, plain_key=plain, guarded_key=guarded)
    try:
        assert run.successor_results == [True, True] and run.noticed is not None
        assert all(accepted for _, _, what, accepted in run.writes if what == "plain put")
        late = [accepted for started, _, what, accepted in run.writes
                if what == "guarded txn" and started > run.successor_acquired]
        assert len(late) >= 3 and not any(late), "A's key was gone before B held: no late guarded write is taken"
        assert etcd.get(plain)[0].startswith(b"A #"), "A's plain put came after B's write and overwrote it"
        assert etcd.get(guarded)[0] == b"B"
    finally:
        successor.unlock()
        etcd.delete_prefix(f"/data{unique_name}")


def test_python_etcd3s_lock_held_past_its_ttl_is_lost_unknowingly_the_mutex_is_not(opened):
    new_client, new_session, etcd = opened
    past = hold_past_ttl(etcd, new_client, new_session, ttl=TTL)
    try:
        assert past.reference_key_gone and past.still_says_held, "the key went; the Lock object was not told"
        assert past.key_gone_at is not None and past.held_for >= past.key_gone_at
        assert past.rival_token is not None, "a rival took python-etcd3's lock"
        assert past.mutex_rival_refused, "the Mutex's session kept its lease alive"
        assert past.samples[-1][1][UNREFRESHED] == -1 and past.samples[-1][1][REFRESHED] >= 0
    finally:
        past.ported.unlock()
        past.rival.release()


@pytest.mark.slow   # two client processes and a lease running out: ~8 s on the shared 2-core machine
def test_a_silent_holders_key_goes_after_its_lease_and_the_waiter_takes_over(lab, opened, unique_name):
    _, _, etcd = opened
    expiry = stop_keepalive(lab, etcd, f"/locks{unique_name}", ttl=TTL, work=0.05)
    assert expiry.queued_behind_holder
    # keep-alives go every third of the TTL: the lease outlives the stop by at least two thirds
    assert expiry.key_gone_after >= TTL / 3
    assert expiry.history.acquisition_order() == ["client-1", "client-2"]
    assert expiry.history.events(client="client-1", kind="lost"), "the holder learned it lost the lock"


@pytest.mark.no_servers
def test_the_plots_draw_the_samples_and_the_writes_they_are_given():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = [(0.0, {"a": 2, "b": 2}, True), (1.0, {"a": 1, "b": 2}, True), (2.0, {"a": -1, "b": 2}, False)]
    run = CarelessRun(writes=[(0.1, 0.2, "plain put", True), (0.2, 0.3, "guarded txn", True),
                              (2.1, 2.2, "plain put", True), (2.2, 2.3, "guarded txn", False)],
                      successor_acquired=2.0, successor_wrote_at=2.05, noticed=None)
    figure, (leases, writes) = plt.subplots(1, 2)
    try:
        lease_countdown_plot(samples, leases, "two leases")
        assert [line.get_label() for line in leases.get_lines()] == ["a", "b", "key on the lone lease deleted"]
        assert list(leases.get_lines()[2].get_xdata()) == [2.0, 2.0]
        careless_writes_plot(run, writes)
        labels = writes.get_legend_handles_labels()[1]
        assert labels.count("A's write accepted") == 1 and "A's write rejected" in labels
        assert "A's session.done is set" not in labels, "it never gave up: no line for it"
    finally:
        plt.close(figure)
