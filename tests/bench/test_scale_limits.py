"""The physical limits the scale benchmark holds its throughput against
(labkit/bench/scale/limits.py), measured for real but briefly: fdatasync in a folder of this
machine's disk and a one-byte TCP ping-pong on 127.0.0.1. Each gives a rate and a median that
agree with each other, and leaves nothing behind (no probe file, no listening socket, no echo
thread); a folder that is not there is an OSError. Timing is the machine's business: nothing
is asserted on how fast. The throughput rows need a lab: tests/bench/test_bench_scale.py."""
from __future__ import annotations

import threading

import pytest
from helpers import socket_inodes

from labkit.bench.scale.limits import fdatasync_rate, loopback_round_trip

pytestmark = pytest.mark.no_servers


def listening_ports() -> set[str]:
    """The local ports of this process's TCP sockets that listen on 127.0.0.1 (/proc/net/tcp,
    state 0A, whose inode is one of /proc/self/fd's sockets): never another program's, which a
    busy machine starts at any moment (a lab of another leg did, in a fresh-clone run)."""
    mine = socket_inodes()
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return {row[1] for row in rows if row[3] == "0A" and row[1].startswith("0100007F:") and row[9] in mine}


def agree(measured: dict[str, float]) -> bool:
    """The rate is samples / their sum (1 / the mean) and the median is of the same samples:
    at least half of them lie within twice the mean, so the median is at most 2 / rate
    (a median in microseconds, or a rate of other samples, breaks it)."""
    return 0 < 0.001 * measured["p50_ms"] * measured["per_second"] <= 2.01


def test_fdatasync_rate_measures_in_the_folder_and_leaves_no_probe(tmp_path):
    measured = fdatasync_rate(str(tmp_path), seconds=0.2)
    assert set(measured) == {"per_second", "p50_ms"}
    assert measured["per_second"] > 0 and measured["p50_ms"] > 0
    assert agree(measured)
    assert list(tmp_path.iterdir()) == [], "the probe file is removed"


def test_fdatasync_rate_in_a_folder_that_is_not_there_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        fdatasync_rate(str(tmp_path / "gone"), seconds=0.1)


def test_loopback_round_trip_answers_every_byte_and_closes_its_sockets():
    before_threads, before_ports = threading.active_count(), listening_ports()
    measured = loopback_round_trip(iterations=200)
    assert set(measured) == {"per_second", "p50_ms"}
    assert measured["per_second"] > 0 and measured["p50_ms"] > 0
    assert agree(measured)
    assert threading.active_count() == before_threads, "the echo thread ended"
    assert listening_ports() <= before_ports, "the echo server's socket is closed"
