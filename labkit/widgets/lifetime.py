"""How a LockPanel's threads live and die: timers that hold only a weak reference to
their panel, and an exit hook that closes every open panel when the interpreter ends
(a kernel restart or shutdown), before the client processes' and the lab's own hooks.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any, Callable, Protocol, TypeVar


class Closes(Protocol):
    """A panel, as far as its lifetime goes (labkit.widgets.panel.LockPanel is one)."""

    def close(self) -> Any: ...


Panel = TypeVar("Panel")

_LIVE_PANELS: "weakref.WeakSet[Closes]" = weakref.WeakSet()


def start_timer(panel: Panel, tick: Callable[[Panel], None], interval: float, name: str,
                stopping: threading.Event, report: Callable[[Panel, str], None]) -> threading.Thread:
    """Call ``tick(panel)`` (a method: ``LockPanel.refresh_clients``) every ``interval``
    seconds until ``stopping`` is set; a failing call is handed to ``report(panel, text)``
    and the timer goes on."""
    # the thread holds only a weak reference, so a forgotten panel can still be collected
    panel_reference = weakref.ref(panel)

    def loop() -> None:
        while not stopping.wait(interval):
            target = panel_reference()
            if target is None:
                return
            try:
                tick(target)
            except Exception as error:  # one bad refresh must not kill the live view
                report(target, f"refresh failed: {type(error).__name__}: {error}")
            del target
    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread


def register(panel: Closes) -> None:
    # registered after spawn_clients registered its own: atexit runs ours first
    atexit.unregister(close_all_panels)
    atexit.register(close_all_panels)
    _LIVE_PANELS.add(panel)


def close_all_panels() -> None:
    """Close every open panel (run at interpreter exit, e.g. a kernel restart)."""
    for panel in list(_LIVE_PANELS):
        panel.close()


def forget_panel(panel: Closes) -> None:
    _LIVE_PANELS.discard(panel)
