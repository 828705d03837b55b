"""Graphs of real runs: who held the lock when, wakeups per release, latencies, writes,
holds and their tokens (a leader's epochs) beside the store's writes, a semaphore's holds at once.

Every function takes the data and an optional matplotlib ``ax``; without one it makes
a new figure. Each returns the Axes (``ax.figure`` is the Figure). Nothing here calls
``show()`` or picks a backend, so the functions work in notebooks and under Agg alike.
What can fail: ValueError when there is nothing to draw (an empty history or no samples).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from labkit.record.checker import holds_acting
from labkit.record.events import Event
from labkit.record.history import FAULT_CLIENT, History
from labkit.record.periods import FaultPeriod, fault_periods
from labkit.stats import percentile
from labkit.vocabulary import (ACCEPTED_COLOUR, FAULT_BAND_COLOURS, FAULT_BAND_DEFAULT, FAULT_COLOUR, GUIDE_COLOUR,
                               MARK_COLOUR, REJECTED_COLOUR, STATE_COLOURS, TEXT_COLOUR, WAIT_ENDS)

WAITING_COLOUR, HOLDING_COLOUR = STATE_COLOURS["waiting"], STATE_COLOURS["holding"]
LOST_COLOUR, PAUSE_COLOUR = STATE_COLOURS["lost"], STATE_COLOURS["paused"]
BAND_ALPHA = 0.5   # a fault band lies under the bars and must not hide them


def new_axes(ax: Axes | None, width: float = 9.0, height: float = 4.0) -> Axes:
    """``ax`` itself, or the Axes of a new figure of that size (inches)."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as pyplot  # imported here so that importing labkit picks no backend

    _, ax = pyplot.subplots(figsize=(width, height), layout="constrained")
    return ax


