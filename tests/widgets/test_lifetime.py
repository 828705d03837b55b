"""How a lock panel's threads live and die (labkit/widgets/lifetime.py), with stand-in panels
(plain objects: the lifetime rules know a panel only by its close()): the timer ticks until
told to stop, hands a failing tick to report and goes on, and ends by itself once its panel
is forgotten, because it holds only a weak reference; close_all_panels closes every open
panel, a forgotten one no more. The real LockPanel on real servers:
tests/widgets/test_widgets.py. Pure logic: no server."""
from __future__ import annotations

import gc
import threading

import pytest

from labkit.widgets.lifetime import close_all_panels, forget_panel, register, start_timer

from helpers import wait_until

pytestmark = pytest.mark.no_servers


class Panel:
    def __init__(self):
        self.ticks, self.reports, self.closed = 0, [], 0

    def tick(self):
        self.ticks += 1
        if self.ticks == 2:
            raise ValueError("the servers went away")

    def close(self):
        self.closed += 1


def test_the_timer_reports_a_failing_tick_and_goes_on_until_stopped():
    panel, stopping = Panel(), threading.Event()
    thread = start_timer(panel, Panel.tick, 0.01, "panel-timer-test", stopping,
                         lambda target, text: target.reports.append(text))
    assert thread.daemon and thread.name == "panel-timer-test"
    wait_until(lambda: panel.ticks >= 4, "four ticks")
    assert panel.reports == ["refresh failed: ValueError: the servers went away"], "reported once, and it went on"
    stopping.set()
    thread.join(5)
    assert not thread.is_alive()


def test_the_timer_ends_by_itself_once_its_panel_is_forgotten():
    panel, stopping = Panel(), threading.Event()
    thread = start_timer(panel, Panel.tick, 0.01, "panel-timer-forgotten", stopping, lambda target, text: None)
    wait_until(lambda: panel.ticks >= 1, "a first tick")
    del panel
    gc.collect()
    thread.join(5)
    assert not thread.is_alive(), "the timer kept a forgotten panel alive, or ran on without it"
    assert not stopping.is_set()


def test_close_all_panels_closes_the_open_ones_only():
    kept, forgotten, collected = Panel(), Panel(), Panel()
    for panel in (kept, forgotten, collected):
        register(panel)
    forget_panel(forgotten)
    del collected
    gc.collect()
    close_all_panels()
    assert (kept.closed, forgotten.closed) == (1, 0)
    forget_panel(kept)
    close_all_panels()
    assert kept.closed == 1
