"""The Go-Mutex row of ``labkit bench --processes`` (labkit/bench/processes/etcdctl_chain.py),
small, on the session lab's real etcd with real ``etcdctl lock`` processes: the chain hands the
lock on as often as asked, each hand-off sending the next waiter at least one watch event;
the baseline is sampled after each; every etcdctl is stopped (their watches gone) and the
FIFOs' folder removed; a FIFO nobody opens is a TimeoutError after the bound, not a hang.
Timings are printed by the bench, never asserted (tests/bench/test_bench_processes.py runs
the whole bench in miniature)."""
from __future__ import annotations

import glob
import os
import tempfile

import pytest

from labkit.bench.processes.etcdctl_chain import (BASELINE_SAMPLES, measure_etcdctl_chain, open_for_writing,
                                                  watchers)
from labkit.bench.processes.targets import GO_MUTEX
from labkit.timing import wait_until


def test_the_chain_hands_the_lock_on_and_stops_every_etcdctl(lab, unique_name):
    folders = set(glob.glob(os.path.join(tempfile.gettempdir(), "labkit-etcdctl-chain-*")))
    before = watchers(lab)
    said = []
    row = measure_etcdctl_chain(lab, 3, 5, unique_name.strip("/"), said.append, budget=60)
    assert row["row"] == GO_MUTEX and row["n"] == 3 and row["handoffs"] == 2, "releases are capped at n - 1"
    assert all(ms > 0 for ms in row["raw_handoff_ms"]) and len(row["handoff_ms"]) == 2
    assert all(events >= 1 for events in row["wakeups"]), row["wakeups"]
    assert len(row["baseline_ms"]) == 2 * BASELINE_SAMPLES and all(ms > 0 for ms in row["baseline_ms"])
    assert said == [f"{GO_MUTEX}: 3/3 processes queued"]
    wait_until(lambda: watchers(lab) == before, "every etcdctl's watch to go", timeout=30)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "labkit-etcdctl-chain-*"))) == folders


@pytest.mark.no_servers
def test_a_fifo_nobody_opens_is_a_timeout_not_a_hang(tmp_path):
    fifo = str(tmp_path / "nobody")
    os.mkfifo(fifo, 0o600)
    with pytest.raises(TimeoutError, match="nobody opened"):
        open_for_writing(fifo, 0.3)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fd, opened_at = open_for_writing(fifo, 10)   # a reader is there now: the open returns
        os.close(fd)
    finally:
        os.close(reader)
