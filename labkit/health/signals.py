"""Lock-health signals: what the events and the samples of a run say, over a time window.

Two kinds of evidence meet here. The clients' events (a ``History`` per lock system)
give hold durations, hand-offs, and losses: a ZooKeeper session that expired under a
holder, an etcd lease that was lost, and whether it was lost because no keep-alive
reached the server. The sampler's ``Sample``s give the wait-queue depth and the servers'
own numbers. ``collect_signals`` cuts both to one window, so a healthy stretch and a
faulty one can be compared and alerted on (``labkit.health.alerts``).

What can go wrong: a client killed with SIGKILL never says "released" or "lost"; its
hold stays open (counted in ``open_holds``, not in the durations) and only the server
numbers (fewer ephemeral nodes, a shorter queue) show that its session ended.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from labkit.record.history import FAULT_CLIENT, History

SESSION_EXPIRED, LEASE_LOST = "session expired", "lease lost"
Series = list[tuple[float, float]]  # (time, value)


@dataclass(frozen=True)
class Loss:
    """A client lost its lock without releasing it. ``keepalive_failure``: etcd says the
    lease ran out because no keep-alive reached the server in time."""

    time: float
    source: str
    client: str
    lost: str  # what ended: SESSION_EXPIRED or LEASE_LOST
    keepalive_failure: bool
    reason: str


@dataclass(frozen=True)
class Fault:
    time: float
    source: str
    what: str
    target: str


@dataclass
class HealthSignals:
    """Everything a dashboard draws and an alert rule reads, for the window start..end
    (epoch seconds). ``timeouts[source]``: the session timeout / lease TTL in seconds."""

    start: float
    end: float
    timeouts: dict[str, float] = field(default_factory=dict)
    holds: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (start, seconds)
    open_holds: dict[str, int] = field(default_factory=dict)
    acquisitions: dict[str, list[float]] = field(default_factory=dict)
    queue: dict[str, Series] = field(default_factory=dict)                      # waiting clients
    server: dict[str, dict[str, Series]] = field(default_factory=dict)
    unreachable: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    losses: list[Loss] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)

    @property
    def sources(self) -> list[str]:
        return sorted(set(self.holds) | set(self.queue) | set(self.server))

    def hold_seconds(self, source: str) -> list[float]:
        return [seconds for _, seconds in self.holds.get(source, [])]

    def losses_of(self, lost: str | None = None, source: str | None = None) -> list[Loss]:
        return [loss for loss in self.losses
                if (lost is None or loss.lost == lost) and (source is None or loss.source == source)]

    def max_waiting(self, source: str, start: float | None = None, end: float | None = None) -> int:
        """The deepest queue sampled between ``start`` and ``end`` (0 if none sampled)."""
        return int(max((waiting for at, waiting in self.queue.get(source, [])
                        if (start is None or at >= start) and (end is None or at <= end)), default=0))

    def increase(self, source: str, number: str) -> float:
        """How much a server counter grew in the window: the sum of its rises, so that a
        member that died and took its count with it does not count as negative."""
        values = [value for _, value in self.server.get(source, {}).get(number, [])]
        return sum(max(later - earlier, 0.0) for earlier, later in zip(values, values[1:]))


def classify_loss(source: str, event: Any) -> Loss:
    """A "lost" event → Loss. etcd recipes name a key or a lease; ZooKeeper's a session."""
    reason = str(event.detail.get("reason") or "")
    is_lease = "key" in event.detail or "lease" in event.detail or "lease" in reason.lower()
    return Loss(event.time, source, event.client, LEASE_LOST if is_lease else SESSION_EXPIRED,
                is_lease and "keep-alive" in reason, reason)


def collect_signals(histories: Mapping[str, History], samples: Iterable[Any],
                    timeouts: Mapping[str, float] | None = None,
                    start: float | None = None, end: float | None = None) -> HealthSignals:
    """Signals of the window ``start``..``end`` (epoch seconds; default: from the first
    event or sample to now). ``histories``: {source name: History of its clients}, with
    the same source names as the samples' (e.g. "ZooKeeper", "etcd")."""
    samples = sorted(samples, key=lambda sample: sample.time)
    first = [events[0].time for events in (h.events() for h in histories.values()) if events]
    start = start if start is not None else min(first + [s.time for s in samples[:1]], default=time.time())
    end = end if end is not None else time.time()
    inside = lambda at: start <= at <= end  # noqa: E731  (one test, used for every kind)
    signals = HealthSignals(start, end, dict(timeouts or {}))
    for source, history in histories.items():
        holds = [hold for hold in history.holds() if inside(hold.start)]
        signals.holds[source] = [(hold.start, hold.end - hold.start) for hold in holds if hold.end is not None]
        signals.open_holds[source] = sum(hold.end is None for hold in holds)
        signals.acquisitions[source] = [e.time for e in history.events(kind="acquired") if inside(e.time)]
        signals.losses += [classify_loss(source, e) for e in history.events(kind="lost") if inside(e.time)]
        signals.faults += [Fault(e.time, source, str(e.detail.get("what")), str(e.detail.get("target")))
                           for e in history.events(client=FAULT_CLIENT, kind="fault") if inside(e.time)]
    for sample in samples:
        if not inside(sample.time):
            continue
        if sample.error is not None:
            signals.unreachable.setdefault(sample.source, []).append((sample.time, sample.error))
            continue
        signals.queue.setdefault(sample.source, []).append((sample.time, sample.waiting))
        for number, value in sample.numbers.items():
            signals.server.setdefault(sample.source, {}).setdefault(number, []).append((sample.time, value))
    signals.losses.sort(key=lambda loss: loss.time)
    signals.faults.sort(key=lambda fault: fault.time)
    return signals
