"""History: ordering, holds, wakeups per release, and events from other processes."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from labkit.record.events import Event
from labkit.record.history import FAULT_CLIENT, History, HistoryUnreachable, remote_sink

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


def crafted(*rows: tuple) -> History:
    """Rows of (time, client, kind[, detail])."""
    return History(Event(row[0], row[1], row[2], row[3] if len(row) > 3 else {}) for row in rows)


def test_events_are_ordered_by_time_whatever_the_arrival_order():
    history = crafted((3.0, "b", "acquired"), (1.0, "a", "requested"), (2.0, "a", "acquired"))
    assert [event.time for event in history.events()] == [1.0, 2.0, 3.0]
    assert [event.kind for event in history.events(client="a")] == ["requested", "acquired"]
    assert [event.client for event in history.events(kind="acquired")] == ["a", "b"]


def test_sink_stamps_client_and_rejects_unknown_kinds():
    history = History()
    on_event = history.sink("client-1")
    on_event("acquired", token=7)
    (event,) = history.events()
    assert (event.client, event.kind, event.detail) == ("client-1", "acquired", {"token": 7})
    with pytest.raises(ValueError, match="unknown event kind"):
        on_event("grabbed")


def test_append_is_thread_safe():
    history = History()
    sinks = [history.sink(f"client-{index}") for index in range(8)]
    threads = [threading.Thread(target=lambda s=s: [s("requested") for _ in range(200)]) for s in sinks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(history) == 8 * 200
    times = [event.time for event in history.events()]
    assert times == sorted(times)


def test_holds_from_acquired_to_released_or_lost():
    history = crafted(
        (1.0, "a", "acquired", {"token": 5}), (2.0, "a", "released", {"token": 5}),
        (2.1, "b", "acquired", {"token": 6}), (3.0, "b", "lost", {"reason": "session expired"}),
        (3.2, "c", "acquired", {"token": 7}))
    holds = history.holds()
    assert [(h.client, h.token, h.start, h.end, h.end_reason) for h in holds] == [
        ("a", 5, 1.0, 2.0, "released"), ("b", 6, 2.1, 3.0, "lost"), ("c", 7, 3.2, None, "open")]
    assert holds[1].lost_reason == "session expired"
    assert history.acquisition_order() == ["a", "b", "c"]


def test_wakeups_without_watch_events_go_to_the_hold_in_progress():
    # herd: b, c, d all wake after a's release (c twice: counted once); then c and d after b's
    history = crafted(
        (0.0, "a", "acquired"),
        (0.5, "b", "woke"),  # b woke during a's hold: counted once for a's hand-off
        (1.0, "a", "released"),
        (1.001, "b", "woke"), (1.002, "c", "woke"), (1.003, "d", "woke"), (1.004, "c", "woke"),
        (1.01, "b", "acquired"), (2.0, "b", "released"),
        (2.001, "c", "woke"), (2.002, "d", "woke"), (2.01, "c", "acquired"),
        (3.0, "c", "released"), (3.001, "d", "woke"), (3.01, "d", "acquired"),
        (4.0, "d", "released"))  # nobody left to hand off to: not counted
    assert history.wakeups_per_release() == [3, 2, 1]


def parent_watch(time: float, client: str) -> tuple:
    return (time, client, "watch", {"target": "/lock", "what": "parent"})


def test_herd_wakeups_stamped_after_the_next_acquire_still_count():
    # b takes the lock before c and d have even processed the same notification
    history = crafted(
        (0.0, "a", "acquired"), parent_watch(0.1, "b"), parent_watch(0.2, "c"), parent_watch(0.3, "d"),
        (1.0, "a", "released"), (1.001, "b", "woke"), (1.002, "b", "acquired"),
        (1.003, "c", "woke"), (1.004, "d", "woke"), parent_watch(1.0035, "c"), parent_watch(1.0045, "d"),
        (2.0, "b", "released"), (2.001, "c", "woke"), (2.002, "c", "acquired"), (2.003, "d", "woke"))
    assert history.wakeups_per_release() == [3, 2]


def test_a_key_watch_stamped_late_is_forgiven_by_the_clock_slack():
    # an etcd herd: c watches from a revision it read before a released; its "watch" stamp is 5 ms late
    history = crafted((0.0, "a", "acquired"), (1.005, "c", "watch", {"target": "/lock", "what": "key"}),
                      (1.0, "a", "released"),
                      (1.002, "b", "acquired"), (1.006, "c", "woke"), (2.0, "b", "released"),
                      (2.01, "c", "acquired"))
    assert history.wakeups_per_release() == [1, 0]
    assert history.wakeups_per_release(clock_slack=0.0) == [0, 1]


def predecessor(time: float, client: str, node: str) -> tuple:
    return (time, client, "watch", {"target": f"/lock/{node}", "what": "predecessor"})


def test_predecessor_wakes_are_matched_to_the_hold_they_watched_whatever_the_stamps():
    # queue a(n1) b(n2) x(n3) c(n4). x dies while waiting: c wakes, re-checks and watches
    # b's node, but no release woke it. a's and b's "released" are stamped late, after
    # the next holder acquired and after the next waiter woke.
    history = crafted(
        (0.0, "a", "acquired", {"node": "n1"}), predecessor(0.1, "b", "n1"), predecessor(0.2, "x", "n2"),
        predecessor(0.3, "c", "n3"),
        (0.5, FAULT_CLIENT, "fault", {"what": "kill", "target": "x"}),
        (0.6, "c", "woke", {"target": "/lock/n3"}), predecessor(0.61, "c", "n2"),
        (1.004, "b", "woke", {"target": "/lock/n1"}), (1.005, "b", "acquired", {"node": "n2"}),
        (1.006, "c", "woke", {"target": "/lock/n2"}), (1.007, "c", "acquired", {"node": "n4"}),
        (1.009, "a", "released"), (1.011, "b", "released"))
    assert history.wakeups_per_release() == [1, 1]


def test_wakeup_stamped_just_before_the_release_still_counts():
    # the waiter's notification raced the releaser's reply: it is stamped first
    history = crafted((0.0, "a", "acquired"), (0.998, "b", "woke"), (1.0, "a", "released"),
                      (1.01, "b", "acquired"))
    assert history.wakeups_per_release() == [1]


def test_lost_hold_hands_off_too_and_releasers_own_wake_is_ignored():
    history = crafted((0.0, "a", "acquired"), (1.0, "a", "lost"), (1.001, "a", "woke"),
                      (1.002, "b", "woke"), (1.1, "b", "acquired"))
    assert history.wakeups_per_release() == [1]


def test_record_fault_and_rows():
    history = crafted((10.0, "a", "acquired", {"token": 3}))
    fault = history.record_fault("pause", "a", seconds=2)
    assert fault.client == FAULT_CLIENT and fault.detail == {"what": "pause", "target": "a", "seconds": 2}
    rows = history.to_rows()
    assert rows[0] == {"t (s)": 0.0, "client": "a", "kind": "acquired", "detail": "token=3"}
    assert history.clients() == ["a"]


def test_wait_for_times_out_with_a_message():
    history = History()
    with pytest.raises(TimeoutError, match="'acquired'"):
        history.wait_for("acquired", timeout=0.2)


REPOSITORY = Path(__file__).resolve().parents[2]  # so that "python -c" imports this labkit
CHILD = """
import sys
from labkit.record.history import remote_sink
on_event = remote_sink(sys.argv[1], sys.argv[2])
for index in range(50):
    on_event("requested", index=index)
