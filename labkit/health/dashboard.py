"""The lock health dashboard: six panels drawn from ``HealthSignals``.

hold durations | wait-queue depth
lost sessions and leases | ZooKeeper's mntr numbers
etcd's /metrics numbers | leadership (both systems)

Faults recorded in the histories are drawn as dashed lines on every time panel (named on
the queue panel), so that a learner sees each fault and what it moved. Nothing here picks
a backend or calls ``show()``. What can fail: ValueError if the window holds no sample
and no event (nothing to draw).
"""
from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING, Mapping

from matplotlib.ticker import MaxNLocator

from labkit.health.alerts import Alert, Thresholds, alerts
from labkit.health.signals import LEASE_LOST, SESSION_EXPIRED, HealthSignals, collect_signals
from labkit.progress import shows_progress
from labkit.record.history import History
from labkit.stats import percentile
from labkit.vocabulary import ERROR_COLOUR, FAULT_COLOUR, GUIDE_COLOUR, SERVICE_COLOURS

if TYPE_CHECKING:
    from labkit.health.sampler import HealthSampler


class Dashboard:
    """Signals, alerts and the figure for a running workload. ``histories``: {source:
    History of that system's clients}; ``sampler``: a HealthSampler; ``timeouts``:
    {source: session timeout or lease TTL in seconds}."""

    def __init__(self, histories: Mapping[str, History], sampler: HealthSampler, timeouts: Mapping[str, float],
                 thresholds: Thresholds | None = None):
        self.histories, self.sampler = dict(histories), sampler
        self.timeouts, self.thresholds = dict(timeouts), thresholds or Thresholds()

    def signals(self, start: float | None = None, end: float | None = None) -> HealthSignals:
        return collect_signals(self.histories, self.sampler.samples(), self.timeouts, start, end)

    def alerts(self, start: float | None = None, end: float | None = None) -> list[Alert]:
        return alerts(self.signals(start, end), self.thresholds)

    @shows_progress("drawing the dashboard from the samples")
    def draw(self, start: float | None = None, end: float | None = None, title: str = "Lock health"):
        return draw_dashboard(self.signals(start, end), title, self.thresholds)


def draw_dashboard(signals: HealthSignals, title: str = "Lock health", thresholds: Thresholds | None = None):
    """The six-panel Figure for ``signals``."""
    import matplotlib.pyplot as pyplot  # here, so that importing labkit picks no backend

    if not signals.queue and not any(signals.holds.values()):
        raise ValueError("nothing to draw: the window holds no sample and no hold; start the sampler "
                         "and the workload, let them run, then draw")
    limits = thresholds or Thresholds()
    figure, axes = pyplot.subplots(3, 2, figsize=(13, 10.5), layout="constrained")
    figure.suptitle(f"{title}  ({signals.end - signals.start:.0f} s window)", fontsize=13)
    _holds(axes[0, 0], signals, limits)
    _queue(axes[0, 1], signals)
    _losses(axes[1, 0], signals)
    _server(axes[1, 1], signals, "ZooKeeper", {"ephemerals": "ephemeral nodes (zk_ephemerals_count)",
                                               "watches": "watches (zk_watch_count)",
                                               "connections": "connections (zk_num_alive_connections)"},
            "ZooKeeper's own numbers (mntr)", "count")
    _server(axes[2, 0], signals, "etcd", {"keys_total": "keys (etcd_debugging_mvcc_keys_total)",
                                          "leases_expired": "leases expired, on the server (cumulative)"},
            "etcd's own numbers (/metrics)", "count")
    _leadership(axes[2, 1], signals)
    for ax in (axes[0, 1], axes[1, 0], axes[1, 1], axes[2, 0], axes[2, 1]):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # clients, nodes, keys: whole numbers
        _mark_faults(ax, signals, named=ax is axes[0, 1])
        ax.set_xlim(0, max(signals.end - signals.start, 1e-3))
        ax.set_xlabel("time since the window began (s)")
        ax.grid(alpha=0.3)
    return figure


