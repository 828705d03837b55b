"""The labs this process started, and what re-running a notebook cell does to them.

A lab this process started outside a ``with`` block (``lab = labkit.up()``, the notebook
style) is stopped by the next ``labkit.up()`` of the same process, with the client groups
and panels bound to it, and one line says so: re-running the cell that starts a lab must
not pile up labs of 100 to 300 MB each. At exit, every lab this process owns is stopped.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Protocol


class LiveLab(Protocol):
    """A lab as this module sees it: labkit.servers.lab.Lab (which imports this module)."""

    owned: bool
    detached: bool
    owner_pid: int
    started_at: float | None

    @property
    def replaceable(self) -> bool: ...
    def sizes(self) -> str: ...
    def close_bound(self) -> list[str]: ...
    def down(self) -> None: ...


_LIVE_LABS: set[LiveLab] = set()
_REPLACING = threading.Lock()  # two threads calling up() at once stop a previous lab once


def this_process() -> str:
    """"this kernel" in a running Jupyter kernel, else "this process" (for messages)."""
    kernel_app = sys.modules.get("ipykernel.kernelapp")  # imported is not enough: pytest may import it
    in_kernel = kernel_app is not None and kernel_app.IPKernelApp.initialized()
    return "this kernel" if in_kernel else "this process"


def stop_previous_labs() -> list[LiveLab]:
    """Stop every lab this process started outside a ``with`` block (``Lab.replaceable``),
    and what is bound to it, and say so in one line. Returns the labs stopped."""
    with _REPLACING:
        previous = sorted((lab for lab in list(_LIVE_LABS) if lab.replaceable), key=lambda lab: lab.started_at)
        closed = []
        for lab in previous:
            closed += lab.close_bound()
            lab.down()
    if previous:
        who = this_process()
        which = "the lab" if len(previous) == 1 else f"the {len(previous)} labs"
        when = " and ".join(f"{time.strftime('%H:%M:%S', time.localtime(lab.started_at))} ({lab.sizes()})"
                            for lab in previous)
        also = f", with {', '.join(closed)}," if closed else ""
        print(f"stopped {which} {who} started at {when}{also} before starting a new one "
              f"(labkit.up(keep_previous=True) keeps {'it' if len(previous) == 1 else 'them'})", flush=True)
    return previous


@atexit.register
def _stop_owned_labs() -> None:
    for lab in list(_LIVE_LABS):
        if lab.owned and not lab.detached and lab.owner_pid == os.getpid():
            lab.down()


def track(lab: LiveLab) -> None:
    """Count ``lab`` among this process's labs (``up`` does, before its servers start)."""
    _LIVE_LABS.add(lab)


def forget(lab: LiveLab) -> None:
    """``lab`` is down: nothing to stop for it any more."""
    _LIVE_LABS.discard(lab)