on_event("acquired", token=index)
on_event.close()
"""


def test_events_from_other_processes_reach_the_history():
    with History() as history:
        address = history.listen()
        assert address.startswith("127.0.0.1:")
        children = [subprocess.Popen([sys.executable, "-c", CHILD, address, f"proc-{n}"], cwd=REPOSITORY)
                    for n in range(2)]
        try:
            # a hang guard, no claim of speed: two Pythons that import labkit, 30 s expired at load 24-40
            assert [child.wait(timeout=240) for child in children] == [0, 0]
        finally:
            for child in children:
                child.kill()
        history.wait_for("acquired", count=2, timeout=10)
        for name in ("proc-0", "proc-1"):
            indexes = [event.detail["index"] for event in history.events(client=name, kind="requested")]
            assert indexes == list(range(50))
    assert all(not thread.is_alive() for thread in history._threads)


def test_a_peer_with_the_wrong_key_is_turned_away_and_others_still_connect():
    with History() as history:
        address = history.listen()
        host_port, key = address.split("/")
        with pytest.raises(HistoryUnreachable, match="refused our key"):
            remote_sink(f"{host_port}/{'00' * 16}", "intruder")
        on_event = remote_sink(address, "friend")
        on_event("requested")
        history.wait_for("requested", client="friend", timeout=10)
        on_event.close()
    assert history.clients() == ["friend"]


def test_remote_sink_to_a_closed_history_says_so():
    history = History()
    address = history.listen()
    history.close()
    with pytest.raises(HistoryUnreachable, match="no history listening"):
        remote_sink(address, "late")
    with pytest.raises(HistoryUnreachable, match="closed"):
        history.listen()
    with pytest.raises(HistoryUnreachable, match="not a history address"):
        remote_sink("nonsense", "x")


def test_latest_gives_a_clients_last_events_oldest_first():
    history = crafted((1.0, "c1", "acquired"), (2.0, "c2", "requested"), (3.0, "c1", "write"), (4.0, "c2", "acquired"))
    assert [event.kind for event in history.latest("c1", 2)] == ["acquired", "write"]
    assert [event.kind for event in history.latest("c2")] == ["acquired"]
    assert [event.kind for event in history.latest("c2", 5)] == ["requested", "acquired"]
    assert history.latest("c3", 2) == []
