"""A background thread that samples the wait queue and the servers' numbers.

Every ``interval`` seconds each probe reads, from the real servers, how many contenders
are queued for a lock (ZooKeeper: the children of the lock path; etcd: the keys under
the lock prefix) and the server numbers of ``server_numbers``. Each reading is a
``Sample`` stamped with ``time.time()``, the clock the lock events use, so samples and
events line up on one time axis.

What can fail: a server that is down or has no quorum makes a read fail; the sampler
keeps going and records a Sample with ``error`` set (a dashboard shows it as "no
leader / unreachable"). ``start()`` raises what the probe's first connection raises
(kazoo's timeout, python-etcd3's connection error). ``stop()`` joins the thread and
closes the probes' own connections; it is safe to call twice.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from etcd3 import Etcd3Client, etcdrpc
from etcd3.utils import prefix_range_end
from kazoo.exceptions import NoNodeError

from labkit.health.server_numbers import combine_members, etcd_numbers, zookeeper_numbers
from labkit.locks.etcd_session import rpc
from labkit.locks.zookeeper import sorted_contenders
from labkit.servers.services.etcd import EtcdNode, etcd_client
from labkit.servers.services.zookeeper import parse_mntr
from labkit.timing import wait_for_value

if TYPE_CHECKING:
    from labkit.servers.lab import Lab


@dataclass(frozen=True)
class Sample:
    """One reading of one source. ``contenders`` counts the holder too; ``waiting`` does not."""

    time: float
    source: str
    contenders: int | None
    numbers: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def waiting(self) -> int | None:
        return None if self.contenders is None else max(self.contenders - 1, 0)


class Probe(Protocol):
    source: str

    def read(self) -> tuple[int, dict[str, float]]: ...

    def close(self) -> None: ...


class ZooKeeperProbe:
    """Children of ``path`` (through a session of its own, which sets no watch and creates
    no node, so it does not disturb what it measures) and ``mntr`` of the first running node."""

    def __init__(self, lab: Lab, path: str, source: str = "ZooKeeper"):
        self.lab, self.path, self.source = lab, path.rstrip("/"), source
        self.client = lab.zookeeper.client(timeout=10.0)

    def read(self) -> tuple[int, dict[str, float]]:
        try:
            children = self.client.get_children(self.path)
        except NoNodeError:
            children = []  # nobody asked for this lock yet
        numbers = zookeeper_numbers(parse_mntr(self.lab.zookeeper.four_letter("mntr")))
        return len(sorted_contenders(children)), numbers

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class EtcdProbe:
    """Keys under ``prefix`` (counted by the first running member that answers) and the
    /metrics of every running member, combined (``server_numbers.combine_members``)."""

    def __init__(self, lab: Lab, prefix: str, source: str = "etcd"):
        self.lab, self.source = lab, source
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"  # as EtcdMutex queues
        self._clients: dict[str, Etcd3Client] = {}

    def _client(self, node: EtcdNode) -> Etcd3Client:
        if node.name not in self._clients:
            self._clients[node.name] = etcd_client(node.host, node.port, timeout=2.0, **node.auth)
        return self._clients[node.name]

    def read(self) -> tuple[int, dict[str, float]]:
        running = self.lab.etcd.running()
        if not running:
            raise ConnectionError("no etcd member is running")
        per_member = []
        for node in running:
            try:
                per_member.append(etcd_numbers(node.metrics()))
            except OSError:
                continue  # killed a moment ago: the others still answer
        prefix = self.prefix.encode()
        request = etcdrpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix), count_only=True)
        for node in running:  # the first member that answers; one killed a moment ago does not
            client = self._client(node)
            try:
                return rpc(client, client.kvstub.Range, request, timeout=1.0).count, combine_members(per_member)
            except Exception as error:  # python-etcd3's connection errors, gRPC errors
                failure = error
        raise failure

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class HealthSampler:
    """Reads every probe every ``interval`` seconds in a daemon thread; ``samples()``
    returns what it saw so far. A context manager (``stop()`` at exit)."""

    def __init__(self, probes: list[Probe], interval: float = 0.2):
        if interval <= 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        self.probes, self.interval = list(probes), interval
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-sampler", daemon=True)

    def start(self) -> "HealthSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            for probe in self.probes:
                self._record(probe)
            if self._stopping.wait(self.interval):
                return

    def _record(self, probe: Probe) -> None:
        stamp = time.time()
        try:
            contenders, numbers = probe.read()
            sample = Sample(stamp, probe.source, contenders, numbers)
        except Exception as error:  # a down server is a reading too: "unreachable"
            sample = Sample(stamp, probe.source, None, {}, f"{type(error).__name__}: {error}")
        with self._lock:
            self._samples.append(sample)

    def samples(self, source: str | None = None) -> list[Sample]:
        with self._lock:
            return [sample for sample in self._samples if source is None or sample.source == source]

    def wait_for(self, condition, what: str, timeout: float = 10.0) -> Sample:
        """Block until a new sample satisfies ``condition(sample)``; return it. Raises
        TimeoutError naming ``what`` (and the last sample) after ``timeout`` seconds."""
        seen = [len(self.samples())]

        def first_new_match() -> Sample | None:
            if self._stopping.is_set():
                raise RuntimeError(f"the sampler is stopped: no new sample will show {what}")
            fresh = self.samples()[seen[0]:]
            seen[0] += len(fresh)
            return next((sample for sample in fresh if condition(sample)), None)

        def no_match() -> TimeoutError:
            last = self.samples()[-1:] or ["none"]
            return TimeoutError(f"no sample showed {what} within {timeout:.0f} s (last sample: {last[0]})")
        return wait_for_value(first_new_match, what, timeout, self.interval / 2, error=no_match)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(10 + 5 * self.interval)
        for probe in self.probes:
            try:
                probe.close()
            except Exception:  # closing a connection to a dead server: nothing left to free
                pass
        self.probes = []

    def __enter__(self) -> "HealthSampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
