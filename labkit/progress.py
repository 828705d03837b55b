"""What a long cell is waiting for, while it waits: one progress display for every experiment
of the lab that runs longer than a few seconds (races, torture runs, elections, the bench).

What can go wrong, and what this module does about it:
- A cell that sits silent for 40 s reads as stuck. Each step of an experiment says what it is
  (``race 3 of 10 · follower cut``) and each known wait how far along it is (``waiting for
  the session to expire 1.2 / 2.0 s``).
- A display left spinning after the cell ended (an error, the stop button) lies. ``showing_progress``
  is a context manager: on the way out, normal or not, the display is closed and says how it
  ended (``done``, or ``stopped by KeyboardInterrupt``); the exception goes on, so the
  experiment's own ``finally`` blocks stop its processes.
- No widget frontend (a terminal, nbval, the book's unattended run): a widget would show as
  ``HBox(...)``. There it prints plain lines instead, one per step (never one per poll), each
  starting with ``LINE_PREFIX`` so that the notebooks' test run can tell a cell that showed
  progress from one that did not (notebooks/conftest.py).

How it shows: an ipywidgets bar with a label, in a Jupyter kernel (ipywidgets is already the
lab's widget toolkit, so no new dependency); plain lines elsewhere, or wherever
``LABKIT_PROGRESS=lines`` is set (the notebooks' test run and the book set it before any
kernel starts).

A progress opened while another is open (a race inside ``race_many``) is a part of it: its
lines carry the outer step (``races 2 of 3 › race · follower cut``) and, as a widget, it
shows below the outer bar. Experiments that run in threads side by side may each open one.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

LINE_PREFIX = "⏳ "          # every plain progress line starts with it (the notebooks' test run looks for it)
MODE_VARIABLE = "LABKIT_PROGRESS"   # "lines" or "widget"; unset: a widget in a Jupyter kernel, else lines
TICK_SECONDS = 0.25               # how often a widget refreshes its clock during a wait

_open: dict[int, list["Progress"]] = {}   # per thread: the progress displays it has open, outermost first
_open_guard = threading.Lock()


def display_mode() -> str:
    """"widget" in a Jupyter kernel (a frontend can draw it), else "lines"; ``LABKIT_PROGRESS``
    decides when it is set."""
    chosen = os.environ.get(MODE_VARIABLE, "").strip().lower()
    if chosen in ("lines", "widget"):
        return chosen
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return "widget" if shell is not None and type(shell).__name__ == "ZMQInteractiveShell" else "lines"


def line_stream():
    """Where plain lines go: the cell's output in an IPython kernel (nbval, the book), else
    stderr, as a command-line tool's progress does, so that what a script or a child process
    prints on stdout (a PID, a path, a table) stays its own."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return sys.stdout if shell is not None else sys.stderr


class Progress:
    """One experiment's progress: ``step(detail)`` for each step (``total`` of them, if known),
    ``waiting(what, seconds)`` around a wait whose length is known. Open it with ``showing_progress``."""

    def __init__(self, what: str, total: Optional[int] = None, outer: Optional["Progress"] = None,
                 step_lines: bool = True):
        self.what, self.total, self.outer, self.step_lines = what, total, outer, step_lines
        self.done, self.detail = 0, ""
        self.started = time.monotonic()
        self.wait_what: Optional[str] = None
        self.wait_seconds, self.wait_started = 0.0, 0.0
        self.ended: Optional[str] = None
        self.widget = None
        self.counting = threading.RLock()    # steps may come from threads at once (nodes starting)
        self.appeared = False                # shown yet (see showing_progress's ``after``)

    # -- what the experiment calls ------------------------------------------------------------
    def step(self, detail: str = "") -> None:
        """The next step begins (``detail``: what is special about it, e.g. the fault)."""
        with self.counting:
            self.done += 1
            self.detail = detail
            self.wait_what = None
            self.show(line=self.step_lines)

    @contextmanager
    def waiting(self, what: str, seconds: float) -> Iterator[None]:
        """Around a wait expected to last about ``seconds`` (a session timeout, a lease):
        the widget counts the seconds up to it; plain lines stay one per step."""
        self.wait_what, self.wait_seconds, self.wait_started = what, seconds, time.monotonic()
        self.show(line=False)
        try:
            yield
        finally:
            self.wait_what = None
            self.show(line=False)

    # -- what it shows ------------------------------------------------------------------------
    def position(self) -> str:
        """``race 3 of 10 · follower cut`` (with the outer steps before it, if any)."""
        if self.total and not self.done:
            count = f": {self.total} to go"
        else:
            count = f" {self.done} of {self.total}" if self.total else (f" {self.done}" if self.done else "")
        own = self.what + count + (f" · {self.detail}" if self.detail else "")
        return f"{self.outer.position()} › {own}" if self.outer is not None else own

    def text(self) -> str:
        now = time.monotonic()
        text = self.position()
        if self.wait_what is not None:
            text += f" · waiting for {self.wait_what} {now - self.wait_started:.1f} / {self.wait_seconds:.1f} s"
        return f"{text} ({now - self.started:.0f} s so far)"

    def fraction(self) -> float:
        if not self.total:
            return 0.0
        within = 0.0
        if self.wait_what is not None and self.wait_seconds > 0:
            within = min((time.monotonic() - self.wait_started) / self.wait_seconds, 0.99)
        return min((max(self.done - 1, 0) + within) / self.total, 1.0)

    def show(self, line: bool) -> None:
        if not self.appeared:
            return
        if self.widget is not None:
            self.widget.update(self)
        elif line:
            print(LINE_PREFIX + self.text(), file=line_stream(), flush=True)

    def close(self, error: Optional[BaseException]) -> None:
        """Mark it ended: done, or stopped by ``error`` (the display must not go on spinning)."""
        seconds = time.monotonic() - self.started
        count = f"{self.done} of {self.total}" if self.total else f"{self.done} steps"
        if error is None:
            self.ended = f"{self.what}: done, {count} in {seconds:.1f} s"
        else:
            self.ended = f"{self.what}: stopped by {type(error).__name__} after {count}, {seconds:.1f} s"
        self.wait_what = None
        if not self.appeared:
            return
        if self.widget is not None:
            self.widget.finish(self, ok=error is None)
        elif self.outer is None or error is not None:
            print(LINE_PREFIX + self.ended, file=line_stream(), flush=True)


