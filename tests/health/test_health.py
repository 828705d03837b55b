"""labkit.health: the parsers on real ZooKeeper and etcd output, the sampler watching a
real queue, the workload driving real client processes, and the alert rules on crafted
signals (each rule fires on its fault and stays quiet on a healthy run)."""
from __future__ import annotations

import contextlib
import threading
import uuid

import matplotlib
import pytest

from labkit.record.events import Event
from labkit.health import (ETCD_SERIES, LEASE_LOST, SESSION_EXPIRED, EtcdProbe, HealthSampler, HealthSignals, Loss,
                           SteadyWorkload, Thresholds, ZooKeeperProbe, alerts, collect_signals, draw_dashboard,
                           etcd_numbers, longest_stall, parse_mntr, parse_prometheus, parse_wchc, parse_wchs,
                           percentile, session_hex, stall_limit, watch_kinds, zookeeper_numbers)
from labkit.record.history import History
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.zookeeper import ZooKeeperLock

from helpers import DEADLINE, wait_for_value, wait_until

matplotlib.use("Agg")
pytestmark = pytest.mark.filterwarnings(  # python3-etcd3's watch thread fails on close (its missing `six`)
    "ignore:Exception in thread etcd3_watch:pytest.PytestUnhandledThreadExceptionWarning")


def _quietly(acquire, **kwargs) -> None:
    """A waiter thread: the test ends it by closing its session, which raises in acquire."""
    with contextlib.suppress(Exception):
        acquire(**kwargs)


@contextlib.contextmanager
def zookeeper_queue(lab, path: str, waiters: int, watch: str = "predecessor"):
    """A holder and ``waiters`` blocked behind it, each on its own session, each waiter's
    watch armed before the next one queues. Yields (locks, clients), holder first."""
    clients = [lab.zookeeper.client(timeout=4.0) for _ in range(waiters + 1)]
    armed = [threading.Event() for _ in clients]

    def sink(number):
        return lambda kind, **detail: armed[number].set() if kind == "watch" else None
    locks = [ZooKeeperLock(client, path, identifier=f"c{number}", watch=watch, on_event=sink(number))
             for number, client in enumerate(clients)]
    threads = []
    try:
        locks[0].acquire(timeout=DEADLINE)
        for number, lock in enumerate(locks[1:], start=1):
            thread = threading.Thread(target=_quietly, args=(lock.acquire,), kwargs={"timeout": DEADLINE}, daemon=True)
            thread.start()
            threads.append(thread)
            assert armed[number].wait(DEADLINE), f"waiter {number} never armed its watch"
        yield locks, clients
    finally:
        for client in clients:  # closing the sessions frees the holder and every waiter at once
            client.stop()
            client.close()
        for thread in threads:
            thread.join(DEADLINE)


# ---- ZooKeeper's four-letter words -----------------------------------------------------
def test_mntr_parses_to_numbers_on_a_real_server(lab):
    mntr = parse_mntr(lab.zookeeper.four_letter("mntr"))
    assert mntr["zk_server_state"] == "standalone"
    assert isinstance(mntr["zk_avg_latency"], float) and isinstance(mntr["zk_ephemerals_count"], int)
    numbers = zookeeper_numbers(mntr)
    assert numbers["has_leader"] == 1.0 and numbers["connections"] >= 1
    assert zookeeper_numbers(parse_mntr("This ZooKeeper instance is not currently serving requests\n")) == \
        {"has_leader": 0.0}


def _watched(lab, sessions: list[int], watching: int) -> dict[str, list[str]]:
    """{session: paths it watches}, once ``watching`` of ``sessions`` watch something (a
    recipe announces "watch" just before the server registers it)."""
    def read():
        watches = parse_wchc(lab.zookeeper.four_letter("wchc"))
        found = {session_hex(session): watches.get(session_hex(session), []) for session in sessions}
        return found if sum(bool(paths) for paths in found.values()) >= watching else None
    return wait_for_value(read, f"{watching} sessions to watch")


def test_wchc_shows_each_waiter_watching_only_its_predecessor(lab, unique_name):
    with zookeeper_queue(lab, unique_name, waiters=3) as (locks, clients):
        queue = [f"{unique_name}/{lock.node}" for lock in locks]
        sessions = [session_hex(client.client_id[0]) for client in clients]
        watched = _watched(lab, [client.client_id[0] for client in clients], watching=3)
        summary = parse_wchs(lab.zookeeper.four_letter("wchs"))
        ephemerals = parse_mntr(lab.zookeeper.four_letter("mntr"))["zk_ephemerals_count"]
    assert watched[sessions[0]] == [], "the holder watches nothing"
    for position in range(1, 4):
        assert watched[sessions[position]] == [queue[position - 1]], f"waiter {position} should watch its predecessor"
    assert summary["watches"] >= 3 and summary["connections"] >= 3
    assert ephemerals >= 4, "each contender is one ephemeral node"