def _holds(ax, signals: HealthSignals, limits: Thresholds) -> None:
    every = [seconds for source in signals.holds for seconds in signals.hold_seconds(source)]
    if every:
        low, high = max(min(every) * 1000, 0.1), max(max(every) * 1000, 1.0) * 1.1
        bins = [low * (high / low) ** (step / 30) for step in range(31)]
        for source in signals.holds:
            values = [1000 * seconds for seconds in signals.hold_seconds(source)]
            if values:
                label = (f"{source}: n={len(values)}, p50 {percentile(values, 0.5):,.0f} ms, "
                         f"p99 {percentile(values, 0.99):,.0f} ms")
                ax.hist(values, bins=bins, histtype="step", linewidth=2, color=SERVICE_COLOURS.get(source), label=label)
        ax.set_xscale("log")
    for source, timeout in signals.timeouts.items():
        ax.axvline(1000 * limits.hold_fraction_of_timeout * timeout, color=SERVICE_COLOURS.get(source), linestyle=":",
                   label=f"{source}: {100 * limits.hold_fraction_of_timeout:.0f}% of its {timeout:g} s timeout")
    opened = ", ".join(f"{source} {count}" for source, count in signals.open_holds.items() if count)
    ax.set_title("Hold durations" + (f" (still open: {opened})" if opened else ""))
    ax.set_xlabel("hold duration (ms, log scale)")
    ax.set_ylabel("holds")
    ax.legend(fontsize=7)


def _queue(ax, signals: HealthSignals) -> None:
    for source, series in signals.queue.items():
        ax.step([at - signals.start for at, _ in series], [waiting for _, waiting in series], where="post",
                color=SERVICE_COLOURS.get(source), label=f"{source}: waiting clients")
    ax.set_title("Wait-queue depth (lock children / keys under the prefix, minus the holder)")
    ax.set_ylabel("clients waiting")
    ax.legend(fontsize=8, loc="upper left")


def _losses(ax, signals: HealthSignals) -> None:
    lines = {f"ZooKeeper {SESSION_EXPIRED}": signals.losses_of(SESSION_EXPIRED),
             f"etcd {LEASE_LOST}": signals.losses_of(LEASE_LOST),
             "of which keep-alive failures": [loss for loss in signals.losses if loss.keepalive_failure]}
    for label, losses in lines.items():
        times = [signals.start] + [loss.time for loss in losses] + [signals.end]
        counts = list(range(len(losses) + 1)) + [len(losses)]
        ax.step([at - signals.start for at in times], counts, where="post", label=f"{label}: {len(losses)}")
    ax.set_title("Locks lost by their holders (from the clients' 'lost' events)")
    ax.set_ylabel("count since the window began")
    ax.legend(fontsize=8, loc="upper left")


def _server(ax, signals: HealthSignals, source: str, names: Mapping[str, str], title: str, unit: str) -> None:
    numbers = signals.server.get(source, {})
    if not any(numbers.get(number) for number in names):
        ax.text(0.5, 0.5, f"no {source} samples in this window", transform=ax.transAxes, ha="center", color=GUIDE_COLOUR)
    for number, label in names.items():
        series = numbers.get(number, [])
        if not series:
            continue
        values = [value for _, value in series]
        if number.endswith("expired"):  # a counter: what the window added (rises only, see increase())
            values = _risen(values)
        ax.step([at - signals.start for at, _ in series], values, where="post", label=label)
    ax.set_title(title)
    ax.set_ylabel(unit)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left")


def _leadership(ax, signals: HealthSignals) -> None:
    for width, source in zip((5, 3, 1.5), signals.server):  # both lines sit at 1: the wide one shows below
        series = signals.server[source].get("has_leader", [])
        ax.step([at - signals.start for at, _ in series], [value for _, value in series], where="post",
                color=SERVICE_COLOURS.get(source), linewidth=width, alpha=0.8,
                label=f"{source}: every member has a leader (1 = yes)")
        changes = signals.server[source].get("leader_changes", [])
        if changes:
            ax.step([at - signals.start for at, _ in changes], _risen([value for _, value in changes]),
                    where="post", color=SERVICE_COLOURS.get(source), linestyle="--",
                    label=f"{source}: leader changes seen")
    for source, failures in signals.unreachable.items():
        ax.plot([at - signals.start for at, _ in failures], [0] * len(failures), "x", color=ERROR_COLOUR,
                label=f"{source}: no answer (a read failed)")
    ax.set_title("Leadership")
    ax.set_ylabel("0/1, or count since the window began")
    ax.legend(fontsize=8, loc="center left")


def _risen(values: list[float]) -> list[float]:
    """A counter as "added since the window began", counting rises only (a member that died
    takes its count with it; that is no negative event)."""
    return list(accumulate([0.0] + [max(later - earlier, 0.0) for earlier, later in zip(values, values[1:])]))


def _mark_faults(ax, signals: HealthSignals, named: bool) -> None:
    for fault in signals.faults:
        at = fault.time - signals.start
        ax.axvline(at, color=FAULT_COLOUR, linestyle="--", linewidth=1)
        if named:
            ax.annotate(f"{fault.source}: {fault.what} {fault.target}", (at, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(2, -2), textcoords="offset points", rotation=90, va="top", fontsize=7,
                        color=FAULT_COLOUR)