def _natural_order(name: str) -> list[Any]:
    """client-2 before client-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def hold_timeline(history: History, ax: Axes | None = None, title: str = "Who waited for and held the lock") -> Axes:
    """One row per client: waiting (light), holding (solid), wakeups (ticks), lost (red x);
    a paused client's row is hatched for its pause; every other fault that lasts (a
    partition, cut, delay, loss, a server's pause) is a shaded band across all rows,
    labelled with the fault; instant faults (kill, clock step, ...) are labelled lines."""
    events = history.events()
    if not events:
        raise ValueError("the history is empty: run some clients first, then plot")
    origin, end = events[0].time, events[-1].time
    clients = sorted(history.clients(), key=_natural_order)
    ax = new_axes(ax, height=max(2.5, 0.55 * len(clients) + 1.5))
    rows = {client: row for row, client in enumerate(clients)}
    faults = history.events(client=FAULT_CLIENT, kind="fault")
    for client, row in rows.items():
        mine = history.events(client=client)
        # a killed client stops waiting there and then (its hold, if any, stays: the
        # server still counts it as held until the session or TTL runs out)
        kills = [Event(fault.time, client, "error") for fault in faults
                 if fault.detail.get("what") == "kill" and fault.detail.get("target") == client]
        waiting, started = [], None
        for event in sorted(mine + kills, key=lambda event: event.time):
            if event.kind == "requested" and started is None:
                started = event.time
            elif event.kind in WAIT_ENDS and started is not None:
                waiting.append((started - origin, event.time - started))
                started = None
        if started is not None:
            waiting.append((started - origin, end - started))
        ax.broken_barh(waiting, (row - 0.3, 0.6), facecolors=WAITING_COLOUR)
        holding = [(hold.start - origin, (hold.end if hold.end is not None else end) - hold.start)
                   for hold in history.holds() if hold.client == client]
        ax.broken_barh(holding, (row - 0.3, 0.6), facecolors=HOLDING_COLOUR)
        woke = [event.time - origin for event in mine if event.kind == "woke"]
        ax.plot(woke, [row] * len(woke), linestyle="none", marker="|", markersize=12, color=MARK_COLOUR)
        lost = [event.time - origin for event in mine if event.kind == "lost"]
        ax.plot(lost, [row] * len(lost), linestyle="none", marker="X", markersize=11, color=LOST_COLOUR)
    periods = fault_periods(history)
    draw_fault_periods(ax, periods, origin, end, rows)
    last = max([end] + [period.end for period in periods if period.end is not None])  # a timed pause may outlast the events
    ax.set_yticks(range(len(clients)), clients)
    ax.set_ylim(len(clients) - 0.5, -0.5)  # first client on top
    ax.set_xlim(0, max(last - origin, 1e-3) * 1.02)
    ax.set_xlabel("time since the first event (s)")
    ax.set_ylabel("client")
    ax.set_title(title)
    ax.legend(handles=[Patch(color=WAITING_COLOUR, label="waiting"), Patch(color=HOLDING_COLOUR, label="holding"),
                       Line2D([], [], linestyle="none", marker="|", color=MARK_COLOUR, label="woke"),
                       Line2D([], [], linestyle="none", marker="X", color=LOST_COLOUR, label="lost"),
                       Patch(facecolor="none", edgecolor=PAUSE_COLOUR, hatch="///", label="paused"),
                       Patch(color=FAULT_BAND_COLOURS["partition"], alpha=BAND_ALPHA, label="fault (while on)"),
                       Line2D([], [], color=FAULT_COLOUR, linestyle="--", label="fault (instant)")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return ax


def draw_fault_periods(ax: Axes, periods: list[FaultPeriod], origin: float, end: float,
                       rows: Mapping[str, int] | None = None) -> None:
    """Draw each fault period on ``ax`` (x = seconds since ``origin``; a period still on
    runs to ``end``): the pause of a client that has a row in ``rows`` hatches that row,
    any other lasting fault is a band across the Axes, an instant a dashed line. Each
    band and line is labelled with the fault and its target at the top of the Axes, and
    carries ``gid="fault: <what> <target>"`` (for tests and SVG readers)."""
    rows = rows or {}
    for period in periods:
        at = period.start - origin
        label = f"{period.what} {period.target}".strip()
        if period.what == "pause" and period.target in rows:
            seconds = (period.end if period.end is not None else end) - period.start
            ax.broken_barh([(at, seconds)], (rows[period.target] - 0.42, 0.84),
                           facecolors="none", edgecolors=PAUSE_COLOUR, hatch="///", gid=f"fault: {label}")
            continue
        if period.instant:
            ax.axvline(at, color=FAULT_COLOUR, linestyle="--", linewidth=1, gid=f"fault: {label}")
        else:
            until = (period.end if period.end is not None else end) - origin
            colour = FAULT_BAND_COLOURS.get(period.what, FAULT_BAND_DEFAULT)
            ax.axvspan(at, until, color=colour, alpha=BAND_ALPHA, linewidth=0, zorder=0,
                       gid=f"fault: {label}")
        ax.annotate(label, (at, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                    textcoords="offset points", rotation=90, va="top", fontsize=8, color=FAULT_COLOUR)


def wakeups_per_release_plot(results: Mapping[str, Mapping[int, float]], ax: Axes | None = None,
                             title: str = "Waiters woken by each release") -> Axes:
    """``results[label][N]`` = mean wakeups per release with N waiters; one line per label."""
    if not any(results.values()):
        raise ValueError("no results to plot: expected {label: {N: mean wakeups per release}}")
    ax = new_axes(ax, width=7.0)
    for label, points in results.items():
        waiters = sorted(points)
        ax.plot(waiters, [points[n] for n in waiters], marker="o", label=label)
    ax.axhline(1, color=GUIDE_COLOUR, linestyle=":", linewidth=1, label="one wakeup (ideal)")
    ax.set_xlabel("waiters N (processes queued for the lock)")
    ax.set_ylabel("wakeups per release (mean)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def latency_plot(samples: Mapping[str, Iterable[float]], ax: Axes | None = None,
                 title: str = "Acquire + release latency") -> Axes:
    """Cumulative distribution of each label's samples (given in seconds, drawn in ms).
    The x axis turns logarithmic when the samples span more than a factor of 20."""
    in_ms = {label: sorted(1000.0 * value for value in values) for label, values in samples.items()}
    in_ms = {label: values for label, values in in_ms.items() if values}
    if not in_ms:
        raise ValueError("no latency samples to plot: expected {label: [seconds, ...]}")
    ax = new_axes(ax, width=7.0)
    for label, values in in_ms.items():
        count = len(values)
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        fractions = [(index + 1) / count for index in range(count)]
        ax.step(values, fractions, where="post", label=f"{label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms (n={count})")
    smallest = min(values[0] for values in in_ms.values())
    largest = max(values[-1] for values in in_ms.values())
    if smallest > 0 and largest / smallest > 20:
        ax.set_xscale("log")
        # 0.2, 0.5, 1, 2, 5 ms read better than 2×10⁻¹ crowded by minor labels
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of operations at most this fast")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    return ax


def store_writes_plot(writes: Iterable[Any], ax: Axes | None = None,
                      title: str = "The store's own record of writes") -> Axes:
    """Writes over the store's time, one row per client, each labelled with its token:
    accepted (green dot), accepted although its token was lower than one already
    accepted (orange diamond: the damage an unfenced store takes), rejected (red x).
    ``writes`` = ``FencedStore.writes()`` (in the store's order) or dicts like them."""
    rows = [item if isinstance(item, dict) else vars(item) for item in writes]
    if not rows:
        raise ValueError("the store has no writes to plot")
    origin = rows[0]["time"]
    clients = list(dict.fromkeys(row["client"] for row in rows))
    ax = new_axes(ax, height=max(2.5, 0.5 * len(clients) + 1.5))
    categories = {"accepted": [], "accepted with a stale token": [], "rejected by fencing": []}
    highest = None
    for row in rows:  # in the store's order, so "stale" means: lower than a token it already took
        token = row["token"]
        if not row["accepted"]:
            categories["rejected by fencing"].append(row)
        elif token is not None and highest is not None and token < highest:
            categories["accepted with a stale token"].append(row)
        else:
            categories["accepted"].append(row)
        if row["accepted"] and token is not None:
            highest = token if highest is None else max(highest, token)
    styles = {"accepted": (ACCEPTED_COLOUR, "o"), "accepted with a stale token": (PAUSE_COLOUR, "D"),
              "rejected by fencing": (LOST_COLOUR, "x")}
    for label, chosen in categories.items():
        color, marker = styles[label]
        ax.plot([row["time"] - origin for row in chosen], [clients.index(row["client"]) for row in chosen],
                linestyle="none", marker=marker, markersize=9, color=color, label=f"{label}: {len(chosen)}")
    if len(rows) <= 60:
        for row in rows:
            ax.annotate(f"{row['token']}", (row["time"] - origin, clients.index(row["client"])),
                        xytext=(0, 7), textcoords="offset points", ha="center", fontsize=7)
    ax.set_yticks(range(len(clients)), clients)
    ax.set_ylim(len(clients) - 0.5, -0.5)
    ax.set_xlabel("store time since the first write (s)")
    ax.set_ylabel("writer")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="token above each mark",
              title_fontsize=8)
    return ax