def test_parent_watches_are_counted_by_mntr_but_never_listed_by_wchc(lab, unique_name):
    # ZooKeeper's DataTree dumps only its data watches for wchc/wchs/wchp; a getChildren
    # watch on the parent is a child watch: in zk_watch_count, in no listing.
    before = watch_kinds(parse_mntr(lab.zookeeper.four_letter("mntr")), parse_wchs(lab.zookeeper.four_letter("wchs")))
    with zookeeper_queue(lab, unique_name, waiters=3, watch="parent") as (locks, clients):
        sessions = [session_hex(client.client_id[0]) for client in clients]
        kinds = wait_for_value(lambda: (found := watch_kinds(parse_mntr(lab.zookeeper.four_letter("mntr")),
                                                         parse_wchs(lab.zookeeper.four_letter("wchs"))))["child"]
                           >= before["child"] + 3 and found, "three child watches")
        listed = parse_wchc(lab.zookeeper.four_letter("wchc"))
    assert kinds["child"] == before["child"] + 3 and kinds["data"] == before["data"]
    assert not set(sessions) & set(listed), "wchc should list no watch of a parent-watching session"


def test_wchs_parses_and_odd_replies_give_nothing():
    assert parse_wchs("3 connections watching 1 paths\nTotal watches:3\n") == \
        {"connections": 3, "paths": 1, "watches": 3}
    assert parse_wchs("not serving") == {}
    assert parse_wchc("0x1\n\t/a\n\t/b\n\n0x2\n\t/a\n") == {"0x1": ["/a", "/b"], "0x2": ["/a"]}


# ---- etcd's /metrics ----------------------------------------------------------------------
def test_prometheus_text_parses_names_and_labelled_series():
    text = ('# HELP x a thing\n# TYPE x gauge\nx 1\ny{code="OK",method="Put"} 2.5e+01\n'
            'y{code="Unavailable",method="Put"} 0\nz NaN-not-a-number\n')
    assert parse_prometheus(text) == {"x": 1.0, 'y{code="OK",method="Put"}': 25.0,
                                      'y{code="Unavailable",method="Put"}': 0.0}
    assert parse_prometheus(text, ["x"]) == {"x": 1.0}


def test_etcd_metrics_have_every_series_and_count_keys(lab):
    node = lab.etcd.nodes[0]
    before = etcd_numbers(node.metrics())
    assert set(before) == set(ETCD_SERIES), f"etcd 3.4 lacks {set(ETCD_SERIES) - set(before)}"
    assert before["has_leader"] == 1.0 and before["leader_changes"] >= 1
    client = lab.etcd.client()
    key = f"/health-test/{uuid.uuid4().hex}"
    try:
        client.put(key, "x")
        assert etcd_numbers(node.metrics())["keys_total"] == before["keys_total"] + 1
    finally:
        client.delete(key)
        client.close()


def test_etcd_counts_a_lease_nobody_kept_alive_as_expired(lab):
    node = lab.etcd.nodes[0]
    before = etcd_numbers(node.metrics())["leases_expired"]
    client = lab.etcd.client()
    try:
        client.lease(1)  # granted, never refreshed
        wait_until(lambda: etcd_numbers(node.metrics())["leases_expired"] > before, "the server to expire the lease")
    finally:
        client.close()


# ---- the sampler on real queues --------------------------------------------------------------
def test_sampler_sees_a_zookeeper_queue_of_three_waiters_and_then_none(lab, unique_name):
    with HealthSampler([ZooKeeperProbe(lab, unique_name)], interval=0.05) as sampler:
        with zookeeper_queue(lab, unique_name, waiters=3):
            seen = sampler.wait_for(lambda sample: sample.waiting == 3, "three waiters", DEADLINE)
            assert seen.numbers["ephemerals"] >= 4 and seen.numbers["has_leader"] == 1.0
        sampler.wait_for(lambda sample: sample.contenders == 0, "an empty queue", DEADLINE)


