"""Go's ``concurrency.Mutex`` as shipped in ``etcdctl lock``: a chain of ``etcdctl lock NAME --
cat FIFO`` processes, one per contender, each with its own client and session.

etcdctl takes the lock, then runs its command, and releases when the command exits. The
command is ``cat`` on a FIFO of its own: the bench opens the FIFO for writing, and that open
returns the moment the holder's ``cat`` opens it (the holder started); closing it ends
``cat`` (the holder lets go: etcdctl deletes its key, the next etcdctl's watch fires, it
returns from Lock and starts its own ``cat``). A hand-off is timed from the close to the next
FIFO's open returning, in this process, less a baseline measured in turns with it: the same
``cat`` started (posix_spawn, by an idle process of its own, as etcdctl starts it) until its
open, plus its close until the process is reaped, with no lock around it (what the command's
own start and end cost).

The contenders queue one at a time, each once the one before watches at the server (the
members' ``etcd_debugging_mvcc_watcher_total``), so the order is the start order; Go's mutex
serves by create revision. A release wakes only the next waiter (its watch is on its
predecessor's key), so nothing needs to settle between releases. Wakeups are the watch
events the members sent for each release (``etcd_debugging_mvcc_events_total``).

What can fail: ``BenchTimeout`` when an etcdctl does not queue or does not start within the
budget (its stderr is in the message). Every etcdctl and cat is stopped on the way out.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from labkit.bench.processes.targets import GO_MUTEX
from labkit.bench.scale.crowd_handoff import BenchTimeout, server_counters
from labkit.servers.services.etcd import find_etcdctl
from labkit.stats import summarize
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

BASELINE_SAMPLES = 3   # baseline samples after each hand-off: a loaded machine spreads them widely
WATCHERS = re.compile(r"^etcd_debugging_mvcc_watcher_total\s+(\S+)", re.MULTILINE)


def watchers(lab: Lab) -> int:
    """Watchers the etcd members hold now, summed."""
    return sum(round(float(found.group(1))) for node in lab.etcd.nodes
               if (found := WATCHERS.search(node.metrics())))


def open_for_writing(path: str, timeout: float) -> tuple[int, float]:
    """Open the FIFO ``path`` for writing: returns (fd, time.monotonic() when the reader opened
    it). Raises TimeoutError when no reader comes within ``timeout`` (the blocked open is then
    released by opening the reading end here)."""
    opened: dict[str, Any] = {}
    done = threading.Event()

    def open_it() -> None:
        opened["fd"] = os.open(path, os.O_WRONLY)
        opened["at"] = time.monotonic()
        done.set()

    threading.Thread(target=open_it, name=f"fifo-{os.path.basename(path)}", daemon=True).start()
    if not done.wait(timeout):
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # lets the blocked open return
        done.wait(5)
        os.close(reader)
        if "fd" in opened:
            os.close(opened["fd"])
        raise TimeoutError(f"nobody opened {path} within {timeout:.0f} s")
    return opened["fd"], opened["at"]


# The baseline's spawner, a process of its own that sleeps between samples as an etcdctl waiter
# does (spawned from the busy bench process, the same cat took longer than a whole hand-off on
# a loaded machine): for each line "CAT FIFO" it starts `cat FIFO`, reaps it, and prints
# time.monotonic() at the spawn and at the reaping.
SPAWNER = ("import os, sys, time\n"
           "for line in sys.stdin:\n"
           "    cat, fifo = line.split()\n"
           "    spawned = time.monotonic()\n"
           "    os.waitpid(os.posix_spawn(cat, [cat, fifo], os.environ), 0)\n"
           "    print(spawned, time.monotonic(), flush=True)\n")


class Spawner:
    """Measures the baseline: ``cat FIFO`` started and reaped by the idle SPAWNER process."""

    def __init__(self, cat: str, fifo: str):
        self.cat, self.fifo = cat, fifo
        self.process = subprocess.Popen([sys.executable, "-S", "-c", SPAWNER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, start_new_session=True)

    def sample(self, timeout: float) -> float:
        """Seconds ``cat FIFO`` costs outside any lock: spawned until it opened the FIFO (this
        process's open returned), plus closed here until the spawner reaped it."""
        self.process.stdin.write(f"{self.cat} {self.fifo}\n")
        self.process.stdin.flush()
        fd, opened = open_for_writing(self.fifo, timeout)
        closed = time.monotonic()
        os.close(fd)
        spawned, reaped = (float(word) for word in self.process.stdout.readline().split())
        return (opened - spawned) + (reaped - closed)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()


def stop(processes: list[subprocess.Popen], grace: float = 10.0) -> None:
    """SIGINT to each etcdctl's group (a waiter gives up, a holder's cat ends and etcdctl lets
    go: it unlocks on SIGINT), then SIGKILL to whatever is left after ``grace`` seconds."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        process.stderr.close()


def measure_etcdctl_chain(lab: Lab, n: int, releases: int, name: str, say: Callable[[str], Any],
                          budget: float = 120.0) -> dict[str, Any]:
    """The etcdctl row: ``n`` etcdctl processes queued on ``name``, ``releases`` hand-offs, each
    followed by BASELINE_SAMPLES samples of the baseline."""
    cat = shutil.which("cat")
    if cat is None:
        raise BenchTimeout("no `cat` on PATH: the etcdctl chain runs it as each holder's command",
                           hint="install coreutils")
    releases = min(releases, n - 1)
    folder = tempfile.mkdtemp(prefix="labkit-etcdctl-chain-")
    fifos = [os.path.join(folder, f"contender-{number}") for number in range(n)] + [os.path.join(folder, "baseline")]
    for fifo in fifos:
        os.mkfifo(fifo, 0o600)
    argv = [lab.etcd.etcdctl_path or find_etcdctl(), "--endpoints", ",".join(lab.etcd.endpoints), "lock", name, "--", cat]
    processes: list[subprocess.Popen] = []
    began = time.monotonic()
    fd = -1
    spawner = Spawner(cat, fifos[-1])
    try:
        base = watchers(lab)
        for number in range(n):
            processes.append(subprocess.Popen(argv + [fifos[number]], env=lab.etcd.etcdctl_environment(),
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                              start_new_session=True))   # a group: etcdctl and its cat
            if number == 0:
                fd, _ = open_for_writing(fifos[0], budget)
            else:
                wait_until(lambda: watchers(lab) == base + number or processes[-1].poll() is not None,
                           f"etcdctl {number} to watch", budget, poll=0.005)
                if processes[-1].poll() is not None:
                    raise BenchTimeout(f"etcdctl {number} exited: {processes[-1].stderr.read().decode()[-500:]}")
            if number % 10 == 9 or number == n - 1:
                say(f"{GO_MUTEX}: {number + 1}/{n} processes queued")
        started_s = time.monotonic() - began
        spans, baseline, wakeups = [], [], []
        for number in range(releases):
            before = server_counters(lab, "etcd")["watch_events"]
            released = time.monotonic()
            os.close(fd)
            fd, started = open_for_writing(fifos[number + 1], budget)
            processes[number].wait(budget)
            wait_until(lambda: watchers(lab) == base + n - 2 - number, "the woken watch to go", budget, poll=0.005)
            wakeups.append(round(server_counters(lab, "etcd")["watch_events"] - before))
            spans.append((released, started))
            baseline += [spawner.sample(budget) for _ in range(BASELINE_SAMPLES)]
    except (TimeoutError, subprocess.TimeoutExpired) as error:
        raise BenchTimeout(f"{GO_MUTEX}: {error}", hint="the machine may be overloaded: try a smaller N") from None
    finally:
        if fd >= 0:
            os.close(fd)
        stop(processes)
        spawner.close()
        shutil.rmtree(folder, ignore_errors=True)
    correction = summarize(baseline)["p50_ms"]
    return {"row": GO_MUTEX, "n": n, "service": "etcd", "handoffs": len(spans), "spans": spans,
            "handoff_ms": [round(1000 * (start - end) - correction, 3) for end, start in spans],
            "raw_handoff_ms": [round(1000 * (start - end), 3) for end, start in spans],
            "baseline_ms": [round(1000 * seconds, 3) for seconds in baseline], "baseline_p50_ms": correction,
            "wakeups": wakeups, "wakeups_from": "server: watch events sent (/metrics)", "client_wakeups": None,
            "breakdown_p50_ms": {"the command's own start and end (baseline, subtracted)": correction},
            "start_s": round(started_s, 1)}
