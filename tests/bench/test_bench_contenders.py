"""The Python rows of ``labkit bench --processes`` (labkit/bench/processes/contenders.py),
small, on the session lab's real ZooKeeper with real crowd worker processes: a ZooKeeperLock
row hands the lock on as often as asked (at most n - 1 times), each release waking one
waiter by the clients' count and at least one watch by the server's; a row's hand-offs are its spans in ms.
Timings are printed by the bench, never asserted (tests/bench/test_bench_processes.py runs
the whole bench in miniature)."""
from __future__ import annotations

import pytest

from labkit.bench.processes.contenders import PYTHON_ROWS, measure_python, row_of
from labkit.bench.processes.targets import ZOOKEEPER_LOCK


@pytest.mark.slow   # three worker processes: ~10 s on the shared 2-core machine
def test_a_zookeeper_row_hands_the_lock_on_waking_one_waiter_a_release(lab, unique_name):
    said = []
    row = measure_python(lab, ZOOKEEPER_LOCK, 3, 5, unique_name, said.append, budget=120)
    assert PYTHON_ROWS[ZOOKEEPER_LOCK] == "zookeeper" and row["service"] == "zookeeper"
    assert row["handoffs"] == 2 and len(row["handoff_ms"]) == 2 and all(ms > 0 for ms in row["handoff_ms"])
    assert row["client_wakeups"] == [1, 1], "a predecessor watch: one waiter a release"
    assert len(row["wakeups"]) == 2 and all(fired >= 1 for fired in row["wakeups"])   # the whole server counts
    assert row["wakeups_from"] == "server: watches fired (mntr)"
    assert said and said[-1] == f"{ZOOKEEPER_LOCK}: 3/3 processes up"


@pytest.mark.no_servers
def test_a_rows_hand_offs_are_its_spans_in_ms():
    row = row_of("a row", 3, [(10.0, 10.0015), (11.0, 11.25)], [1, 1], "etcd", None, {"release": 0.5}, 4.26)
    assert row["handoff_ms"] == [1.5, 250.0] and row["handoffs"] == 2 and row["start_s"] == 4.3
    assert row["wakeups_from"] == "server: watch events sent (/metrics)"
