"""Lease safety assumes bounded clock *drift*: a server whose monotonic clock runs fast
expires a session before the holder's deadline, unless the margin covers the drift.

``drift_race(lab, rate, margin)`` runs it on a real standalone ZooKeeper started with
``labkit.up(zookeeper=1, clocks=True)``. The server's monotonic clock (System.nanoTime, and
the timed waits of its session tracker) is made to run ``rate`` times as fast as the
machine's (``node.clock.monotonic_rate``). A ``ZooKeeperLock`` holder talks to it through a
``TcpLink`` with ``deadline_margin=margin``; a waiter queues behind it; the link is cut.
The holder gives up by its own clock, which runs at the machine's rate:

    holder gives up  = heard_at + timeout x (1 - margin) - heartbeat
    server frees     = touch + (timeout + rounding) / rate

``heard_at`` is the send time of the holder's newest answered request, ``touch`` that
request's arrival (a fraction of a millisecond later), ``heartbeat`` the holder's 0.1 s
heartbeat, and ``rounding``: ZooKeeper expires sessions on tick boundaries, rounded *up*
(ExpiryQueue.roundToNextInterval), so it adds between 0 and one tick (0.2 s here) of its
own clock. A margin m therefore covers a server clock fast by up to 1 / (1 - m) - 1: 20 %
covers 25 % fast and no more (the heartbeat and the rounding leave the holder a little
more), 40 % covers 67 %. ``fastest_covered_rate`` and ``surely_flips`` give the bounds.
Monotonic clocks ignore steps (``clock.step`` does not move them), not rate errors.

etcd's own clock cannot be made fast (Go reads it through the vDSO, which no preloaded library
reaches), but only the ratio of the two clocks matters: ``etcd_drift_race(lab, rate, margin)``
runs the holder, an ``EtcdSession`` + ``EtcdMutex``, in a Python process of its own whose
monotonic clock runs at 1/``rate`` of the machine's (``SlowClockHolder``: the same shim), so
etcd's clock is ``rate`` times as fast as the holder's. The holder stops its keep-alive; a
waiter in this process queues behind it:

    holder gives up  = heard_at + (ttl - margin x ttl) x rate      (its slow clock, in real time)
    server frees     = touch + ttl + [0, 0.5 s]                  (etcd checks for expired leases every 500 ms)

So EtcdSession's margin m covers a server clock fast by up to 1 / (1 - m) - 1 too: its
default, read from its signature (``etcd_default_margin``: 0.1), covers 11 % and no more;
``etcd_surely_flips`` is the rate above which the order flips whatever etcd's check interval.

What can fail: ``ClockUnavailable`` on a lab without ``clocks=True`` (ZooKeeper) or without a C
compiler (the etcd holder's shim), ``TimeoutError`` if the waiter never acquires, the client
library's errors if the server is unreachable, ``RuntimeError`` if the holder process fails.
"""
from __future__ import annotations

import inspect
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kazoo.client import KazooClient

from labkit.faults.relay import TcpLink
from labkit.lessons.client_deadlines import FirstEvents
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.zookeeper import ZooKeeperLock, heartbeat_for
from labkit.progress import shows_progress
from labkit.servers.runners.clock import Clock, prepare_clock
from labkit.servers.services.etcd import etcd_client
from labkit.servers.services.zookeeper import TICK_MS

TICK = TICK_MS / 1000.0
ETCD_LEASE_CHECK = 0.5   # s: etcd's lessor looks for expired leases every 500 ms (lessor.go, runLoop)


def fastest_covered_rate(timeout: float, margin: float) -> float:
    """The fastest server monotonic clock the holder's deadline covers for sure: at that
    rate the server frees the lock no sooner than the holder gives up, even when its tick
    rounding adds nothing."""
    return timeout / (timeout * (1 - margin) - heartbeat_for(timeout))