def fault_bands(ax: Axes, periods: Iterable[tuple[float, float, str]], origin: float = 0.0,
                labels: bool = True, min_width: float = 0.1) -> Axes:
    """Shade each fault period ``(start, end, label)`` (times in seconds, like the events)
    as a band across ``ax``, from ``start - origin``; an instantaneous fault (a kill) gets
    ``min_width`` seconds so that it shows. Returns ``ax``."""
    for start, end, label in periods:
        begin = start - origin
        ax.axvspan(begin, max(end - origin, begin + min_width), color=FAULT_COLOUR, alpha=0.12, linewidth=0)
        if labels:
            ax.annotate(label, (begin, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                        textcoords="offset points", rotation=90, va="top", fontsize=7, color=FAULT_COLOUR)
    return ax


def latency_over_time(points: Iterable[tuple[float, float]], ax: Axes | None = None,
                      title: str = "How long each acquire waited") -> Axes:
    """One dot per acquire: when it was asked for (s, x) and how long it waited (ms, y,
    logarithmic). Raises ValueError when there are no points."""
    points = list(points)
    if not points:
        raise ValueError("no acquires to plot: expected [(seconds since start, seconds waited), ...]")
    ax = new_axes(ax, height=2.5)
    ax.plot([at for at, _ in points], [max(1000.0 * waited, 0.01) for _, waited in points], linestyle="none",
            marker=".", markersize=4, color=HOLDING_COLOUR)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time since the first event (s)")
    ax.set_ylabel("acquire wait (ms)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="major")
    return ax


def token_timeline(history: History, writes: Iterable[Any], ax: Axes | None = None, token_name: str = "token",
                   title: str = "Holds, their tokens and the store's writes") -> Axes:
    """``hold_timeline`` with each hold labelled by its token (``token_name``: "epoch" for a
    leader's term) and the store's writes on their writer's row, on the same clock (the
    store's and the clients' stamps are this machine's wall clock): taken (green dot) or
    refused by fencing (red x), each with the token it carried. ``writes``:
    ``FencedStore.writes()`` or dicts like them. ValueError on an empty history."""
    ax = hold_timeline(history, ax=ax, title=title)
    origin = history.events()[0].time
    rows = {client: row for row, client in enumerate(sorted(history.clients(), key=_natural_order))}
    for hold in history.holds():
        if hold.token is not None and hold.client in rows:
            ax.annotate(f"{token_name} {hold.token}", (hold.start - origin, rows[hold.client] - 0.3), xytext=(2, 1),
                        textcoords="offset points", va="bottom", fontsize=8, color=TEXT_COLOUR)
    drawn = [item if isinstance(item, dict) else vars(item) for item in writes]
    for taken, colour, marker in ((True, ACCEPTED_COLOUR, "o"), (False, REJECTED_COLOUR, "x")):
        chosen = [row for row in drawn if bool(row["accepted"]) == taken and row["client"] in rows]
        # on the lower edge of the writer's bar, clear of a "lost" mark at the same moment
        ax.plot([row["time"] - origin for row in chosen], [rows[row["client"]] + 0.3 for row in chosen],
                linestyle="none", marker=marker, markersize=9, markeredgewidth=2.5, color=colour, zorder=4,
                gid="taken writes" if taken else "refused writes")
        for row in chosen:
            ax.annotate(f"{row['token']}", (row["time"] - origin, rows[row["client"]] + 0.3), xytext=(0, -6),
                        textcoords="offset points", ha="center", va="top", fontsize=7, color=colour)
    right = max([ax.get_xlim()[1]] + [1.04 * (row["time"] - origin) for row in drawn])
    ax.set_xlim(-0.02 * right, 1.02 * right)   # a write at either end shows whole
    legend = ax.get_legend()
    handles = list(legend.legend_handles) + [
        Line2D([], [], linestyle="none", marker="o", color=ACCEPTED_COLOUR, label="write taken (its token below)"),
        Line2D([], [], linestyle="none", marker="x", markeredgewidth=2.5, color=REJECTED_COLOUR,
               label="write refused by fencing")]
    ax.legend(handles=handles, labels=[text.get_text() for text in legend.get_texts()] + [
        handle.get_label() for handle in handles[-2:]], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return ax


def holds_acting_plot(writes: Iterable[Any], limit: int, history: History | None = None, axes: Any = None,
                      title: str = "A semaphore's holds, as the resource saw them") -> tuple[Axes, Axes]:
    """Two Axes on one clock, from the resource's record (``FencedStore.writes()``), which
    ``check_at_most_holders`` judges: above, one row per client, each hold from its first
    write to its last (holding blue), with ``history``'s faults (a kill a dashed line, a
    paused client's row hatched); below, the holds acting at each write, a step line with
    the limit as a dashed line and every count above it in red. ``axes``: a pair, else a
    new figure. ValueError when the record has no accepted write."""
    counts, spans = holds_acting(writes, history)
    if not counts:
        raise ValueError("the record has no accepted writes: nothing to draw")
    if axes is None:
        import matplotlib.pyplot as pyplot

        _, axes = pyplot.subplots(2, 1, figsize=(9, 4.5), sharex=True, layout="constrained",
                                  gridspec_kw={"height_ratios": [3, 2]})
    holds_ax, count_ax = axes
    origin, end = counts[0][0], counts[-1][0]
    clients = sorted({client for client, _ in spans}, key=_natural_order)
    rows = {client: row for row, client in enumerate(clients)}
    thinnest = max(end - origin, 1e-3) / 300   # a hold killed after one write still shows
    for client, row in rows.items():
        bars = [(first - origin, max(last - first, thinnest)) for (owner, _), (first, last) in spans.items()
                if owner == client]
        holds_ax.broken_barh(bars, (row - 0.3, 0.6), facecolors=HOLDING_COLOUR)
    if history is not None:
        draw_fault_periods(holds_ax, fault_periods(history), origin, end, rows)
    holds_ax.set_yticks(range(len(clients)), clients)
    holds_ax.set_ylim(len(clients) - 0.5, -0.5)
    holds_ax.set_ylabel("client")
    holds_ax.set_title(title)
    holds_ax.legend(handles=[Patch(color=HOLDING_COLOUR, label="a hold: first write to last"),
                             Line2D([], [], color=FAULT_COLOUR, linestyle="--", label="fault (instant)"),
                             Patch(facecolor="none", edgecolor=PAUSE_COLOUR, hatch="///", label="paused")],
                    loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    times = [at - origin for at, _ in counts]
    acting = [count for _, count in counts]
    count_ax.step(times, acting, where="post", color=HOLDING_COLOUR, label="holds acting at once")
    over = [(at, count) for at, count in zip(times, acting) if count > limit]
    count_ax.plot([at for at, _ in over], [count for _, count in over], linestyle="none", marker="o",
                  color=LOST_COLOUR, label=f"more than {limit}: {len(over)} writes")
    count_ax.axhline(limit, color=GUIDE_COLOUR, linestyle="--", linewidth=1, label=f"the limit, N = {limit}")
    count_ax.set_ylim(0, max(max(acting), limit) + 0.7)
    count_ax.set_yticks(range(max(max(acting), limit) + 1))
    count_ax.set_xlim(0, max(end - origin, 1e-3) * 1.02)
    count_ax.set_xlabel("time since the record's first write (s)")
    count_ax.set_ylabel("holds acting")
    count_ax.grid(alpha=0.3, axis="y")
    count_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return holds_ax, count_ax