class ProgressWidget:
    """The Jupyter display of one Progress: a bar and its label, refreshed by a clock thread
    while a wait is under way (the experiment's thread is busy waiting, not drawing)."""

    def __init__(self, shown: Progress):
        # imported here: a terminal run (``labkit torture``) should not pay for ipywidgets
        import ipywidgets
        from IPython.display import display
        self.bar = ipywidgets.FloatProgress(value=0.0, min=0.0, max=1.0, bar_style="info",
                                            layout=ipywidgets.Layout(width="30%"))
        self.label = ipywidgets.Label(value=shown.text())
        self.box = ipywidgets.HBox([self.bar, self.label])
        display(self.box)
        self.stop = threading.Event()
        self.clock = threading.Thread(target=self.tick, args=(shown,), daemon=True, name="progress clock")
        self.clock.start()

    def tick(self, shown: Progress) -> None:
        while not self.stop.wait(TICK_SECONDS):
            self.update(shown)

    def update(self, shown: Progress) -> None:
        self.label.value = shown.text()
        if shown.total:
            self.bar.value = shown.fraction()
        else:
            self.bar.bar_style = "info"

    def finish(self, shown: Progress, ok: bool) -> None:
        self.stop.set()
        self.bar.value = 1.0 if ok else self.bar.value
        self.bar.bar_style = "success" if ok else "danger"
        self.label.value = shown.ended or ""


@contextmanager
def showing_progress(what: str, total: Optional[int] = None, step_lines: bool = True,
                     after: float = 0.0) -> Iterator[Progress]:
    """Show the progress of ``what`` (``total`` steps, if known) while the block runs; closed,
    and marked done or stopped, however the block ends. Nested inside another one
    (in any thread), it is a part of that one. ``step_lines=False``: as plain lines, only its
    start and its end (for a caller that prints a line per step of its own). ``after``: show
    nothing unless the block is still running after that many seconds (a wait that is
    usually quick, like a leader election, stays silent when it is)."""
    with _open_guard:
        # inside this thread's innermost; a worker thread's first one, inside the main thread's
        # (the cell's experiment started the worker)
        mine = _open.setdefault(threading.get_ident(), [])
        cell = _open.get(threading.main_thread().ident, [])
        outer = mine[-1] if mine else (cell[-1] if cell else None)
        shown = Progress(what, total, outer, step_lines)
        mine.append(shown)

    def appear() -> None:
        with shown.counting:
            if shown.ended is None:
                shown.appeared = True
                if display_mode() == "widget":
                    shown.widget = ProgressWidget(shown)
                shown.show(line=outer is None or total is None)

    timer = threading.Timer(after, appear) if after > 0 else None
    if timer is None:
        appear()
    else:
        timer.daemon = True
        timer.start()
    error: Optional[BaseException] = None
    try:
        yield shown
    except BaseException as raised:      # KeyboardInterrupt too: say so, then let it stop the cell
        error = raised
        raise
    finally:
        if timer is not None:
            timer.cancel()
        with _open_guard:
            mine.remove(shown)
            if not mine:
                del _open[threading.get_ident()]
        with shown.counting:
            shown.close(error)


def innermost() -> Optional[Progress]:
    """The innermost progress open in this thread (else in the main thread's), if any."""
    with _open_guard:
        mine = _open.get(threading.get_ident()) or _open.get(threading.main_thread().ident) or []
        return mine[-1] if mine else None


def step_of_innermost(detail: str = "") -> None:
    """``Progress.step`` on the innermost open progress (see ``waiting_for``); nothing if none."""
    shown = innermost()
    if shown is not None:
        shown.step(detail)


@contextmanager
def waiting_for(what: str, seconds: float) -> Iterator[None]:
    """``Progress.waiting`` on the innermost progress open in this thread (else in the main
    thread's): a library function deep inside an experiment says what it waits for without
    being handed the display. Nothing happens when no progress is open."""
    shown = innermost()
    if shown is None:
        yield
        return
    with shown.waiting(what, seconds):
        yield


def repeat(what: str, runs: int, run_once: Callable[[], Any], detail: str = "",
           after: Optional[Callable[[int, Any], Any]] = None) -> list:
    """``runs`` calls of ``run_once()`` in a row, each shown as a step (``what 3 of 10 ·
    detail``); ``after(i, result)`` after each (e.g. print). The results, in order."""
    results = []
    with showing_progress(what, total=runs) as shown:
        for number in range(runs):
            shown.step(detail)
            results.append(run_once())
            if after is not None:
                after(number, results[-1])
    return results


def shows_progress(what: str, after: float = 0.0) -> Callable:
    """Decorator: the experiment runs inside a ``showing_progress(what)`` of its own, so that
    its cell says what is under way from its first second (its waits, by ``waiting_for``, say
    how far along)."""
    def decorate(experiment: Callable) -> Callable:
        @functools.wraps(experiment)
        def run(*args: Any, **kwargs: Any) -> Any:
            with showing_progress(what, after=after):
                return experiment(*args, **kwargs)
        return run
    return decorate
