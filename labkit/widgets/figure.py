"""The panel's picture: hold timeline, wakeups per hand-off, and the store's writes, drawn
with matplotlib's Agg canvas straight to PNG bytes (no pyplot, so no figure piles up in
the notebook and no GUI backend is needed; safe from a timer thread).

What can fail: nothing raises for an empty history; each part says "nothing yet" instead.
"""
from __future__ import annotations

import io
import time

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from labkit.record import plots
from labkit.record.history import History
from labkit.vocabulary import GUIDE_COLOUR
from labkit.widgets.narration import open_holds

MAX_HANDOFFS_SHOWN = 20
MAX_WRITES_SHOWN = 30  # each write carries a text label, the slowest thing to draw


def windowed(history: History, window: float, now: float | None = None) -> History:
    """The events of the last ``window`` seconds, stretched back to the start of every
    hold still open (so the current holder's bar is never cut off)."""
    now = time.time() if now is None else now
    cutoff = min([now - window] + [hold.start for hold in open_holds(history)])
    return History(event for event in history.events() if event.time >= cutoff)


def _empty(ax, title: str, message: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color=GUIDE_COLOUR)
    ax.set_xticks([])
    ax.set_yticks([])


def draw(history: History, window: float = 90.0, width: float = 11.0, height: float = 6.2) -> Figure:
    """A Figure with the three graphs of the panel."""
    # fixed margins: constrained layout would double the drawing time, and this redraws live
    figure = Figure(figsize=(width, height), dpi=80)
    grid = figure.add_gridspec(2, 2, height_ratios=(1.35, 1.0), width_ratios=(1.0, 1.4), left=0.08, right=0.76,
                               top=0.95, bottom=0.09, hspace=0.42, wspace=0.25)
    timeline = figure.add_subplot(grid[0, :])
    recent = windowed(history, window)
    if len(recent):
        plots.hold_timeline(recent, ax=timeline, title=f"Who waited for and held the lock (last {window:.0f} s)")
    else:
        _empty(timeline, "Who waited for and held the lock", "no events yet")

    wakeups_axes = figure.add_subplot(grid[1, 0])
    every = history.wakeups_per_release()   # one reading: clients keep adding events meanwhile
    counts = every[-MAX_HANDOFFS_SHOWN:]
    if counts:
        first = len(every) - len(counts) + 1
        numbers = list(range(first, first + len(counts)))
        wakeups_axes.bar(numbers, counts, color=plots.HOLDING_COLOUR)
        wakeups_axes.axhline(1, color=GUIDE_COLOUR, linestyle=":", linewidth=1, label="one wakeup (ideal)")
        wakeups_axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        wakeups_axes.set_xlabel("hand-off number")
        wakeups_axes.set_ylabel("waiters woken")
        wakeups_axes.set_title("Waiters woken by each hand-off")
        wakeups_axes.set_ylim(0, max(2, max(counts) + 1))
        wakeups_axes.legend(fontsize=8, loc="upper left")
    else:
        _empty(wakeups_axes, "Waiters woken by each hand-off", "no hand-off yet")

    store_axes = figure.add_subplot(grid[1, 1])
    writes = [{"time": event.time, "client": event.client, "token": event.detail.get("token"),
               "accepted": bool(event.detail.get("accepted"))} for event in recent.events(kind="write")][-MAX_WRITES_SHOWN:]
    if writes:
        plots.store_writes_plot(writes, ax=store_axes, title="Writes to the fenced store")
        store_axes.set_xlabel("time since the first write shown (s)")
    else:
        _empty(store_axes, "Writes to the fenced store", "no writes yet")
    return figure


def render_png(history: History, window: float = 90.0) -> bytes:
    """``draw`` rendered to PNG bytes (for ``ipywidgets.Image``)."""
    figure = draw(history, window)
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