def test_sampler_sees_an_etcd_queue_of_two_waiters(lab, unique_name):
    prefix = "/health" + unique_name
    clients = [lab.etcd.client() for _ in range(3)]
    sessions = [EtcdSession(client, ttl=5) for client in clients]
    mutexes = [EtcdMutex(session, prefix) for session in sessions]
    threads = [threading.Thread(target=_quietly, args=(mutex.lock,), kwargs={"timeout": DEADLINE}, daemon=True)
               for mutex in mutexes[1:]]
    try:
        with HealthSampler([EtcdProbe(lab, prefix)], interval=0.05) as sampler:
            mutexes[0].lock(timeout=DEADLINE)
            for thread in threads:
                thread.start()
            # one sample reads the /metrics a moment before the count: wait for both to catch up
            seen = sampler.wait_for(lambda sample: sample.waiting == 2 and sample.numbers.get("keys_total", 0) >= 3,
                                    "two waiters and etcd counting their keys", DEADLINE)
            assert seen.numbers["has_leader"] == 1.0
            for session in sessions:
                session.close()  # revokes the leases: every key goes
            sampler.wait_for(lambda sample: sample.contenders == 0, "no key left", DEADLINE)
    finally:
        for session, client in zip(sessions, clients):
            session.close()
            client.close()
        for thread in threads:
            thread.join(DEADLINE)


# ---- the workload on real client processes ----------------------------------------------------
def test_workload_loops_real_clients_and_hands_one_out(lab, unique_name):
    from labkit.clients import spawn_clients
    with spawn_clients(lab, "zookeeper", n=2, name=unique_name, session_timeout=4.0) as clients:
        workload = SteadyWorkload(clients, hold=0.02, think=0.05).start()
        try:
            wait_until(lambda: min(workload.rounds.values()) >= 2, "two rounds of each client")
            taken = workload.take_out("client-1", timeout=DEADLINE)
            rounds = workload.rounds["client-1"]
            assert taken.state == "idle"
            wait_until(lambda: workload.rounds["client-2"] >= rounds + 2, "client-2 looping on its own")
            assert workload.rounds["client-1"] == rounds, "a client taken out must not loop"
            workload.put_back("client-1")
            wait_until(lambda: workload.rounds["client-1"] > rounds, "client-1 looping again")
        finally:
            workload.stop(timeout=DEADLINE)
        assert workload.errors == []
        holds = clients.history.holds()
        assert all(hold.end_reason == "released" for hold in holds) and len(holds) >= 5


# ---- signals and alerts on crafted runs (pure: no server) ---------------------------------------
START = 1_000.0


def healthy_signals(seconds: int = 30) -> HealthSignals:
    """Two clients taking turns: a hand-off every 0.5 s, one waiter at most, short holds."""
    ticks = [START + 0.25 * step for step in range(4 * seconds)]
    return HealthSignals(
        start=START, end=START + seconds, timeouts={"ZooKeeper": 2.0},
        holds={"ZooKeeper": [(START + 0.5 * step, 0.1) for step in range(2 * seconds)]},
        open_holds={"ZooKeeper": 0},
        acquisitions={"ZooKeeper": [START + 0.5 * step for step in range(2 * seconds)]},
        queue={"ZooKeeper": [(at, step % 2) for step, at in enumerate(ticks)]},
        server={"ZooKeeper": {"has_leader": [(at, 1.0) for at in ticks], "leader_changes": [(at, 1.0) for at in ticks],
                              "leases_expired": [(at, 0.0) for at in ticks]}})


def rules(signals: HealthSignals, thresholds: Thresholds | None = None) -> list[str]:
    return [alert.rule for alert in alerts(signals, thresholds)]


def test_a_healthy_run_raises_no_alert():
    assert alerts(healthy_signals()) == []


def _no_leader(signals):
    signals.server["ZooKeeper"]["has_leader"][10] = (START + 2.5, 0.0)


def _leader_change(signals):
    signals.server["ZooKeeper"]["leader_changes"] = [(at, 1.0 if at < START + 5 else 2.0)
                                                     for at, _ in signals.server["ZooKeeper"]["leader_changes"]]


def _stuck_queue(signals):
    signals.acquisitions["ZooKeeper"] = [at for at in signals.acquisitions["ZooKeeper"]
                                         if not START + 10 < at < START + 13]
    signals.queue["ZooKeeper"] = [(at, 3 if START + 10 < at < START + 13 else waiting)
                                  for at, waiting in signals.queue["ZooKeeper"]]


def _expiry(signals):
    signals.losses.append(Loss(START + 5, "ZooKeeper", "c1", SESSION_EXPIRED, False, "session ended"))


def _lease_lost_to_keepalive(signals):
    signals.losses.append(Loss(START + 5, "ZooKeeper", "c1", LEASE_LOST, True, "no keep-alive reached it"))


def _server_expired_a_lease(signals):
    signals.server["ZooKeeper"]["leases_expired"][-1] = (START + 29.75, 1.0)


def _one_long_hold(signals):
    signals.holds["ZooKeeper"][3] = (START + 1.5, 1.5)