def surely_flips(timeout: float, margin: float) -> float:
    """The rate above which the server frees the lock before the holder gives up whatever
    its tick rounding (a whole tick of its own clock)."""
    return (timeout + TICK) / (timeout * (1 - margin) - heartbeat_for(timeout))


@dataclass(frozen=True)
class DriftOutcome:
    """Times in ms after the cut: ``gave_up_ms`` when the holder's deadline passed (its
    ``is_held`` went False), ``freed_ms`` when the waiter's watch fired (the server had
    deleted the holder's node), ``acquired_ms`` the waiter's grant. ``heard_ms`` (negative):
    the send time of the holder's newest answered request."""

    rate: float
    margin: float
    timeout_s: float
    heard_ms: float
    gave_up_ms: float
    freed_ms: float
    acquired_ms: float
    held_after_grant: bool   # the holder believed it held at the waiter's grant (ZooKeeper: its
    #                          deadline was still ahead; etcd: the holder asked just after said so)
    system: str = "ZooKeeper"   # "etcd": ``rate`` is etcd's clock against the holder's slow one

    @property
    def flipped(self) -> bool:
        """The server freed the lock while the holder still believed it held it."""
        return self.freed_ms < self.gave_up_ms

    @property
    def lead_ms(self) -> float:
        """How long before the server freed the lock the holder gave up (negative: after)."""
        return self.freed_ms - self.gave_up_ms

    def row(self) -> dict[str, Any]:
        return {"system": self.system, "server clock rate": self.rate, "margin": self.margin, "timeout (s)": self.timeout_s,
                "holder gave up (ms)": round(self.gave_up_ms), "server freed (ms)": round(self.freed_ms),
                "holder's lead (ms)": round(self.lead_ms), "order": "FLIPPED" if self.flipped else "safe"}


@shows_progress("a holder whose clock runs slow, against a waiter")
def drift_race(lab, rate: float, margin: float, timeout: float = 3.0) -> DriftOutcome:
    """Make the lab's first ZooKeeper server's monotonic clock run ``rate`` times as fast,
    cut a holder with ``deadline_margin=margin`` off from it and time who acts first (see
    the module docstring). ``timeout``: the holder's session timeout in seconds. The
    server's clock goes back to the machine's rate at the end (keeping the lead it gained)."""
    server = lab.zookeeper.nodes[0]
    name = f"/drift-{uuid.uuid4().hex[:8]}"
    events = FirstEvents()

    server.clock.monotonic_rate(rate)   # before the holder's session starts: all of it runs fast
    try:
        with TcpLink(server.endpoint) as link, ThreadPoolExecutor(1) as pool:
            holder_client = KazooClient(hosts=link.address, timeout=timeout, **lab.zookeeper.auth)
            # the waiter's session must outlive the race on the fast clock: 6 s lasts 6 / rate
            waiter_client = lab.zookeeper.client(timeout=6.0)
            try:
                holder_client.start(timeout=15)
                holder = ZooKeeperLock(holder_client, name, "holder", on_event=events.sink("holder"),
                                       deadline_margin=margin)
                waiter = ZooKeeperLock(waiter_client, name, "waiter", on_event=events.sink("waiter"))
                holder.acquire(timeout=30)
                waiting = pool.submit(waiter.acquire, 60)
                events.wait_for("waiter", "watch", 30)
                cut_at = time.monotonic()
                link.cut()
                waiting.result(timeout=60)
                acquired_at = events.wait_for("waiter", "acquired", 1)[0]
                gave_up_at = holder.give_up_at()       # no answer arrives after the cut: fixed
                # what is_held said at the grant, from its deadline (reading is_held now would
                # ask later, by however long this thread waited for the CPU: a loaded machine
                # read False 30 ms after a grant it had believed through)
                held_after_grant = gave_up_at > acquired_at
                heard_at = holder.contact.heard_at
                freed_at = events.first.get(("waiter", "woke"), (acquired_at, {}))[0]
                waiter.release()
                link.restore()                          # let the holder's client hear the news
            finally:
                for client in (waiter_client, holder_client):
                    client.stop()
                    client.close()
    finally:
        server.clock.monotonic_rate(1.0)
    return DriftOutcome(float(rate), float(margin), float(timeout), 1000 * (heard_at - cut_at),
                        1000 * (gave_up_at - cut_at), 1000 * (freed_at - cut_at), 1000 * (acquired_at - cut_at),
                        held_after_grant)


