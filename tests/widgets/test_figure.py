"""The lock panel's picture (labkit/widgets/figure.py) from hand-made histories: the window
keeps the last seconds but never cuts the current holder's bar; an empty history draws three
"nothing yet" graphs without raising; a history with hand-offs and writes draws one bar per
hand-off (the latest MAX_HANDOFFS_SHOWN) and the store's writes; the PNG is a PNG. The live
panel on real servers: tests/widgets/test_widgets.py. Pure logic: no server."""
from __future__ import annotations

import pytest
from matplotlib.patches import Rectangle

from labkit.record.events import Event
from labkit.record.history import History
from labkit.widgets.figure import MAX_HANDOFFS_SHOWN, draw, render_png, windowed

pytestmark = pytest.mark.no_servers

T0 = 10_000.0


def history(*rows) -> History:
    return History(Event(T0 + at, client, kind, detail) for at, client, kind, detail in rows)


def handoffs(count: int) -> History:
    """One holder after another, each release waking the one client queued behind it."""
    rows = []
    for n in range(count + 1):
        at = 2.0 * n
        rows += [(at, f"c{n}", "acquired", {"token": n + 1}), (at + 0.5, f"c{n}", "write", {"token": n + 1, "accepted": True})]
        if n < count:
            rows += [(at + 0.1, f"c{n + 1}", "watch", {"target": "/lock", "what": "parent"}),
                     (at + 1.0, f"c{n}", "released", {"token": n + 1}),
                     (at + 1.01, f"c{n + 1}", "woke", {"reason": "child", "target": "/lock"})]
    return history(*rows)


def titles(figure) -> list[str]:
    return [ax.get_title() for ax in figure.axes]


def texts(figure) -> list[str]:
    return [text.get_text() for ax in figure.axes for text in ax.texts]


def test_the_window_keeps_the_last_seconds_and_the_open_hold_whole():
    run = history((0.0, "old", "acquired", {}), (1.0, "old", "released", {}),
                  (2.0, "holder", "acquired", {}), (50.0, "waiter", "requested", {}), (100.0, "waiter", "watch", {}))
    kept = windowed(run, window=60.0, now=T0 + 100.0)
    # 40 s is the window's edge, but the holder's bar began at 2 s: kept from there
    assert [(event.time - T0, event.client) for event in kept.events()] == [(2.0, "holder"), (50.0, "waiter"),
                                                                              (100.0, "waiter")]
    closed = history((0.0, "a", "acquired", {}), (1.0, "a", "released", {}), (70.0, "b", "requested", {}))
    assert [event.time - T0 for event in windowed(closed, 60.0, now=T0 + 100.0).events()] == [70.0]


def test_an_empty_history_draws_three_graphs_that_say_nothing_yet():
    figure = draw(History())
    assert titles(figure) == ["Who waited for and held the lock", "Waiters woken by each hand-off",
                              "Writes to the fenced store"]
    assert texts(figure) == ["no events yet", "no hand-off yet", "no writes yet"]


def test_a_bar_per_hand_off_and_the_writes_of_the_run():
    run = handoffs(3)
    assert run.wakeups_per_release() == [1, 1, 1]
    figure = draw(run, window=1e9)
    timeline, wakeups, store = figure.axes
    assert not set(texts(figure)) & {"no events yet", "no hand-off yet", "no writes yet"}
    bars = [patch for patch in wakeups.patches if isinstance(patch, Rectangle)]
    assert [round(bar.get_x() + bar.get_width() / 2) for bar in bars] == [1, 2, 3]
    assert [bar.get_height() for bar in bars] == [1, 1, 1]
    assert timeline.get_title().startswith("Who waited for and held the lock (last ")
    assert store.get_title() == "Writes to the fenced store" and store.has_data()


def test_only_the_latest_hand_offs_are_shown_numbered_as_they_happened():
    run = handoffs(MAX_HANDOFFS_SHOWN + 5)
    wakeups = draw(run, window=1e9).axes[1]
    centres = [round(bar.get_x() + bar.get_width() / 2) for bar in wakeups.patches if isinstance(bar, Rectangle)]
    assert centres == list(range(6, MAX_HANDOFFS_SHOWN + 6))


def test_the_png_is_a_png():
    assert render_png(handoffs(1)).startswith(b"\x89PNG\r\n\x1a\n")
    assert render_png(History()).startswith(b"\x89PNG\r\n\x1a\n")
