"""What to alert on: a few rules over ``HealthSignals``, each saying in plain words what
is wrong and what to look at.

The rules, and why each one matters for a lock:

- **no leader**: a member without a leader (or a server that does not answer) cannot
  grant, renew or release anything; every lock operation waits.
- **leader changes**: each election pauses writes; several in a row point at an
  overloaded member or a flaky network.
- **queue backing up**: clients wait and no hand-off happens for half the session timeout
  / lease TTL (``stall_fraction_of_timeout``; ``stall_seconds`` if set or no timeout is
  known): the holder is stuck, frozen, or dead and its session has not expired yet.
- **session expiries** / **lease losses** per minute: a holder was silent longer than its
  timeout and lost the lock, possibly in the middle of its work.
- **keep-alive failures**: an etcd lease ran out because no keep-alive reached the server
  (seen by the client, or counted by the server itself).
- **long holds**: the p99 hold time in some window is above a fraction of the session
  timeout / lease TTL: a pause of that size would lose the lock mid-work.

``alerts(signals)`` returns the alerts that fire (an empty list when healthy).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.health.signals import LEASE_LOST, SESSION_EXPIRED, HealthSignals
from labkit.stats import percentile

MINUTE = 60.0


@dataclass(frozen=True)
class Thresholds:
    stall_fraction_of_timeout: float = 0.5  # waiters queued with no hand-off for this part of the timeout
    stall_seconds: float | None = None      # ... or for this long (also when no timeout is known: 1 s)
    expiries_per_minute: float = 1.0       # at or above: alert
    lease_losses_per_minute: float = 1.0
    keepalive_failures: int = 1
    leader_changes: int = 1
    hold_fraction_of_timeout: float = 0.5  # p99 hold time above this fraction of the timeout
    hold_window_seconds: float = 10.0      # p99 over windows this long


@dataclass(frozen=True)
class Alert:
    rule: str
    source: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.source}: {self.message}"


def longest_stall(signals: HealthSignals, source: str) -> tuple[float, float, int]:
    """(seconds, since, waiting): the longest time clients were queued while no one
    acquired, when it began (epoch s) and the deepest queue during it."""
    acquired = sorted(signals.acquisitions.get(source, []))
    best, best_since, best_depth = 0.0, signals.start, 0
    run_start = stall_since = None
    deepest = 0
    for at, waiting in signals.queue.get(source, []):
        if waiting < 1:
            run_start = None
            continue
        run_start = at if run_start is None else run_start
        last_handoff = max((t for t in acquired if t <= at), default=run_start)
        since = max(run_start, last_handoff)
        if since != stall_since:  # a hand-off (or an empty queue) ended the previous stall
            stall_since, deepest = since, 0
        deepest = max(deepest, int(waiting))
        if at - since > best:
            best, best_since, best_depth = at - since, since, deepest
    return best, best_since, best_depth


def stall_limit(signals: HealthSignals, source: str, limits: Thresholds) -> float:
    """Seconds of waiting without a hand-off that raise "queue backing up" for ``source``."""
    if limits.stall_seconds is not None:
        return limits.stall_seconds
    timeout = signals.timeouts.get(source)
    return limits.stall_fraction_of_timeout * timeout if timeout else 1.0


def _most_in_a_minute(times: list[float]) -> int:
    times = sorted(times)
    return max((sum(1 for other in times[index:] if other < at + MINUTE) for index, at in enumerate(times)), default=0)


def _leadership(signals: HealthSignals, source: str, limits: Thresholds) -> list[Alert]:
    found = []
    leaderless = [at for at, value in signals.server.get(source, {}).get("has_leader", []) if value < 1]
    unreachable = signals.unreachable.get(source, [])
    if leaderless or unreachable:
        first = min(leaderless + [at for at, _ in unreachable]) - signals.start
        found.append(Alert("no leader", source, f"{len(leaderless) + len(unreachable)} sample(s) from {first:.1f} s "
                           "found a server with no leader or not answering: no lock can be taken, renewed or "
                           "released until a majority elects one. Check which members run and can reach each other."))
    changes = signals.increase(source, "leader_changes")
    if changes >= limits.leader_changes:
        found.append(Alert("leader changes", source, f"the leader changed {changes:.0f} time(s) in this window; every "
                           "election pauses writes and lock hand-offs. Look for an overloaded or cut-off member."))
    return found


def _losses(signals: HealthSignals, source: str, limits: Thresholds) -> list[Alert]:
    found = []
    for rule, lost, limit, advice in (
            ("session expiries", SESSION_EXPIRED, limits.expiries_per_minute,
             "a holder was silent (paused, cut off, overloaded) longer than its session timeout, so "
             "ZooKeeper deleted its lock node and gave the lock to the next waiter"),
            ("lease losses", LEASE_LOST, limits.lease_losses_per_minute,
             "a holder's lease ended (expired or revoked), so etcd deleted its lock key and gave the "
             "lock to the next waiter")):
        count = _most_in_a_minute([loss.time for loss in signals.losses_of(lost, source)])
        if count and count >= limit:
            found.append(Alert(rule, source, f"{count} {lost} within a minute (alert at {limit:g}/min): {advice}. "
                               "Check pauses and the network, and that holders fence their writes."))
    by_clients = sum(loss.keepalive_failure for loss in signals.losses_of(LEASE_LOST, source))
    by_server = signals.increase(source, "leases_expired")
    if max(by_clients, by_server) >= limits.keepalive_failures:
        found.append(Alert("keep-alive failures", source, f"{by_clients} client(s) saw their lease run out unrenewed; "
                           f"the server counted {by_server:.0f} expired lease(s). A holder whose keep-alive stops "
                           "loses its lock after the TTL: find out why it could not renew (pause, network, load)."))
    return found


def _long_holds(signals: HealthSignals, source: str, limits: Thresholds) -> list[Alert]:
    timeout = signals.timeouts.get(source)
    holds = signals.holds.get(source, [])
    if not timeout or not holds:
        return []
    limit = limits.hold_fraction_of_timeout * timeout
    window = limits.hold_window_seconds
    worst = None
    for index in range(int((signals.end - signals.start) // window) + 1):
        begin = signals.start + index * window
        inside = [seconds for started, seconds in holds if begin <= started < begin + window]
        if inside and (p99 := percentile(inside, 0.99)) > limit and (worst is None or p99 > worst[0]):
            worst = (p99, begin)
    if worst is None:
        return []
    return [Alert("long holds", source, f"p99 hold time {1000 * worst[0]:,.0f} ms in the window from "
                  f"{worst[1] - signals.start:.0f} s is above {100 * limits.hold_fraction_of_timeout:.0f}% of the "
                  f"{timeout:g} s timeout ({1000 * limit:,.0f} ms): a pause that long loses the lock mid-work. "
                  "Hold the lock for less time, or fence the writes.")]


def alerts(signals: HealthSignals, thresholds: Thresholds | None = None) -> list[Alert]:
    """Every rule over every source of ``signals``; the alerts that fire, in rule order."""
    limits = thresholds or Thresholds()
    found: list[Alert] = []
    for source in sorted(set(signals.sources) | set(signals.unreachable) | {loss.source for loss in signals.losses}):
        found += _leadership(signals, source, limits)
        seconds, since, depth = longest_stall(signals, source)
        if seconds >= (limit := stall_limit(signals, source, limits)):
            found.append(Alert("queue backing up", source, f"up to {depth} client(s) waited {seconds:.1f} s from "
                               f"{since - signals.start:.1f} s with no hand-off (alert at {limit:.2g} s): the holder "
                               "is stuck, paused or dead and its session or lease has not ended yet."))
        found += _losses(signals, source, limits)
        found += _long_holds(signals, source, limits)
    return found