# -- etcd: the holder's clock runs slow ------------------------------------------------------
def etcd_default_margin() -> float:
    """EtcdSession's own default ``drift_margin``, read from its signature."""
    return inspect.signature(EtcdSession).parameters["drift_margin"].default


def etcd_fastest_covered_rate(margin: float) -> float:
    """The fastest etcd clock (against the holder's) that EtcdSession's margin covers for sure:
    the holder gives up after (1 - margin) x ttl of its clock, etcd after ttl of its own."""
    return 1 / (1 - margin)


def etcd_surely_flips(ttl: float, margin: float) -> float:
    """The rate above which etcd frees the lock before the holder gives up, even when its
    lessor finds the expired lease a whole check interval late."""
    return (ttl + ETCD_LEASE_CHECK) / (ttl * (1 - margin))


class SlowClockHolder:
    """A Python process (``python -m labkit.lessons.clock_drift``) whose monotonic clock, and
    every timed wait of its threads, runs at ``1 / rate`` of the machine's: the clock shim of
    docs/CLOCKS.md, LD_PRELOADed, with a clock file of its own. It holds EtcdMutex locks on
    EtcdSessions of its own, on the lab's first etcd member, when told (JSON lines on its
    stdin; each answer is stamped with this process's time.monotonic() on arrival). Close it."""

    def __init__(self, lab, rate: float):
        self._folder = tempfile.TemporaryDirectory(prefix="labkit-drift-holder-")
        env = prepare_clock(Path(self._folder.name), "holder")
        Clock(SimpleNamespace(name="holder", clock_problem=None, runner=SimpleNamespace(env=env))).monotonic_rate(1 / rate)
        self._arrived: list[tuple[float, dict | None]] = []   # (arrival, answer); None: the process exited
        self._changed = threading.Condition()
        self._errors = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen([sys.executable, "-m", "labkit.lessons.clock_drift"], env={**os.environ, **env},
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors,
                                        text=True, bufsize=1)
        threading.Thread(target=self._read, name="slow-clock-holder", daemon=True).start()
        try:
            self.ask("connect", endpoint=lab.etcd.nodes[0].endpoint, auth=lab.etcd.auth)
        except BaseException:
            self.close()
            raise

    def _read(self) -> None:
        for line in itertools.chain(self.process.stdout, [None]):
            with self._changed:
                self._arrived.append((time.monotonic(), line and json.loads(line)))
                self._changed.notify_all()

    def tell(self, op: str, **detail: Any) -> None:
        self.process.stdin.write(json.dumps({"op": op, **detail}) + "\n")
        self.process.stdin.flush()

    def answer(self, op: str, timeout: float = 60.0) -> tuple[float, dict]:
        """The oldest answer to ``op`` not taken yet, with its arrival time (answers to other
        ops stay for their callers)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for index, (at, message) in enumerate(self._arrived):
                    if message is None:
                        self._errors.seek(0)
                        raise RuntimeError(f"the slow-clock holder exited: {self._errors.read()[-1500:]}")
                    if message["op"] == op:
                        del self._arrived[index]
                        if message.get("error"):
                            raise RuntimeError(f"the slow-clock holder failed on {op!r}: {message['error']}")
                        return at, message
                if not self._changed.wait(max(deadline - time.monotonic(), 0)) and time.monotonic() >= deadline:
                    raise TimeoutError(f"the slow-clock holder did not answer {op!r} within {timeout:.0f} s")

    def ask(self, op: str, timeout: float = 60.0, **detail: Any) -> tuple[float, dict]:
        self.tell(op, **detail)
        return self.answer(op, timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.tell("quit")
                self.process.wait(timeout=15)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=15)
        for stream in (self.process.stdin, self.process.stdout, self._errors):
            stream.close()
        self._folder.cleanup()

    def __enter__(self) -> "SlowClockHolder":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


@shows_progress("an etcd holder whose clock runs slow, against a waiter")
def etcd_drift_race(lab, holder: SlowClockHolder, rate: float, margin: float | None = None,
                    ttl: int = 3) -> DriftOutcome:
    """One race (see the module docstring): ``holder`` (a SlowClockHolder made with ``rate``)
    takes a lock on a session with ``drift_margin=margin`` (None: EtcdSession's default) and
    stops its keep-alive; a waiter here queues behind it. Times are ms after the stop."""
    name = f"/drift-etcd-{uuid.uuid4().hex[:8]}"
    events = FirstEvents()
    _, held = holder.ask("hold", name=name, ttl=ttl, margin=margin)
    waiter_session = EtcdSession(lab.etcd.client(node=lab.etcd.nodes[0]), ttl=max(10, 3 * ttl))
    try:
        waiter = EtcdMutex(waiter_session, name, "waiter", on_event=events.sink("waiter"))
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(waiter.lock, 60)
            events.wait_for("waiter", "watch", 30)
            stop_at = time.monotonic()
            _, stopped = holder.ask("stop")
            waiting.result(timeout=60)
        acquired_at = events.wait_for("waiter", "acquired", 1)[0]
        held_after_grant = holder.ask("held")[1]["held"]
        gave_up_at = holder.answer("gave_up", timeout=10 + 2 * ttl * rate)[0]
        freed_at = events.first.get(("waiter", "woke"), (acquired_at, {}))[0]
        holder.ask("close")
        waiter.unlock()
    finally:
        waiter_session.close()
    # the newest acknowledged keep-alive was sent (ttl - margin) - remaining of the holder's clock before the stop
    heard_s = -((held["ttl"] - held["margin"]) - stopped["remaining"]) * rate
    return DriftOutcome(float(rate), held["drift_margin"], float(held["ttl"]), 1000 * heard_s,
                        1000 * (gave_up_at - stop_at), 1000 * (freed_at - stop_at), 1000 * (acquired_at - stop_at),
                        held_after_grant, system="etcd")


def _hold_with_a_slow_clock() -> None:
    """The SlowClockHolder's side: one JSON command a line on stdin, one answer a line on stdout."""
    writing = threading.Lock()

    def say(**message: Any) -> None:
        with writing:
            print(json.dumps(message), flush=True)

    client = session = mutex = None
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        try:
            if op == "connect":
                host, port = command["endpoint"].rsplit(":", 1)
                client = etcd_client(host, int(port), **command["auth"])
                say(op=op)
            elif op == "hold":
                margin = etcd_default_margin() if command["margin"] is None else command["margin"]
                session = EtcdSession(client, ttl=command["ttl"], drift_margin=margin)
                mutex = EtcdMutex(session, command["name"], "holder")
                mutex.lock(timeout=30)
                session.add_done_callback(lambda: say(op="gave_up"))
                say(op=op, ttl=session.ttl, margin=session.margin, drift_margin=margin)
            elif op == "stop":
                session.stop_keepalive()
                say(op=op, remaining=session.remaining_ttl())
            elif op == "held":
                say(op=op, held=mutex.is_held)
            elif op == "close":
                session.close()
                say(op=op)
            elif op == "quit":
                break
        except Exception as error:  # the parent raises it, with the op
            say(op=op, error=f"{type(error).__name__}: {error}")
    if client is not None:
        client.close()


if __name__ == "__main__":
    _hold_with_a_slow_clock()
