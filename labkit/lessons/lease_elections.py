"""Notebook 09, the Kubernetes-style lease election (C31): it times the lease on each
candidate's own clock from when it saw the record change, as client-go does, so a clock
*offset* is harmless, a clock *rate* error beyond leaseDuration / renewDeadline is not, and
a killed leader is replaced within leaseDuration + 2 x 2.2 x retryPeriod.

* ``offset_takeovers``: a leader renews; a follower whose wall clock reads ``offset``
  seconds ahead campaigns beside it (``runs`` pairs at once, each on a key of its own).
  Under client-go's rule (``judge="observed"``) it never takes over; under the rule client-go
  does not use (``judge="renew-time"``) it deposes the leader at its first try.
* ``rate_takeovers``: a follower *client process* runs under labkit's clock shim with its
  monotonic clock ``rate`` times as fast (``spawn_clients(..., clocks=True)``); a leader
  in this process is cut off from etcd (a ``TcpLink``) right after a renewal. Is the
  follower leading before the leader stops believing (two leaders)?
* ``lease_failovers``: two client processes; the leader is SIGKILLed right after a renewal
  and the follower's takeover is timed, against ``worst_case_failover()`` plus a margin for
  the round trips and late wake-ups the follower itself measured.
* ``leaders_plot``: who believed it led, over time, in rate runs.

Times are wall-clock seconds of this machine (every process here reads the one clock: the
shim changes only the follower's monotonic rate, not its wall clock).

What can fail: ``TimeoutError`` when an expected leader or event does not come in time,
``labkit.clients.ClientError`` when a client process fails, ``ClockUnavailable`` without a
C compiler for the shim, python-etcd3's connection errors.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labkit.clients import spawn_clients
from labkit.faults.relay import TcpLink
from labkit.locks.errors import LockTimeout
from labkit.locks.lease_election import LeaseDurations, LeaseElection
from labkit.locks.registry import lease_durations_for
from labkit.record.plots import new_axes
from labkit.progress import shows_progress, step_of_innermost, waiting_for
from labkit.record.history import History
from labkit.servers.services.etcd import etcd_client
from labkit.timing import wait_until
from labkit.vocabulary import GUIDE_COLOUR, MARK_COLOUR, STATE_COLOURS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from labkit.servers.lab import Lab


def _wall(monotonic: float) -> float:
    """A time.monotonic() reading as wall-clock seconds."""
    return time.time() - (time.monotonic() - monotonic)


def _next_renewal(read, timeout: float = 10.0) -> float:
    """Poll ``read()`` (the record's mod revision) until it changes; return the wall-clock
    time at which the last poll that still saw the old revision was sent: the change was
    written after that."""
    first = read()
    last_old = [time.time()]

    def changed() -> bool:
        sent = time.time()
        if read() != first:
            return True
        last_old[0] = sent
        return False
    wait_until(changed, "the leader to renew its lease", timeout=timeout, poll=0.002)
    return last_old[0]


# ---- an offset between the clocks ------------------------------------------------------------
@dataclass(frozen=True)
class OffsetRun:
    """One leader and one follower whose wall clock reads ``offset`` s ahead, on a key of their
    own. ``took_over``: the follower led within the watch; ``leader_believed``: the leader still
    believed it led when the follower took over (its ``is_leader`` when the follower was told, or
    it stepped down only on finding the record taken: on a loaded machine the follower's event
    may run after the leader noticed); ``leader_leads_at_end``: the leader still led after it."""

    offset: float
    judge: str
    took_over: bool
    leader_believed: bool
    leader_leads_at_end: bool

    @property
    def wrong_takeover(self) -> bool:
        """A renewing leader deposed: the follower led while the leader believed it led."""
        return self.took_over and self.leader_believed


def _offset_run(lab: Lab, durations: LeaseDurations, offset: float, judge: str | None, watch: float) -> OffsetRun:
    key = f"elections/offset-{time.time_ns()}"
    clients = [lab.etcd.client(), lab.etcd.client()]
    believed: list[bool] = []
    deposed: list[str] = []                # the leader's step-downs because the record named another

    def on_follower_event(kind: str, **_: Any) -> None:
        if kind == "acquired":
            believed.append(leader.is_leader)

    def on_leader_event(kind: str, reason: str = "", **_: Any) -> None:
        if kind == "lost" and "another candidate took over" in reason:
            deposed.append(reason)
    rule = {} if judge is None else {"judge": judge}   # None: the library's default
    leader = LeaseElection(clients[0], key, "leader", durations, on_event=on_leader_event, **rule)
    follower = LeaseElection(clients[1], key, "follower", durations, clock=lambda: time.time() + offset,
                             on_event=on_follower_event, **rule)
    try:
        leader.acquire(timeout=15)
        _next_renewal(lambda: clients[0].get(key)[1].mod_revision)
        try:
            follower.acquire(timeout=watch)
        except LockTimeout:
            pass
        leads_at_end = leader.is_leader
    finally:
        for candidate in (follower, leader):
            candidate.crash()
        clients[0].delete(key)
        for client in clients:
            client.close()
    return OffsetRun(offset, follower.judge, bool(believed), bool(believed) and (believed[0] or bool(deposed)),
                     leads_at_end)


@shows_progress("Lease elections with an offset clock")
def offset_takeovers(lab: Lab, durations: LeaseDurations, offset: float = 5.0, judge: str | None = None,
                     runs: int = 10, watch: float | None = None) -> list[OffsetRun]:
    """``runs`` leader/follower pairs at once, each on its own key: the leader renews on this
    machine's wall clock; right after one of its renewals the follower, whose wall clock
    reads ``offset`` seconds ahead, campaigns for ``watch`` seconds (by default the worst-case
    failover plus one lease duration: longer than any takeover could take). ``judge``: both
    candidates' rule, None for LeaseElection's default (client-go's, "observed")."""
    watch = durations.worst_case_failover() + durations.lease_duration if watch is None else watch
    with ThreadPoolExecutor(runs) as pool:
        futures = [pool.submit(_offset_run, lab, durations, offset, judge, watch) for _ in range(runs)]
        return [future.result() for future in futures]


# ---- a clock that runs fast ------------------------------------------------------------------
@dataclass(frozen=True)
class RateRun:
    """A follower whose monotonic clock runs ``rate`` times as fast, and a leader cut off from
    etcd at ``cut_at``. ``leader_from`` / ``leader_until``: when the leader began and stopped
    believing it led (``renew_deadline`` after it sent its last successful renewal);
    ``judged_at``: when the follower judged the lease run out; ``acquired_at``: its "acquired"
    event, after its write won. Wall-clock seconds."""

    rate: float
    leader_from: float
    cut_at: float
    leader_until: float
    judged_at: float
    acquired_at: float

    @property
    def two_leaders(self) -> bool:
        """The follower led (its write had won) while the old leader still believed."""
        return self.acquired_at < self.leader_until

    @property
    def overlap(self) -> float:
        """Seconds both believed they led (negative: how long after the leader stopped
        believing the follower even judged the lease expired)."""
        return self.leader_until - self.acquired_at if self.two_leaders else self.leader_until - self.judged_at


@shows_progress("Lease elections with clocks at different rates")
def rate_takeovers(lab: Lab, rates: tuple[float, ...] = (1.25, 4.0), runs: int = 10,
                   lease_duration: float = 1.5) -> dict[float, list[RateRun]]:
    """One follower client process under the clock shim (the ``lease-election`` recipe,
    client-go's proportions scaled to ``lease_duration``). For each rate, ``runs`` times: a
    leader in this process (on the machine's clock) takes the lease through a TcpLink of its
    own, the follower campaigns, the link is cut right after a renewal, the follower takes
    over and releases. The follower's clock runs at ``rate`` for all of it."""
    durations = lease_durations_for(lease_duration)
    name = f"elections/rate-{time.time_ns()}"
    history = History()
    node = lab.etcd.first_running()
    reader = lab.etcd.client()
    outcome: dict[float, list[RateRun]] = {}
    try:
        with spawn_clients(lab, "lease-election", n=1, name=name, history=history, ttl=lease_duration,
                           clocks=True) as clients:
            follower = clients[0]
            for rate in rates:
                follower.clock.monotonic_rate(rate, history=history)
                outcome[rate] = []
                for number in range(runs):
                    step_of_innermost(f"follower's clock {rate:g}x fast, run {number + 1} of {runs}")
                    outcome[rate].append(_rate_run(lab, node, reader, follower, history, durations, name, rate))
    finally:
        reader.delete(name)
        reader.close()
    return outcome


def _rate_run(lab, node, reader, follower, history, durations, name, rate) -> RateRun:
    with TcpLink(node.endpoint) as link:
        host, port = link.address.rsplit(":", 1)
        client = etcd_client(host, int(port), **lab.etcd.auth)
        leader = LeaseElection(client, name, "leader", durations)
        try:
            leader.acquire(timeout=15)
            leader_from = time.time()
            before = len(history.events(client=follower.name, kind="acquired"))
            asked = len(history.events(client=follower.name, kind="requested"))
            pending = follower.send("acquire", timeout=None)
            history.wait_for("requested", client=follower.name, count=asked + 1, timeout=15)
            revision = lambda: reader.get(name)[1].mod_revision   # noqa: E731
            _next_renewal(revision)                  # the follower has been trying since before it
            _next_renewal(revision)
            link.cut()
            cut_at = time.time()
            follower.wait_reply(pending, timeout=durations.worst_case_failover() * 3 + 15)
            acquired = history.events(client=follower.name, kind="acquired")[before]
            leader_until = _wall(leader.leading_until())
            follower.release()
        finally:
            leader.crash()
            client.close()
    return RateRun(rate, leader_from, cut_at, leader_until, acquired.detail["judged_at"], acquired.time)


def leaders_plot(runs: list[RateRun], ax: Axes | None = None) -> Axes:
    """One row per run, from the cut: when the cut-off leader believed it led (grey), when
    the follower led (blue), and red where both did."""
    ax = new_axes(ax, height=0.8 + 0.45 * len(runs))
    end = max(max(run.acquired_at, run.leader_until) - run.cut_at for run in runs) + 0.4
    labels = {"old leader believes": False, "follower leads": False, "two leaders": False}

    def label(text: str) -> str | None:
        first, labels[text] = not labels[text], True
        return text if first else None
    for row, run in enumerate(runs):
        origin = run.cut_at
        ax.barh(row + 0.17, run.leader_until - run.leader_from, left=run.leader_from - origin, height=0.3,
                color=GUIDE_COLOUR, label=label("old leader believes"))
        ax.barh(row - 0.17, end - (run.acquired_at - origin), left=run.acquired_at - origin, height=0.3,
                color=STATE_COLOURS["holding"], label=label("follower leads"))
        if run.two_leaders:
            ax.barh(row, run.leader_until - run.acquired_at, left=run.acquired_at - origin, height=0.8,
                    color=STATE_COLOURS["lost"], alpha=0.5, label=label("two leaders"))
    ax.axvline(0, color=MARK_COLOUR, linewidth=1, linestyle="--")
    ax.set_yticks(range(len(runs)), [f"follower {run.rate:g}x fast" for run in runs])
    ax.set_xlim(-0.6, end)
    ax.set_xlabel("seconds after the leader was cut off from etcd (dashed line)")
    ax.set_title("Who believed it led, when the follower's monotonic clock runs fast")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return ax


# ---- the failover bound ----------------------------------------------------------------------
@dataclass(frozen=True)
class LeaseFailover:
    """A leader SIGKILLed ``since_renewal`` s after its last renewal could have been
    written; ``seconds`` from the kill until the follower's "acquired". ``margin``: 5 x the
    follower's slowest try plus 2 x its latest wake-up among its recent tries, the round trips
    and scheduling the bound ``worst_case`` (leaseDuration + 2 x 2.2 x retryPeriod) leaves out."""

    seconds: float
    since_renewal: float
    worst_case: float
    margin: float
    lease_duration: float

    @property
    def bound(self) -> float:
        return self.worst_case + self.margin

    @property
    def after_renewal(self) -> float:
        """Seconds from the leader's last renewal (at the earliest) until the takeover."""
        return self.seconds + self.since_renewal


@shows_progress("Lease election failovers")
def lease_failovers(lab: Lab, runs: int = 3, lease_duration: float = 1.5) -> list[LeaseFailover]:
    """``runs`` + 1 ``lease-election`` client processes, client-go's proportions scaled to
    ``lease_duration``, started at once. Run k: client k leads, client k + 1 campaigns (the
    others wait, not campaigning); right after a renewal client k is SIGKILLed and the time
    until client k + 1 leads is measured; it is the leader of the next run."""
    durations = lease_durations_for(lease_duration)
    name = f"elections/failover-{time.time_ns()}"
    history = History()
    reader = lab.etcd.client()
    revision = lambda: reader.get(name)[1].mod_revision   # noqa: E731
    results: list[LeaseFailover] = []
    try:
        with spawn_clients(lab, "lease-election", n=runs + 1, name=name, history=history,
                           ttl=lease_duration) as clients:
            clients[0].acquire(timeout=15)
            for leader, follower in zip(clients.clients, clients.clients[1:]):
                step_of_innermost(f"{leader.name} killed, {follower.name} to take over")
                pending = follower.send("acquire", timeout=None)
                history.wait_for("requested", client=follower.name, timeout=15)
                _next_renewal(revision)             # the follower has been trying since before it
                last_old = _next_renewal(revision)
                killed_at = time.time()
                leader.kill()
                with waiting_for("the lease to run out", durations.worst_case_failover()):
                    follower.wait_reply(pending, timeout=durations.worst_case_failover() * 3 + 15)
                acquired = history.events(client=follower.name, kind="acquired")[0]
                margin = 5 * acquired.detail["slowest_try"] + 2 * acquired.detail["latest_wake"]
                results.append(LeaseFailover(acquired.time - killed_at, killed_at - last_old,
                                             durations.worst_case_failover(), margin, lease_duration))
    finally:
        reader.delete(name)
        reader.close()
    return results
