"""How fast a lock can change hands at best, and what a quorum costs.

- ``saturated_throughput``: contenders that take the lock and let go again as fast as
  they can (a queue that is never empty), hand-offs per second.
- The physical limit, measured in the same run: a hand-off needs at least one durable
  write that the next holder must wait for (the holder's node or key deleted, fsynced
  before anyone is told), and at least one round trip on loopback. ``fdatasync_rate``
  loops write + fdatasync in the lab's own data folder (same disk as the servers' logs);
  ``loopback_round_trip`` ping-pongs one byte over TCP on 127.0.0.1.
- ``ensemble_latency``: uncontended acquire + release p50 on labs of 1, 3 and 5 nodes:
  with more nodes a write waits for a majority to have it on disk.

What can fail: ``OSError`` when the data folder cannot be written; the errors of
``labkit.up`` (ports, binaries) and of the crowd (``CrowdError``); every lab and crowd
started here is stopped on the way out.
"""
from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from labkit.bench.scale.crowd_handoff import uncontended
from labkit.clients.crowd import Crowd, running
from labkit.locks.registry import connections_of
from labkit.servers.lab import up
from labkit.stats import percentile

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


def fdatasync_rate(folder: str, seconds: float = 2.0) -> dict[str, float]:
    """Appends of 64 bytes, each followed by fdatasync, for ``seconds``, in ``folder``:
    syncs per second and the p50 of one sync."""
    samples = []
    with tempfile.NamedTemporaryFile(dir=folder, prefix="fsync-probe-") as probe:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            os.write(probe.fileno(), b"x" * 64)
            os.fdatasync(probe.fileno())
            samples.append(time.perf_counter() - started)
    return {"per_second": round(len(samples) / sum(samples), 1), "p50_ms": round(percentile(samples, 0.5) * 1000, 3)}


def loopback_round_trip(iterations: int = 2000) -> dict[str, float]:
    """One byte there and back over TCP on 127.0.0.1 (Nagle off), ``iterations`` times:
    round trips per second and the p50 of one."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def echo() -> None:
        connection, _ = server.accept()
        with connection:
            while data := connection.recv(1):
                connection.sendall(data)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    samples = []
    with socket.create_connection(server.getsockname()) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(iterations):
            started = time.perf_counter()
            client.sendall(b"x")
            client.recv(1)
            samples.append(time.perf_counter() - started)
    thread.join(5)
    server.close()
    return {"per_second": round(len(samples) / sum(samples), 1), "p50_ms": round(percentile(samples, 0.5) * 1000, 3)}


def saturated_throughput(lab: Lab, recipe: str, contenders: int, workers: int, seconds: float) -> dict[str, Any]:
    """``contenders`` over ``workers`` processes loop acquire + release for ``seconds``:
    hand-offs per second through a queue that is never empty."""
    crowd = Crowd(connections_of(lab), recipe, f"/throughput-{uuid.uuid4().hex[:8]}/{recipe}", contenders,
                  workers=workers)
    try:
        acquisitions = crowd.loop(seconds)
    finally:
        crowd.close()
    return {"recipe": recipe, "contenders": contenders, "seconds": seconds, "acquisitions": acquisitions,
            "per_second": round(acquisitions / seconds, 1), "left_behind": running(crowd.pids)}


def throughput_against_limits(lab: Lab, contenders: int, workers: int, seconds: float) -> dict[str, Any]:
    """Both recipes' saturated throughput, next to the fdatasync and loopback limits of
    this machine measured just before, and the ratio to the tighter of the two."""
    data_folder = str(lab.run_dir)
    limits = {"fdatasync": fdatasync_rate(data_folder), "loopback": loopback_round_trip()}
    limit = min(limits["fdatasync"]["per_second"], limits["loopback"]["per_second"])
    rows = []
    for recipe in ("zookeeper", "etcd"):
        row = saturated_throughput(lab, recipe, contenders, workers, seconds)
        row["ratio_to_limit"] = round(row["per_second"] / limit, 4)
        rows.append(row)
    return {"limits": limits, "limit_per_second": limit, "data_folder": data_folder, "recipes": rows}


def ensemble_latency(sizes: tuple[int, ...], iterations: int, run_id: str) -> list[dict[str, Any]]:
    """For each size, a lab of that many ZooKeeper and etcd nodes (no Redis), the
    uncontended lock op of both recipes, then the lab is stopped."""
    rows = []
    for size in sizes:
        started = time.monotonic()
        lab = up(zookeeper=size, etcd=size, redis=False, quiet=True, keep_previous=True)  # beside the bench's lab
        try:
            ready_s = round(time.monotonic() - started, 1)
            measured = uncontended(lab, iterations, f"{run_id}-{size}")
        finally:
            lab.down()
        rows.append({"nodes": size, "ready_s": ready_s,
                     **{f"{label} p50_ms": numbers["p50_ms"] for label, numbers in measured.items()}})
    return rows