@pytest.mark.parametrize("fault, expected", [
    (_no_leader, ["no leader"]), (_leader_change, ["leader changes"]), (_stuck_queue, ["queue backing up"]),
    (_expiry, ["session expiries"]), (_lease_lost_to_keepalive, ["lease losses", "keep-alive failures"]),
    (_server_expired_a_lease, ["keep-alive failures"]), (_one_long_hold, ["long holds"])])
def test_each_alert_fires_on_its_fault_and_no_other(fault, expected):
    signals = healthy_signals()
    fault(signals)
    assert rules(signals) == expected


def test_an_unreachable_server_counts_as_no_leader():
    signals = healthy_signals()
    signals.unreachable["ZooKeeper"] = [(START + 3, "ConnectionRefusedError")]
    assert rules(signals) == ["no leader"]
    assert "3.0 s" in str(alerts(signals)[0])


def test_thresholds_move_the_alerts():
    signals = healthy_signals()
    _one_long_hold(signals)
    _stuck_queue(signals)
    assert rules(signals, Thresholds(hold_fraction_of_timeout=0.9, stall_seconds=5.0)) == []
    assert rules(signals, Thresholds(hold_fraction_of_timeout=0.9, stall_fraction_of_timeout=2.0)) == []
    assert rules(healthy_signals(), Thresholds(hold_fraction_of_timeout=0.01)) == ["long holds"]
    assert stall_limit(signals, "ZooKeeper", Thresholds()) == 1.0, "half of the 2 s timeout"
    assert stall_limit(signals, "etcd", Thresholds()) == 1.0, "no timeout known: 1 s"
    assert stall_limit(signals, "x", Thresholds(stall_seconds=3)) == 3


def test_longest_stall_ends_at_a_hand_off():
    signals = healthy_signals()
    _stuck_queue(signals)
    seconds, since, depth = longest_stall(signals, "ZooKeeper")
    assert 2.0 <= seconds <= 3.0 and START + 10 <= since <= START + 10.5 and depth == 3
    assert longest_stall(healthy_signals(), "ZooKeeper")[0] < 0.5


def test_percentile_is_nearest_rank():
    assert percentile([3, 1, 2], 0.5) == 2 and percentile(list(range(1, 101)), 0.99) == 99
    assert percentile([5.0], 0.99) == 5.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_collect_signals_cuts_a_window_and_classifies_losses():
    from labkit.health.sampler import Sample
    zookeeper = History([Event(START + 1, "c1", "acquired", {"token": 1}), Event(START + 2, "c1", "released", {}),
                         Event(START + 3, "c2", "acquired", {"token": 2}),
                         Event(START + 4, "c2", "lost", {"reason": "session ended (expired or closed)"}),
                         Event(START + 5, "c3", "acquired", {"token": 3}),
                         Event(START + 50, "c1", "acquired", {"token": 4})])
    zookeeper.record_fault("pause", "c2", seconds=3)
    etcd = History([Event(START + 6, "c1", "acquired", {"token": 10, "key": "/l/1"}),
                    Event(START + 8, "c1", "lost", {"reason": "the lease expired on the server: no keep-alive "
                                                              "reached it for its TTL (2 s)", "key": "/l/1"})])
    samples = [Sample(START + 1, "ZooKeeper", 2, {"has_leader": 1.0}), Sample(START + 60, "ZooKeeper", 5, {}),
               Sample(START + 2, "etcd", None, {}, "ConnectionFailedError: down")]
    signals = collect_signals({"ZooKeeper": zookeeper, "etcd": etcd}, samples, {"ZooKeeper": 2.0}, START, START + 10)
    assert signals.hold_seconds("ZooKeeper") == [1.0, 1.0] and signals.open_holds == {"ZooKeeper": 1, "etcd": 0}
    assert [(loss.client, loss.lost, loss.keepalive_failure) for loss in signals.losses] == \
        [("c2", SESSION_EXPIRED, False), ("c1", LEASE_LOST, True)]
    assert signals.queue == {"ZooKeeper": [(START + 1, 1)]}, "the sample at +60 s is outside the window"
    assert signals.unreachable["etcd"][0][1].startswith("ConnectionFailedError")
    assert signals.faults == [], "the pause was recorded now, far outside the window"


def test_the_dashboard_draws_six_labelled_panels():
    signals = healthy_signals()
    _expiry(signals)
    figure = draw_dashboard(signals, "crafted")
    axes = figure.axes
    assert len(axes) == 6
    assert all(ax.get_title() and ax.get_xlabel() and ax.get_ylabel() for ax in axes)
    assert "ms" in axes[0].get_xlabel() and "(s)" in axes[1].get_xlabel()
    matplotlib.pyplot.close(figure)
    with pytest.raises(ValueError, match="nothing to draw"):
        draw_dashboard(HealthSignals(START, START + 1))
