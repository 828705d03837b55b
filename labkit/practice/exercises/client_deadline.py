"""Exercise (lesson 07): when must a cut-off holder stop, by its own clock?

A holder cut off from the coordinator hears nothing; the server expires its lease a TTL
after it last received a keep-alive. The holder cannot see that moment, only bound it:
the server got my last acknowledged keep-alive after I sent it, so the lease lives at
least until ``sent_at + ttl``. Stop before that, with a margin (Chubby's jeopardy).

    def stop_at(sent_at, replied_at, ttl, margin) -> float
        # sent_at / replied_at: my monotonic clock when I sent my last acknowledged
        # keep-alive and when its reply came; ttl and margin in seconds

``check_client_deadline(stop_at, lab)`` first asks it a few cases by pure logic, then runs
it for real: a lease kept alive in Redis (PEXPIRE) through a ``TcpLink`` whose replies
come back slowly (each keep-alive also runs ``WAIT``, which holds the reply), the link is
cut, and the holder's deadline is compared with the moment the server deleted the key.
Counting from the reply is late by the reply's delay; no margin stops at the same instant
the server may expire.

What can fail: ``ExerciseError`` if ``stop_at`` is not callable; redis-py's errors if
the lab's Redis cannot be reached.
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Callable

import redis

from labkit.faults.relay import TcpLink
from labkit.practice.exercises.report import Report, learner_function
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

PROPERTIES = ("counts from the send", "keeps a margin", "stops before the server expires")

# (sent_at, replied_at, ttl, margin): the reply came 0.3 s after the send
CASES = [(100.0, 100.3, 2.0, 0.2), (5.0, 5.05, 10.0, 0.5), (0.0, 1.0, 3.0, 0.1)]


def check_client_deadline(stop_at: Callable, lab: Lab, ttl: float = 1.5, margin: float = 0.1,
                          reply_delay: float = 0.4) -> Report:
    """Judge ``stop_at`` on the cases, then on a real cut link to the lab's Redis."""
    learner_function(stop_at, hint="pass stop_at(sent_at, replied_at, ttl, margin) -> float")
    report = Report("client-side deadline exercise", properties=PROPERTIES)
    report.scenarios.append("three cases by pure logic")
    if _cases(report, stop_at):   # a wrong answer still runs for real: the cut link shows what it costs
        report.scenarios.append(f"a lease of {ttl} s kept alive through a relay (replies {reply_delay} s late), "
                                "then the relay is cut")
        _cut_link(report, stop_at, lab, ttl, margin, reply_delay)
    report.stop_clock()
    return report


def _cases(report: Report, stop_at: Callable) -> bool:
    """Judge the cases, stopping at the first wrong one; False only if ``stop_at`` raised."""
    for sent_at, replied_at, ttl, margin in CASES:
        try:
            answer = float(stop_at(sent_at, replied_at, ttl, margin))
        except Exception as error:
            report.judge("counts from the send", False, f"stop_at raised {type(error).__name__}: {error}", "raised")
            return False
        latest = sent_at + ttl - margin
        case = f"sent at {sent_at}, reply at {replied_at}, ttl {ttl}, margin {margin}"
        if answer >= replied_at + ttl - margin - 1e-9 and replied_at > sent_at:
            report.judge("counts from the send", False,
                         f"{case}: you stop at {answer:g}, counted from the reply; the server started the TTL "
                         f"when it received the keep-alive, which can be as early as the send: stop by {latest:g}",
                         "counts from the reply")
            return True
        if answer > latest + 1e-9:
            report.judge("keeps a margin", False,
                         f"{case}: you stop at {answer:g}, later than sent_at + ttl - margin = {latest:g}: with no "
                         "margin you stop at the very instant the server may expire the lease (and clocks drift)",
                         "no margin")
            return True
        if answer < sent_at + ttl / 2:
            report.judge("keeps a margin", False, f"{case}: you stop at {answer:g}, less than half a TTL after "
                         "the send: every short blip would make the holder give up", "too early")
            return True
    report.judge("counts from the send", True, "every deadline counts from when the keep-alive was sent")
    report.judge("keeps a margin", True, "every deadline keeps the margin before sent_at + ttl")
    return True


def _cut_link(report: Report, stop_at: Callable, lab: Lab, ttl: float, margin: float, reply_delay: float) -> None:
    key = f"exercise:lease:{uuid.uuid4().hex[:8]}"
    watcher = lab.redis.client()
    watcher.set(key, "holder", px=int(ttl * 1000))
    gone = threading.Event()
    expired_at: list[float] = []

    def watch() -> None:
        # EXISTS makes Redis check the expiry now: the key is gone from the first ms after it
        while watcher.exists(key):
            time.sleep(0.002)
        expired_at.append(time.monotonic())
        gone.set()

    with TcpLink(f"{lab.redis.host}:{lab.redis.port}") as link:
        host, port = link.address.rsplit(":", 1)
        holder = redis.Redis(host=host, port=int(port), socket_timeout=reply_delay + 0.3, **lab.redis.auth)
        threading.Thread(target=watch, daemon=True).start()
        last: tuple[float, float] | None = None
        try:
            for _ in range(3):
                sent_at = time.monotonic()
                pipe = holder.pipeline(transaction=False)
                pipe.pexpire(key, int(ttl * 1000))
                pipe.execute_command("WAIT", 99, int(reply_delay * 1000))  # no replica answers: a slow reply
                pipe.execute()
                last = (sent_at, time.monotonic())
            link.cut()
            deadline = float(stop_at(last[0], last[1], ttl, margin))
            wait_until(gone.is_set, "the server to expire the lease key", timeout=ttl + 10)
        except Exception as error:
            report.judge("stops before the server expires", False,
                         f"the run failed: {type(error).__name__}: {error}", "raised")
            return
        finally:
            holder.close()
            watcher.delete(key)
            watcher.close()
    lead = expired_at[0] - deadline
    report.judge("stops before the server expires", lead > 0,
                 f"the link was cut; the holder stops {lead * 1000:.0f} ms before the server deleted its key"
                 if lead > 0 else
                 f"the link was cut; the server deleted the key {-lead * 1000:.0f} ms BEFORE the holder stopped: "
                 "for that long another client could hold the lock while this one still writes",
                 None if lead > 0 else "stops too late")
